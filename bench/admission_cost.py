"""Benchmark: server instructions per review, project, plain floor and bare app, counted by valgrind.

    python bench/admission_cost.py [--requests 600] [--connections 16] [--body NAME]

bench/admission.py measures CPU time, which on a shared VM moves by 10-20 % between minutes
for the same binary. This counts what each review costs the server instead: the webhook, the
plain stack's floor of bench/admission.py (plain Flask under stock gunicorn ``gthread``,
bench/plain_floor.py) and the bare Flask app under the project's own worker (bench/bare_app.py:
the worker's share) run under valgrind (cachegrind, instruction counts only), and the worker's instruction total is
read at exit. Each server runs three times: a base run (warm-up, then a few reviews on each
endpoint) and two runs with ``--requests`` more reviews on one endpoint; the difference to the
base run divided by ``--requests`` is the cost of one review, start-up and warm-up cancelled.
Instructions are not time (cache misses and syscalls differ), but they do not depend on what
else the host runs, so the ratios floor/project and bare/project repeat to a fraction of a percent.

Needs valgrind. Under valgrind a review takes ~100x longer, so the servers get a 30 s queue
budget and a long worker timeout; everything else is the default configuration.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from certs.issue import ensure_serving_certs  # noqa: E402
from tests.support.processes import children, free_port, https_server  # noqa: E402
from tests.support.review_bodies import body_set  # noqa: E402

# Valgrind runs a review ~100x slower: without these the overload protections would refuse.
SLOW_SERVER_ENV = {"GPUSHARE_OVERLOAD__DEFAULT_TIMEOUT_SECONDS": "30",
                   "GPUSHARE_OVERLOAD__CLIENT_TIMEOUT_SECONDS": "60",
                   "GPUSHARE_SERVER__REQUEST_TIMEOUT_SECONDS": "3600"}


def send(port: int, ca: Path, path: str, body: bytes, requests: int, connections: int) -> None:
    """``requests`` POSTs over ``connections`` keep-alive TLS connections; every answer must be a 200."""
    context = ssl.create_default_context(cafile=str(ca))
    failures: list[str] = []

    def client(count: int) -> None:
        conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=600)
        try:
            for _ in range(count):
                conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                reply = conn.getresponse()
                reply.read()
                if reply.status != 200:
                    failures.append(f"{path}: HTTP {reply.status}")
        except OSError as exc:
            failures.append(f"{path}: {exc}")
        finally:
            conn.close()

    share, extra = divmod(requests, connections)
    threads = [threading.Thread(target=client, args=(share + (i < extra),)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed, first: {failures[0]}")


def worker_pid(master: int, deadline: float) -> int:
    while time.monotonic() < deadline:
        workers = children(master)
        if workers:
            return workers[0]
        time.sleep(0.1)  # poll pacing under a deadline
    raise TimeoutError(f"no gunicorn worker under pid {master}")


def worker_instructions(command: Callable[[int], list[str]], certs: Path, body: bytes, counts: dict[str, int],
                        connections: int, work: Path) -> int:
    """One server run under cachegrind: ``counts[path]`` reviews per endpoint, then a clean stop;
    the worker's instruction total."""
    work.mkdir()
    port = free_port()
    valgrind = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={work}/%p.out"]
    env = {"FLOOR_PORT": str(port), "FLOOR_CERTFILE": str(certs / "tls.crt"), "FLOOR_KEYFILE": str(certs / "tls.key")}
    with https_server([*valgrind, *command(port)], certs / "ca.crt", port, work / "server.log",
                      timeout=600, env=env) as master:
        worker = worker_pid(master.pid, time.monotonic() + 60)
        for path, count in counts.items():
            send(port, certs / "ca.crt", path, body, count, connections)
        master.send_signal(signal.SIGTERM)  # a graceful stop: valgrind writes the counts at exit
        master.wait(timeout=600)
    for line in (work / f"{worker}.out").read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no instruction total for worker {worker} in {work}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--base", type=int, default=150, help="reviews per endpoint in every run (warm-up)")
    bodies = body_set()
    parser.add_argument("--body", choices=list(bodies), default=next(iter(bodies)),
                        help="which review of bench/admission.py's set (default: the realistic pod)")
    parser.add_argument("--keep", type=Path, help="keep the cachegrind files here (for cg_diff and cg_annotate)")
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("bench/admission_cost.py needs valgrind (apt install valgrind)")
    body = bodies[args.body]
    gpushare = Path(sys.executable).parent / "gpushare"
    os.environ.update(SLOW_SERVER_ENV)  # https_server starts the servers with this environment
    paths = ("/validate", "/mutate")
    runs = {"base": dict.fromkeys(paths, args.base),
            **{path: {p: args.base + (args.requests if p == path else 0) for p in paths} for path in paths}}
    costs: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        certs = Path(tmp, "certs")
        ensure_serving_certs(certs, ["localhost", "127.0.0.1"])
        gunicorn = Path(sys.executable).parent / "gunicorn"
        commands: dict[str, Callable[[int], list[str]]] = {
            "project": lambda port: [str(gpushare), "serve", "--host", "127.0.0.1", "--cert-dir", str(certs),
                                     "--port", str(port)],
            "floor": lambda port: [str(gunicorn), "-c", str(ROOT / "bench" / "plain_floor.py"), "--chdir", str(ROOT),
                                   "--graceful-timeout", "600", "--timeout", "3600", "bench.plain_floor:app"],
            "bare": lambda port: [sys.executable, str(ROOT / "bench" / "bare_app.py"), "--cert-dir", str(certs),
                                  "--port", str(port)],
        }
        totals: dict[tuple[str, str], int] = {}

        def measure(name: str) -> None:
            for run, counts in runs.items():
                work = Path(tmp, f"{name}-{run.strip('/')}")
                totals[(name, run)] = worker_instructions(commands[name], certs, body, counts, args.connections, work)

        # The servers' runs are independent: one thread each.
        threads = [threading.Thread(target=measure, args=(name,)) for name in commands]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if len(totals) != len(commands) * len(runs):
            sys.exit("a server run failed (see the traceback above)")
        for name in commands:
            for path in paths:
                costs[(name, path)] = (totals[(name, path)] - totals[(name, "base")]) / args.requests
    print(f"server instructions per review of {args.body!r} (worker process; {args.requests} reviews over "
          f"{args.connections} keep-alive TLS connections, less a base run; valgrind cachegrind):")
    for path in paths:
        project, floor, bare = costs[("project", path)], costs[("floor", path)], costs[("bare", path)]
        print(f"  {path:10} project {project:10,.0f}  floor {floor:10,.0f}  floor/project {floor / project:.3f}"
              f"  bare {bare:10,.0f}  bare/project {bare / project:.3f}")


if __name__ == "__main__":
    main()
