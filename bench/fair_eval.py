"""Benchmark: fair evaluation. Large reviews cannot starve small ones, and what the largest review
the API server can send costs, kind by kind, on the real `gpushare serve`, loopback only.

    python bench/fair_eval.py [--seconds 20] [--worker webhook] [--worker gthread] [--kind Pod]
                              [--reps 2] [--skip-costs] [--skip-flood]

1. Flood (both workers by default, one after the other in one run): six TLS connections each send
   reviews at the body limit back to back (4 MiB as the API server encodes them, HTML characters
   escaped: a Pod of ~7,000 containers, a Volcano Job of ~5,900 tasks, a Deployment of ~9,000
   containers, an Argo Workflow of ~9,000 templates), while two legitimate clients send the
   realistic 4 KB Pod review to /validate?timeout=5s every 0.2 s, one on a kept-alive connection,
   one on a new connection per review. Prints the legitimate reviews answered (200) of those sent,
   p50/p99/max, and what the flood's reviews got. Target: >= 99 % answered, p99 < 1 s.
2. Cost: for every kind the webhook judges and every shape of tests/support/large_reviews.py, a CREATE at
   the body limit and an UPDATE whose object and old object are each at etcd's 1.5 MiB (the
   largest review the API server can send, about 3 MiB), and a CREATE grown to exactly the
   evaluation budget (the costliest review still judged in full), each sent ``--reps`` times to /validate
   and /mutate on one kept-alive connection to each worker; prints the server's CPU per review
   (the whole server process: reading, TLS, decoding, judging, answering) per MiB of body, the
   verdict, and the answer's size. Target: at most 50 ms per MiB on this two-core host.

The host's load average is printed before and after: on a shared machine, CPU per review moves
with the other tenants.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import ssl
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.admission import realistic_review_body  # noqa: E402
from bench.attack import HOST, Legit, _pct, _tls, post  # noqa: E402
from certs.issue import ensure_serving_certs  # noqa: E402
from tests.support.large_reviews import SHAPES, budget_body, create_body, has_shape, kinds, update_body  # noqa: E402
from tests.support.processes import answer_status, cpu_seconds, free_port, host_speed, https_server  # noqa: E402

FLOOD = (("Pod", "containers"), ("Job.batch.volcano.sh", "templates"), ("Deployment", "containers"),
         ("Workflow.argoproj.io", "templates"))
MIB = 1024 * 1024


def _flooder(port: int, ca: str, seconds: float, bodies: list[bytes], index: int, out: multiprocessing.Queue) -> None:
    """One connection sending ``bodies`` in turn, each when the last is answered; reconnects."""
    stop = time.monotonic() + seconds
    statuses: dict[str, int] = {}
    sock = None
    n = index
    while time.monotonic() < stop:
        try:
            if sock is None:
                sock = _tls(port, ca)
            sock.sendall(post("/validate?timeout=5s", bodies[n % len(bodies)]))
            n += 1
            key = str(answer_status(sock))
        except (OSError, ConnectionError, ValueError) as exc:
            key = type(exc).__name__
            if sock is not None:
                sock.close()
            sock = None
        statuses[key] = statuses.get(key, 0) + 1
    out.put(statuses)


def _flood_process(port: int, ca: str, seconds: float, bodies: list[bytes], out: multiprocessing.Queue) -> None:
    threads = [threading.Thread(target=_flooder, args=(port, ca, seconds, bodies, i, out)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def flood(port: int, ca: str, seconds: float, bodies: list[bytes]) -> None:
    legit_body = realistic_review_body()
    out: multiprocessing.Queue = multiprocessing.Queue()
    attackers = multiprocessing.get_context("fork").Process(target=_flood_process,
                                                             args=(port, ca, seconds + 2, bodies, out))
    attackers.start()
    time.sleep(2)  # the flood's own start: its six connections busy before the measurement
    legit = [Legit(port, ca, legit_body, kept, seconds, "/validate?timeout=5s") for kept in (True, False)]
    for client in legit:
        client.thread.start()
    for client in legit:
        client.thread.join()
    statuses: dict[str, int] = {}
    for _ in range(6):
        for key, count in out.get(timeout=120).items():
            statuses[key] = statuses.get(key, 0) + count
    attackers.join()
    latencies = [x for c in legit for x in c.latencies]
    sent = sum(c.sent for c in legit)
    failures: dict[str, int] = {}
    for client in legit:
        for key, count in client.failures.items():
            failures[key] = failures.get(key, 0) + count
    share = 100 * len(latencies) / max(sent, 1)
    print(f"  legitimate: {len(latencies)}/{sent} answered ({share:.1f} %), p50 {_pct(latencies, 0.5) * 1000:.0f} ms, "
          f"p99 {_pct(latencies, 0.99) * 1000:.0f} ms, max {max(latencies, default=float('nan')) * 1000:.0f} ms; "
          f"failures {failures or 'none'}", flush=True)
    print(f"  flood (6 connections, 4 MiB reviews): answers by status {statuses}", flush=True)
    met = share >= 99 and _pct(latencies, 0.99) < 1
    print(f"  target (>= 99 % answered, p99 < 1 s): {'met' if met else 'NOT met'}", flush=True)


def _review(port: int, ca: str, path: str, body: bytes) -> tuple[int, int]:
    conn = http.client.HTTPSConnection(HOST, port, context=ssl.create_default_context(cafile=ca), timeout=120)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        answer = reply.read()
        return reply.status, len(answer)
    finally:
        conn.close()


def _verdict(port: int, ca: str, body: bytes) -> str:
    conn = http.client.HTTPSConnection(HOST, port, context=ssl.create_default_context(cafile=ca), timeout=120)
    conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    text = reply.read().decode()
    conn.close()
    if reply.status != 200:
        return str(reply.status)
    if '"allowed":false' in text.replace(" ", ""):
        return "denied (budget)" if '"budget: ' in text else "denied"
    return "allowed"


def costs(servers: dict[str, tuple[int, int]], ca: str, reps: int, only: list[str] | None) -> None:
    rows: list[tuple[str, ...]] = []
    worst: dict[str, float] = {}
    at_budget: dict[str, float] = {}
    for name, (obj, _group, _resource) in kinds().items():
        if only and not any(part in name for part in only):
            continue
        for shape in SHAPES:
            if not has_shape(obj, shape):
                continue
            bodies = [("CREATE", create_body(name, shape)), ("UPDATE", update_body(name, shape))]
            if shape != "padded":
                bodies.append(("CREATE at the budget", budget_body(name, shape)))
            for op, (n, body) in bodies:
                first = next(iter(servers.values()))
                verdict = _verdict(first[0], ca, body)
                cells = []
                for worker, (port, pid) in servers.items():
                    for path in ("/validate", "/mutate"):
                        spent, size = [], 0
                        for _ in range(reps):
                            before = cpu_seconds(pid)
                            _status_code, size = _review(port, ca, path, body)
                            spent.append(cpu_seconds(pid) - before)
                        per_review = statistics.median(spent) * 1000
                        per_mib = per_review / (len(body) / MIB)
                        if not op.endswith("budget"):  # the largest bodies: the per-MiB target
                            worst[worker] = max(worst.get(worker, 0.0), per_mib)
                        else:
                            at_budget[worker] = max(at_budget.get(worker, 0.0), per_review)
                        cells.append(f"{per_review:.0f} ms, {per_mib:.0f} ms/MiB, {size:,} B")
                rows.append((name, shape, op, f"{len(body):,}", str(n), verdict, *cells))
                print("| " + " | ".join(rows[-1]) + " |", flush=True)
    print()
    for worker, value in worst.items():
        print(f"worst cost of the largest reviews with {worker}: {value:.0f} ms per MiB (target <= 50); "
              f"costliest review judged in full (at the budget): {at_budget.get(worker, 0.0):.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--worker", action="append", choices=["webhook", "gthread"])
    parser.add_argument("--kind", action="append", help="cost only the kinds whose name holds this text")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--skip-costs", action="store_true")
    parser.add_argument("--skip-flood", action="store_true")
    args = parser.parse_args()
    workers = list(dict.fromkeys(args.worker or ["webhook", "gthread"]))
    print(f"host: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"{host_speed():.0f} ns per empty loop (about 15 idle)", flush=True)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        certs = Path(tmp, "certs")
        ensure_serving_certs(certs, ["localhost", "127.0.0.1"])
        ca = str(certs / "ca.crt")
        servers: dict[str, tuple[int, int]] = {}
        for worker in workers:
            port = free_port()
            command = [str(Path(sys.executable).parent / "gpushare"), "serve", "--host", HOST, "--port", str(port),
                       "--cert-dir", str(certs)]
            process = stack.enter_context(https_server(command, Path(ca), port, Path(tmp, f"{worker}.log"),
                                                       env={"GPUSHARE_SERVER__WORKER": worker}))
            servers[worker] = (port, process.pid)
        if not args.skip_flood:
            bodies = [create_body(name, shape)[1] for name, shape in FLOOD]
            named = zip(FLOOD, bodies, strict=True)
            print(f"flood bodies: {', '.join(f'{n} {s} {len(b):,} B' for (n, s), b in named)}")
            for worker, (port, _pid) in servers.items():
                print(f"worker {worker}: {args.seconds:g} s of flood", flush=True)
                flood(port, ca, args.seconds, bodies)
            print(f"host: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        if not args.skip_costs:
            header = ["kind", "shape", "operation", "body", "n", "verdict"]
            for worker in servers:
                header += [f"{worker} /validate", f"{worker} /mutate"]
            print("\n| " + " | ".join(header) + " |")
            print("|" + "---|" * len(header))
            costs(servers, ca, args.reps, args.kind)
    print(f"host after: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"{host_speed():.0f} ns per empty loop")


if __name__ == "__main__":
    main()
