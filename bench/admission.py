"""Benchmark: /validate and /mutate over TLS with keep-alive, at 1 and 16 connections, against
the real `gpushare serve` (logging, metrics and auth at their defaults) and against the plain
stack's floor: Flask under stock gunicorn `gthread`, same TLS, same core, no project code, parsing
the review with the standard `json` module (bench/plain_floor.py).

    python bench/admission.py [--seconds 3] [--rounds 8] [--tool auto|wrk|python] [--worker webhook|gthread]

The primary figure is server CPU time per review (the server process tree's user+sys seconds over
the requests it answered), far steadier on a shared host than requests/s; the ratio floor/project
of it is the share of the project's cost that is the stack itself. Target: >= 0.85 at 16
connections on /validate and /mutate. Requests/s, p50 and p99 are printed too.

On a shared VM the same server's throughput moves by 20-40 % between minutes, so each round
measures project and floor back to back, in alternating order (ABBA: drift hits both alike), and
the median of the per-round ratios is the figure to read. bench/admission_cost.py counts the
server's instructions per review instead, which does not move with the host's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import LoadResult, drive  # noqa: E402
from bench.processes import cpu_seconds, free_port, https_server  # noqa: E402
from certs.issue import ensure_serving_certs  # noqa: E402


def api_server_json(value: object) -> bytes:
    """JSON as kube-apiserver sends it to webhooks: Go's encoding/json, compact."""
    return json.dumps(value, separators=(",", ":")).encode()


def realistic_review_body() -> bytes:
    """The benchmarks' review body: tests/data/pod-realistic.json in an AdmissionReview, compact
    as the API server sends it (about 4 KB)."""
    return api_server_json(review_for(json.loads((ROOT / "tests" / "data" / "pod-realistic.json").read_text())))


def review_for(pod: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": pod["metadata"]["namespace"], "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller",
                     "groups": ["system:serviceaccounts", "system:authenticated"]},
        "object": pod, "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--tool", choices=["auto", "wrk", "python"], default="auto")
    parser.add_argument("--worker", choices=["webhook", "gthread"], default="webhook",
                        help="the gunicorn worker the project's server runs (server.worker)")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="do not pin servers to CPU 0 and the load generator to CPU 1")
    args = parser.parse_args()
    pod = json.loads((ROOT / "tests" / "data" / "pod-realistic.json").read_text())
    review = review_for(pod)
    print(f"AdmissionReview body: {len(api_server_json(review))} bytes "
          "(realistic defaulted Pod, compact JSON as the API server sends it)")
    gpushare = Path(sys.executable).parent / "gpushare"
    best: dict[tuple[str, str, int], LoadResult] = {}
    rps_per_round: dict[tuple[str, str, int], list[float]] = {}
    cpu_per_request: dict[tuple[str, str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        certs = Path(tmp, "certs")
        ensure_serving_certs(certs, ["localhost", "127.0.0.1"])
        ca = certs / "ca.crt"
        # Servers on CPU 0, the load generator on CPU 1: client and server never fight for a core.
        pin_server = ["taskset", "-c", "0"] if args.pin else []
        commands = {
            "project": lambda port: [*pin_server, str(gpushare), "serve", "--host", "127.0.0.1", "--port", str(port),
                                     "--cert-dir", str(certs)],
            "floor": lambda port: [*pin_server, str(Path(sys.executable).parent / "gunicorn"), "-c",
                                   str(ROOT / "bench" / "plain_floor.py"), "--chdir", str(ROOT),
                                   "bench.plain_floor:app"],
        }
        ports, pids = {}, {}
        for name, command in commands.items():
            ports[name] = free_port()
            os.environ.update(FLOOR_PORT=str(ports[name]), FLOOR_CERTFILE=str(certs / "tls.crt"),
                              FLOOR_KEYFILE=str(certs / "tls.key"))
            env = {"GPUSHARE_SERVER__WORKER": args.worker} if name == "project" else None
            process = stack.enter_context(https_server(command(ports[name]), ca, ports[name],
                                                       Path(tmp, f"{name}.log"), env=env))
            pids[name] = process.pid
        # Interleave project and floor, several rounds, and keep each case's best round: other load on
        # the machine then hits both alike instead of skewing whichever ran during it.
        for round_no in range(1, args.rounds + 1):
            for endpoint in ("/validate", "/mutate"):
                for connections in (1, 16):
                    order = list(commands) if round_no % 2 else list(commands)[::-1]
                    for name in order:
                        url = f"https://localhost:{ports[name]}{endpoint}"
                        if round_no == 1:
                            drive(url, str(ca), review, 4, 1, args.tool)  # warm-up
                        cpu_before = cpu_seconds(pids[name])
                        result = drive(url, str(ca), review, connections, args.seconds, args.tool,
                                       cpu="1" if args.pin else None)
                        cpu_us = (cpu_seconds(pids[name]) - cpu_before) / max(result.requests, 1) * 1e6
                        key = (name, endpoint, connections)
                        cpu_per_request.setdefault(key, []).append(cpu_us)
                        if key not in best or result.rps > best[key].rps:
                            best[key] = result
                        rps_per_round.setdefault(key, []).append(result.rps)
                        print(f"round {round_no} {name:8} {endpoint:10} c={connections:<3} {result.rps:9.1f} req/s"
                              f"  p50 {result.p50_ms:7.2f} ms  p99 {result.p99_ms:7.2f} ms  errors {result.errors}"
                              f"  server CPU {cpu_us:6.0f} us/req  ({result.tool})", flush=True)
    print()
    print("server CPU per review, median over rounds (the primary figure; floor = plain Flask + stock "
          "gunicorn gthread):")
    for endpoint in ("/validate", "/mutate"):
        for connections in (1, 16):
            project = statistics.median(cpu_per_request[("project", endpoint, connections)])
            floor = statistics.median(cpu_per_request[("floor", endpoint, connections)])
            target = "   target >= 0.85" if connections == 16 else ""
            print(f"  {endpoint:10} c={connections:<3} project {project:6.0f} us  floor {floor:6.0f} us  "
                  f"floor/project {floor / project:.3f}{target}")
    print()
    print(f"throughput, best of {args.rounds} rounds of {args.seconds:.0f} s (noisy on a shared host):")
    for endpoint in ("/validate", "/mutate"):
        for connections in (1, 16):
            project, floor = best[("project", endpoint, connections)], best[("floor", endpoint, connections)]
            print(f"  {endpoint:10} c={connections:<3} project {project.rps:8.1f} req/s "
                  f"(p50 {project.p50_ms:.2f} ms, p99 {project.p99_ms:.2f} ms)  floor {floor.rps:8.1f} req/s "
                  f"(p50 {floor.p50_ms:.2f} ms, p99 {floor.p99_ms:.2f} ms)")


if __name__ == "__main__":
    main()
