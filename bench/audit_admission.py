"""Benchmark: what the server's periodic audit costs admission, on a large live state.

    python bench/audit_admission.py [--nodes 5000] [--pods 150000] [--seconds 20] [--rounds 4]
                                    [--interval 0.5] [--no-pin] [--core]

A fake API server (tests/support/fake_apiserver.py, in a child process) holds the cluster of
bench/state.py (realistic ~4 KB Pods, a third asking for aliyun.com/gpu-mem, cgpu nodes) and
serves the OpenReports CRDs, so the audit's leader also writes its report objects. The real
``gpushare serve --kubeconfig`` lists and watches it, then /validate is driven at 16 keep-alive
connections (wrk when installed) with the periodic audit off (``audit.interval_seconds: 0``) and
on (every ``--interval`` seconds: runs follow each other, so audits overlap most of the window).
Each round starts a fresh server per mode (a server whose audit is on would otherwise run audits
while the other mode is measured), in alternating order.

The review is tests/data/pod-realistic.json (a mem-only pod): GC001 then looks at every node's
cards, a few milliseconds per review at this size. ``--core`` adds
``aliyun.com/gpu-core.percentage: 30`` to it: the cluster has no core_mem node, so GC001 answers at
once and a review costs about what it costs on a small cluster, which makes any cost the audit adds
to the worker (the fork, copy-on-write page faults) stand out more.

Printed per mode, medians over rounds: the serving worker's own CPU per review (user + system of
the gunicorn worker, without the audit's process, which is its child: that CPU is printed apart),
requests/s, p50 and p99. Pinned (the default), the server and everything it forks run on CPU 0 and
the load generator and the fake API server on CPU 1: the audit's process then competes for the
worker's own core, the hardest case (it runs at a lower priority, nice 10).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.admission import review_for  # noqa: E402
from bench.loadgen import drive  # noqa: E402
from bench.state import cluster  # noqa: E402
from certs.issue import ensure_serving_certs  # noqa: E402
from tests.support.processes import children, free_port, https_server  # noqa: E402


def serve_api(args: argparse.Namespace) -> None:
    """Child process: the fake API server holding the cluster, until stdin closes."""
    from tests.support.crds import load_crd
    from tests.support.fake_apiserver import FakeApiServer

    node_items, pod_items = cluster(args.nodes, args.pods, args.gpu_share)
    api = FakeApiServer().start()
    api.install_crd(load_crd("openreports.io_reports.yaml"), load_crd("openreports.io_clusterreports.yaml"))
    api.add_raw(("/api/v1", "nodes"), "Node", "v1", node_items)
    api.add_raw(("/api/v1", "pods"), "Pod", "v1", pod_items)
    print(f"READY {api.url}", flush=True)
    sys.stdin.read()
    api.stop()


def metrics(url: str, ca: Path) -> dict[str, float]:
    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(url + "/metrics", context=context, timeout=30) as answer:
        text = answer.read().decode()
    return {m[1]: float(m[2]) for m in re.finditer(r"^(gpushare_audit_[a-z_]+) (\S+)$", text, re.M)}


def own_and_children_cpu(pid: int) -> tuple[float, float, int]:
    """(utime + stime, cutime + cstime, minor page faults) of one process: its own CPU, its reaped
    children's, and the page faults it took (copy-on-write copies after a fork among them)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick, int(fields[7])


