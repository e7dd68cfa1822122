"""Benchmark: the real `gpushare serve` driven like a busy API server drives a webhook.

    python bench/burst.py [--seconds 10] [--connections 16,32,50,100,200] [--timeout 5s] [--tool auto|c|python]
                          [--max-idle N]

Closed loop: each connection sends its next review as soon as the last is answered (the API
server opens one connection per concurrent webhook call and reuses it), the realistic 4 KB Pod
review to ``/validate?timeout=5s`` (the query parameter the API server appends; 5 s is the
deployed ``timeoutSeconds``), one server process. For each connection count it prints req/s
(every answer, 200 or 503), p50/p99/max latency and the share refused with 503.
Target: 0 % refused up to 200 connections, max latency below half the webhook timeout.
The load comes from bench/openloop.c when it can be built (server pinned to CPU 0, client to
CPU 1), else from the Python client, unpinned. ``--max-idle N`` starts each row with N connections
open and keeps at most N idle, dialling the rest, as kube-apiserver's Go client does (it keeps 25
idle connections per webhook host); that load comes from bench/netpoll.c.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import openloop  # noqa: E402
from bench.admission import realistic_review_body  # noqa: E402
from tests.support.processes import https_server, serve_on_loopback  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", default="16,32,50,100,200")
    parser.add_argument("--timeout", default="5s", help="the ?timeout= value sent ('' for none)")
    parser.add_argument("--tool", choices=["auto", "c", "python"], default="auto")
    parser.add_argument("--processes", type=int, default=2, help="client processes (Python client)")
    parser.add_argument("--max-idle", type=int, default=0,
                        help="keep at most this many idle connections and dial the rest (kube-apiserver: 25)")
    args = parser.parse_args()
    if args.max_idle:
        binary = openloop.native_client("netpoll") if args.tool != "python" else None
        if binary is None:
            raise SystemExit("--max-idle needs the netpoll C client (cc and OpenSSL headers)")
    else:
        binary = openloop.native_client() if args.tool in ("auto", "c") else None
    if args.tool == "c" and binary is None:
        raise SystemExit("the C client could not be built (needs cc and OpenSSL headers)")
    path = f"/validate?timeout={args.timeout}" if args.timeout else "/validate"
    payload = openloop.request_bytes(path, realistic_review_body())
    pin = binary is not None
    with tempfile.TemporaryDirectory() as tmp:
        port, ca, command = serve_on_loopback(tmp, pin=pin)

        def load(seconds: float, connections: int) -> openloop.Summary:
            if binary is not None:
                warm = min(args.max_idle, connections) if args.max_idle else connections
                return openloop.run_native(binary, "closed", "127.0.0.1", port, str(ca), payload,
                                           seconds=seconds, connections=connections, warm=warm, cpu=1,
                                           max_idle=args.max_idle)
            return openloop.summarize(openloop.run("closed", args.processes, "127.0.0.1", port, str(ca), payload,
                                                   seconds=seconds, connections=connections))

        with https_server(command, ca, port, Path(tmp, "server.log")):
            load(1, 8)  # warm-up
            print(f"closed loop, {args.seconds:g} s per row, POST {path}, realistic 4 KB Pod review, "
                  f"1 server process{' pinned to CPU 0' if pin else ''}:")
            print("| concurrent connections | req/s | p50 | p99 | max | refused with 503 |")
            print("|---|---|---|---|---|---|")
            worst = 0.0
            refused_any = False
            for connections in (int(c) for c in args.connections.split(",")):
                summary = load(args.seconds, connections)
                refused = summary.statuses.get(503, 0)
                share = 100 * refused / max(summary.answered, 1)
                others = {k: v for k, v in summary.statuses.items() if k not in (200, 503)}
                extra = f" (other: {others}, unanswered {summary.unanswered})" if others or summary.unanswered else ""
                extra += f" ({summary.dials} connections dialled)" if args.max_idle else ""
                print(f"| {connections} | {summary.answered / args.seconds:,.0f} | {summary.p50 * 1000:.0f} ms "
                      f"| {summary.p99 * 1000:.0f} ms | {summary.max * 1000:.0f} ms | {share:.1f} %{extra} |",
                      flush=True)
                worst = max(worst, summary.max)
                refused_any = refused_any or refused > 0 or summary.unanswered > 0
    half = 2.5 if not args.timeout else _seconds(args.timeout) / 2
    print(f"\ntarget: 0 % refused -> {'met' if not refused_any else 'NOT met'}; max latency < {half:g} s "
          f"-> {'met' if worst < half else 'NOT met'} ({worst:.2f} s)")


def _seconds(value: str) -> float:
    return float(value.rstrip("s"))


if __name__ == "__main__":
    main()
