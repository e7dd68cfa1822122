"""Benchmark: ``gpushare audit`` of a large loaded state, and the dashboard page for it.

    python bench/audit.py [--nodes 5000] [--pods 150000] [--rounds 3]

Builds the state the way the live reflector would hold it (the same synthetic cluster as
bench/state.py: cgpu nodes, ~4 KB pods, a third of them asking for aliyun.com/gpu-mem, now
with card allocation annotations and a few broken invariants), then measures apart:

- loading: projecting the objects into the state (not part of the audit);
- the audit (every rule and invariant over every node and GPU pod): time per run (median);
- the dashboard's first page for that cluster: server time of GET / through Flask's test
  client (the audit cached, as the dashboard keeps it), median;
- this process's peak RSS after all of it.

Targets: audit <= 5 s, peak RSS <= 400 MB, dashboard page <= 1 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.state import own_memory_mib  # noqa: E402


def build_state(nodes: int, pods: int):  # type: ignore[no-untyped-def]
    from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
    from policies.model.cluster_snapshot import ClusterSnapshot
    from tests.support.cluster_objects import gpu_pod, node
    from webhook.settings import Settings

    names = Settings().names
    state = ClusterSnapshot()
    template = node("x", mode="cgpu", cards=4, card_gib=15)
    node_names = [f"cn-beijing.10.{i // 250}.{i % 250}" for i in range(nodes)]
    for name in node_names:
        template["metadata"]["name"] = name
        state.upsert_node(node_from_manifest(template, names))
    base = gpu_pod("p", mem=2, node_name="n")
    plain = gpu_pod("q", mem=None, node_name="n")
    for i in range(pods):
        obj = json.loads(json.dumps(base if i % 3 == 0 else plain))
        obj["metadata"].update(name=f"worker-{i}", namespace=f"team-{i % 40}")
        obj["spec"]["nodeName"] = node_names[i % nodes]
        if i % 3 == 0:
            card = (i // nodes) % 4
            obj["metadata"]["annotations"] = {"scheduler.framework.gpushare.allocation": f'{{"0": {{"{card}": 2}}}}'}
        if i % 30_000 == 0:  # a few broken invariants: a card index past the node's cards
            obj["metadata"]["annotations"] = {"ALIYUN_COM_GPU_MEM_IDX": "9"}
        state.record_pod(pod_from_manifest(obj, names))
    return state


def admission_with_audit(settings, state, reviews: int = 20_000) -> None:  # type: ignore[no-untyped-def]
    """Admission CPU per review (thread CPU time) and wall time per review, with the server's audit
    thread idle and then auditing the same state over and over beside it."""
    import threading

    from policies.admission.engine import Engine
    from policies.audit.audit import Auditor
    from tests.support.cluster_objects import gpu_pod

    engine = Engine(settings)
    pod = gpu_pod("bench", mem=2, core=35, node_name="cn-beijing.10.0.1")

    def run() -> tuple[float, float]:
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        for _ in range(reviews):
            engine.validate(engine.subject("Pod", pod, namespace="default", state=state))
        return ((time.thread_time() - cpu0) / reviews * 1e6, (time.perf_counter() - wall0) / reviews * 1e6)

    run()  # warm
    off = run()
    stop = threading.Event()

    def audit_forever() -> None:
        while not stop.is_set():
            Auditor(settings).audit(state, time.time())

    thread = threading.Thread(target=audit_forever, daemon=True)
    thread.start()
    on = run()
    stop.set()
    thread.join()
    print(f"admission per review, audit off: {off[0]:.1f} us CPU, {off[1]:.1f} us wall; "
          f"audit running: {on[0]:.1f} us CPU, {on[1]:.1f} us wall (one process, one interpreter lock)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from policies.audit.audit import Auditor
    from webhook.dashboard.app import DashboardConfig, create_dashboard
    from webhook.settings import Settings

    settings = Settings()
    started = time.perf_counter()
    state = build_state(args.nodes, args.pods)
    load = time.perf_counter() - started
    rss_loaded = own_memory_mib()[0]
    counts = state.counts()
    print(f"loaded {counts[0]} nodes, {counts[1]} GPU pods of {args.pods} in {load:.1f} s (RSS {rss_loaded:.0f} MiB)")

    times = []
    for _ in range(args.rounds):
        auditor = Auditor(settings)  # a fresh one: no pod shapes remembered from the last round
        t0 = time.perf_counter()
        result = auditor.audit(state, time.time())
        times.append(time.perf_counter() - t0)
    print(f"audit: median {statistics.median(times):.2f} s over {args.rounds} runs "
          f"(min {min(times):.2f}, max {max(times):.2f}); {len(result.findings)} findings, "
          f"{result.nodes} nodes, {result.pods} pods judged")

    app = create_dashboard(settings, state, DashboardConfig("bench"))
    client = app.test_client()
    t0 = time.perf_counter()
    first = client.get("/")  # builds the node profiles and the cached audit
    print(f"dashboard first request (audit + node profiles built): {time.perf_counter() - t0:.2f} s, "
          f"{len(first.data) / 1024:.0f} KiB")
    pages = []
    for _ in range(max(args.rounds, 5)):
        t0 = time.perf_counter()
        answer = client.get("/")
        pages.append(time.perf_counter() - t0)
        assert answer.status_code == 200
    print(f"dashboard page (100 nodes of {counts[0]}, audit cached): median {statistics.median(pages) * 1000:.0f} ms "
          f"server time, {len(answer.data) / 1024:.0f} KiB")
    admission_with_audit(settings, state)
    rss, peak = own_memory_mib()
    print(f"peak RSS {peak:.0f} MiB (now {rss:.0f} MiB; targets: audit <= 5 s, <= 400 MB, page <= 1 s)")


if __name__ == "__main__":
    main()