def audit_children(worker: int) -> list[int]:
    """The worker's children: the audit's process, forked by one of its threads (not the main one)."""
    found = []
    for task in Path(f"/proc/{worker}/task").iterdir():
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def private_mib(pid: int) -> float:
    """Memory a process does not share (its copy-on-write copies included), from smaps_rollup."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0
    return sum(int(line.split()[1]) for line in text.splitlines()
               if line.startswith(("Private_Clean:", "Private_Dirty:"))) / 1024


class MemorySampler(threading.Thread):
    """Peak private memory of the audit's processes, and the worker's RSS, sampled every 0.1 s."""

    def __init__(self, worker: int) -> None:
        super().__init__(daemon=True)
        self.worker, self.stop, self.child_peak, self.worker_rss = worker, threading.Event(), 0.0, 0.0

    def run(self) -> None:
        while not self.stop.wait(0.1):
            for child in audit_children(self.worker):
                self.child_peak = max(self.child_peak, private_mib(child))
            try:
                status = Path(f"/proc/{self.worker}/status").read_text()
                self.worker_rss = max(self.worker_rss, int(status.split("VmRSS:")[1].split()[0]) / 1024)
            except (OSError, IndexError):
                continue


def wait_for(probe, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)  # pacing a poll under a deadline
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


def one_round(mode: str, api_url: str, args: argparse.Namespace, tmp: Path, review: dict) -> dict[str, float]:
    certs = tmp / "certs"
    ca = certs / "ca.crt"
    kubeconfig = tmp / "kubeconfig"
    port = free_port()
    pin = ["taskset", "-c", "0"] if args.pin else []
    command = [*pin, str(Path(sys.executable).parent / "gpushare"), "serve", "--host", "127.0.0.1", "--port",
               str(port), "--cert-dir", str(certs), "--kubeconfig", str(kubeconfig)]
    env = {"GPUSHARE_AUDIT__INTERVAL_SECONDS": str(args.interval if mode == "on" else 0),
           "GPUSHARE_LEADER__NAMESPACE": "gpushare-system"}
    url = f"https://localhost:{port}"
    with https_server(command, ca, port, tmp / f"server-{mode}.log", timeout=600, ready_path="/readyz",
                      env=env) as process:
        worker = wait_for(lambda: children(process.pid), 60, "the gunicorn worker")[0]
        sampler = MemorySampler(worker)
        sampler.start()
        if mode == "on":  # steady state: the first audit (and its report writes) done
            wait_for(lambda: metrics(url, ca).get("gpushare_audit_runs_total", 0) >= 1, 600, "a first audit")
        drive(url + "/validate", str(ca), review, 4, 2, args.tool)  # warm-up
        before, audit = metrics(url, ca), own_and_children_cpu(worker)
        result = drive(url + "/validate", str(ca), review, 16, args.seconds, args.tool, cpu="1" if args.pin else None)
        after, audit_after = metrics(url, ca), own_and_children_cpu(worker)
        sampler.stop.set()
    worker_cpu = audit_after[0] - audit[0]
    return {"rps": result.rps, "p50": result.p50_ms, "p99": result.p99_ms, "errors": result.errors,
            "cpu_us": worker_cpu / max(result.requests, 1) * 1e6,
            "faults": (audit_after[2] - audit[2]) / max(result.requests, 1),
            "runs": after.get("gpushare_audit_runs_total", 0) - before.get("gpushare_audit_runs_total", 0),
            "audit_cpu": audit_after[1] - audit[1], "audit_seconds": after.get("gpushare_audit_duration_seconds", 0),
            "written": after.get("gpushare_audit_reports_written", 0),
            "fork_ms": after.get("gpushare_audit_fork_seconds", 0) * 1000,
            "child_mib": sampler.child_peak, "worker_mib": sampler.worker_rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--gpu-share", type=float, default=1 / 3)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--interval", type=float, default=0.5, help="audit.interval_seconds when on")
    parser.add_argument("--tool", choices=["auto", "wrk", "python"], default="auto")
    parser.add_argument("--no-pin", dest="pin", action="store_false")
    parser.add_argument("--core", action="store_true", help="the review asks for gpu-core.percentage too")
    parser.add_argument("--serve-api", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_api:
        serve_api(args)
        return
    pod = json.loads((ROOT / "tests" / "data" / "pod-realistic.json").read_text())
    if args.core:
        for container in pod["spec"]["containers"]:
            for block in container.get("resources", {}).values():
                if "aliyun.com/gpu-mem" in block:
                    block["aliyun.com/gpu-core.percentage"] = "30"
    review = review_for(pod)
    print(f"{args.nodes} nodes, {args.pods} pods ({args.gpu_share:.0%} with gpu-mem); /validate at 16 connections "
          f"for {args.seconds:.0f} s per round{' (the pod asks for compute too)' if args.core else ''}; "
          f"audit every {args.interval} s when on; "
          f"{'server on CPU 0, load and API server on CPU 1' if args.pin else 'not pinned'}", flush=True)
    results: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as name, ExitStack() as stack:
        tmp = Path(name)
        ensure_serving_certs(tmp / "certs", ["localhost", "127.0.0.1"])
        api_command = [*(["taskset", "-c", "1"] if args.pin else []), sys.executable, __file__, "--serve-api",
                       "--nodes", str(args.nodes), "--pods", str(args.pods), "--gpu-share", str(args.gpu_share)]
        api = subprocess.Popen(api_command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        stack.callback(api.wait, 60)
        stack.callback(lambda: api.stdin and api.stdin.close())
        assert api.stdout is not None
        line = api.stdout.readline()
        if not line.startswith("READY "):
            raise RuntimeError(f"the fake API server did not start: {line!r}")
        api_url = line.split()[1]
        (tmp / "kubeconfig").write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "bench",
            "clusters": [{"name": "bench", "cluster": {"server": api_url}}], "users": [{"name": "bench", "user": {}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}]}))
        for round_no in range(1, args.rounds + 1):
            for mode in ("off", "on") if round_no % 2 else ("on", "off"):
                r = one_round(mode, api_url, args, tmp, review)
                results[mode].append(r)
                audit = (f"; {r['runs']:.0f} audits in the window (last {r['audit_seconds']:.1f} s), their "
                         f"processes' CPU {r['audit_cpu']:.1f} s, last fork {r['fork_ms']:.0f} ms, "
                         f"{r['written']:.0f} reports written per run; worker RSS {r['worker_mib']:.0f} MiB, the "
                         f"audit process's own memory at most {r['child_mib']:.0f} MiB" if mode == "on" else "")
                print(f"round {round_no} audit {mode:3}: {r['rps']:7.1f} req/s  p50 {r['p50']:6.2f} ms  "
                      f"p99 {r['p99']:6.2f} ms  errors {r['errors']:.0f}  worker CPU {r['cpu_us']:5.0f} us/review, "
                      f"{r['faults']:.1f} page faults/review"
                      f"{audit}", flush=True)
    print()
    print(f"medians over {args.rounds} rounds (worker CPU per review is the primary figure):")
    for mode in ("off", "on"):
        rows = results[mode]
        cpu, rps = statistics.median(r["cpu_us"] for r in rows), statistics.median(r["rps"] for r in rows)
        p50, p99 = statistics.median(r["p50"] for r in rows), statistics.median(r["p99"] for r in rows)
        print(f"  audit {mode:3}: worker CPU {cpu:5.0f} us/review, {rps:7.1f} req/s, p50 {p50:.2f} ms, "
              f"p99 {p99:.2f} ms")
    off = statistics.median(r["cpu_us"] for r in results["off"])
    on = statistics.median(r["cpu_us"] for r in results["on"])
    print(f"  on/off worker CPU per review: {on / off:.3f}")


if __name__ == "__main__":
    main()
