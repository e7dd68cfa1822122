"""Benchmark: /validate and /mutate over TLS with keep-alive, on the reviews a GPU-sharing cluster
really sends (tests/support/review_bodies.py, each encoded as kube-apiserver encodes it), against the real
`gpushare serve` (logging, metrics and auth at their defaults) and against the plain stack's
floor: Flask under stock gunicorn `gthread`, same TLS, same core, no project code, parsing the
review with the standard `json` module (bench/plain_floor.py).

    python bench/admission.py [--rounds 3] [--seconds 3] [--connections 16]
                              [--worker webhook] [--worker gthread] [--tool auto|wrk|python]

The primary figure is server CPU time per review (the server process tree's user+sys seconds over
the requests it answered), far steadier on a shared host than requests/s; floor/project is the
share of the project's cost that is the stack itself. Target: >= 0.9 for every body on /validate
and /mutate at 16 connections with the project's worker (`server.worker: webhook`). `--worker`
picks the worker of the project's server (GPUSHARE_SERVER__WORKER); given twice, both servers
run and are measured in the same rounds, printed side by side.

On a shared VM the same server's throughput moves by 20-40 % between minutes, so each round
measures every server on a body back to back, in alternating order (drift hits them alike), and
the figure per body is the median over the rounds, of each server's CPU per review and of the
per-round ratios. bench/admission_cost.py counts instructions instead, which do not move with load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import drive  # noqa: E402
from certs.issue import ensure_serving_certs  # noqa: E402
from tests.support.go_json import api_server_json  # noqa: E402
from tests.support.processes import cpu_seconds, free_port, host_speed, https_server  # noqa: E402
from tests.support.review_bodies import body_set, realistic_pod, review_for  # noqa: E402

__all__ = ["api_server_json", "realistic_review_body", "review_for"]
FLOOR = "floor"
ENDPOINTS = ("/validate", "/mutate")


def realistic_review_body() -> bytes:
    """The realistic review (tests/data/pod-realistic.json, about 4 KB) as the API server sends it."""
    return api_server_json(review_for(realistic_pod()))


def _commands(certs: Path, workers: list[str], pin: bool) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Server name -> (command, environment) for each project worker and the floor."""
    pin_server = ["taskset", "-c", "0"] if pin else []  # servers on CPU 0, the load on CPU 1
    bin_dir = Path(sys.executable).parent
    servers = {f"project/{worker}": ([*pin_server, str(bin_dir / "gpushare"), "serve", "--host", "127.0.0.1",
                                      "--port", "{port}", "--cert-dir", str(certs)],
                                     {"GPUSHARE_SERVER__WORKER": worker}) for worker in workers}
    servers[FLOOR] = ([*pin_server, str(bin_dir / "gunicorn"), "-c", str(ROOT / "bench" / "plain_floor.py"),
                       "--chdir", str(ROOT), "bench.plain_floor:app"],
                      {"FLOOR_PORT": "{port}", "FLOOR_CERTFILE": str(certs / "tls.crt"),
                       "FLOOR_KEYFILE": str(certs / "tls.key")})
    return servers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--worker", action="append", choices=["webhook", "gthread"],
                        help="the project's worker (server.worker); give it twice for both (default: webhook)")
    parser.add_argument("--body", action="append", help="only the bodies whose name holds this text")
    parser.add_argument("--tool", choices=["auto", "wrk", "python"], default="auto")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="do not pin servers to CPU 0 and the load generator to CPU 1")
    args = parser.parse_args()
    workers = list(dict.fromkeys(args.worker or ["webhook"]))
    bodies = {name: body for name, body in body_set().items()
              if not args.body or any(part in name for part in args.body)}
    for name, body in bodies.items():
        print(f"body {name!r}: {len(body)} bytes", flush=True)
    print(f"host: {os.getloadavg()[0]:.2f} load average, {host_speed():.0f} ns per empty loop (about 15 idle)")
    cpu: dict[tuple[str, str, str], list[float]] = {}
    errors = 0
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        certs = Path(tmp, "certs")
        ensure_serving_certs(certs, ["localhost", "127.0.0.1"])
        ca = certs / "ca.crt"
        ports, pids = {}, {}
        for server, (command, env) in _commands(certs, workers, args.pin).items():
            ports[server] = port = free_port()
            process = stack.enter_context(https_server(
                [part.replace("{port}", str(port)) for part in command], ca, port,
                Path(tmp, f"{server.replace('/', '-')}.log"),
                env={key: value.replace("{port}", str(port)) for key, value in env.items()}))
            pids[server] = process.pid
            for body in bodies.values():
                for endpoint in ENDPOINTS:
                    drive(f"https://localhost:{port}{endpoint}", str(ca), body, 4, 1, args.tool)  # warm-up
        for round_no in range(1, args.rounds + 1):
            for name, body in bodies.items():
                for endpoint in ENDPOINTS:
                    order = list(ports) if round_no % 2 else list(ports)[::-1]
                    for server in order:
                        before = cpu_seconds(pids[server])
                        result = drive(f"https://localhost:{ports[server]}{endpoint}", str(ca), body,
                                       args.connections, args.seconds, args.tool, cpu="1" if args.pin else None)
                        us = (cpu_seconds(pids[server]) - before) / max(result.requests, 1) * 1e6
                        cpu.setdefault((server, name, endpoint), []).append(us)
                        errors += result.errors
                        print(f"round {round_no} {server:16} {name:30} {endpoint:9} {result.rps:7.0f} req/s "
                              f"p50 {result.p50_ms:6.2f} ms p99 {result.p99_ms:6.2f} ms errors {result.errors} "
                              f"server CPU {us:5.0f} us/review ({result.tool})", flush=True)
    print(f"\nhost after: {os.getloadavg()[0]:.2f} load average, {host_speed():.0f} ns per empty loop; "
          f"{errors} errors")
    print(f"\nserver CPU per review at {args.connections} connections, median of {args.rounds} rounds "
          "(floor = plain Flask + stock gunicorn gthread; floor/project is the median of the per-round ratios, "
          "target >= 0.9 with the webhook worker):\n")
    projects = [server for server in ports if server != FLOOR]
    head = "| body | endpoint | floor | " + " | ".join(f"{p} | floor/{p.split('/')[1]}" for p in projects) + " |"
    print(head)
    print("|" + "---|" * head.count(" | ") + "---|")
    for name in bodies:
        for endpoint in ENDPOINTS:
            floor = cpu[(FLOOR, name, endpoint)]
            cells = [f"{statistics.median(floor):.0f} µs"]
            for server in projects:
                mine = cpu[(server, name, endpoint)]
                ratio = statistics.median(f / m for f, m in zip(floor, mine, strict=True))
                cells += [f"{statistics.median(mine):.0f} µs", f"{ratio:.2f}"]
            print(f"| {name} | {endpoint} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
