"""Benchmark: what one review costs, in process, at 5,000 nodes: the worst bodies and the ordinary pod.

    python bench/review_cost.py [--nodes 5000] [--pods 40000] [--repeat 20]

1. The costliest reviews an attacker can send under overload.inline_max_bytes (each a legal
   object, with new names and label keys every time so nothing remembered helps): a thousand
   required node affinity terms no node matches (Exists, NotIn on hostnames, In on hostnames), a
   Pod and a Deployment with hundreds of containers, a pod of several core+mem containers no node
   can hold together, a Pod pinned to a node with hundreds of containers (the placement rules).
   Prints, per shape, its size, the time of a whole /validate evaluation
   (parse, every rule, the answer; median and max of ``--repeat``) and GC001's work count.
   Target: every one <= 20 ms.
2. The realistic core+mem Pod review (tests/data/pod-realistic.json) at 4 nodes and at 5,000, with
   a pod starting on some node between every two reviews (a busy cluster: the state changes, so
   nothing cached for the last state answers). Target: 5,000 nodes <= 2 x 4 nodes.
Timings are CPU-bound and single-threaded; the machine's other load moves them (run it twice).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.admission import api_server_json, review_for  # noqa: E402
from bench.attack import INLINE_MAX, _largest, failing_terms_review, many_containers_review, snapshot  # noqa: E402
from policies.admission.engine import Engine  # noqa: E402
from policies.model.cluster_manifests import pod_from_manifest  # noqa: E402
from policies.model.resources import container_requests  # noqa: E402
from policies.model.selectors import node_selector_from_spec  # noqa: E402
from policies.placement.capacity_index import capacity_index  # noqa: E402
from policies.placement.placement import demand_from_containers  # noqa: E402
from policies.placement.work_budget import WorkBudget  # noqa: E402
from tests.support.processes import host_speed  # noqa: E402
from webhook.http.jsonbody import decode_kubernetes_json  # noqa: E402
from webhook.routes.admission import answer_review  # noqa: E402
from webhook.routes.review import parse_review  # noqa: E402
from webhook.server.process_tuning import keep_full_collections_short  # noqa: E402
from webhook.settings import Settings  # noqa: E402
from webhook.state.snapshot import snapshot_from_objects  # noqa: E402

_serial = iter(range(10**9))


def _pod_review(spec: dict) -> bytes:
    n = next(_serial)
    return api_server_json(review_for({"apiVersion": "v1", "kind": "Pod",
                                       "metadata": {"name": f"shape-{n}", "namespace": "default"}, "spec": spec}))


def _terms(operator: str) -> bytes:
    """As many single-requirement terms as fit, each matching no node."""
    n = next(_serial)

    def requirement(i: int) -> dict:
        if operator == "In":
            return {"key": "kubernetes.io/hostname", "operator": "In", "values": [f"absent-{n}-{i}"]}
        if operator == "NotIn":  # every node passes NotIn on its own: each term adds a key no node has
            return {"key": f"example.com/k{n}-{i}", "operator": "In", "values": ["x"]}
        return {"key": f"example.com/absent-{n}-{i}", "operator": operator}

    def make(count: int) -> bytes:
        terms = [{"matchExpressions": [requirement(i)]} for i in range(count)]
        return _pod_review({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}},
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"aliyun.com/gpu-mem": 1}}}]})

    return _largest(make, INLINE_MAX)


def _hostnames_not_in() -> bytes:
    """One term NotIn every hostname of a thousand: every node is read, every value compared."""
    n = next(_serial)

    def make(count: int) -> bytes:
        values = [f"gpu-{i:05d}" for i in range(count)] + [f"x{n}"]
        return _pod_review({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                                         "values": values}]}]}}},
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"aliyun.com/gpu-mem": 1}}}]})

    return _largest(make, INLINE_MAX)


def _fragmented() -> bytes:
    """Nine 9 GiB core+mem containers: each node has 128 GiB free in all, no node nine cards of 9."""
    containers = [{"name": f"c{next(_serial)}-{i}", "image": "x", "resources": {"limits": {
        "aliyun.com/gpu-mem": 9, "aliyun.com/gpu-core.percentage": 10}}} for i in range(9)]
    return _pod_review({"containers": containers})


def _pinned_containers() -> bytes:
    """A Pod with spec.nodeName and as many GPU containers as fit: the placement rules (GB001-GB005)
    place every container on the node's cards."""
    n = next(_serial)

    def make(count: int) -> bytes:
        return _pod_review({"nodeName": "gpu-00001", "containers": [
            {"name": f"c{n}-{i}", "image": "x", "resources": {"limits": {"aliyun.com/gpu-mem": 1}}}
            for i in range(count)]})

    return _largest(make, INLINE_MAX)


SHAPES = {
    "1,000 affinity terms, Exists, no node has the key": lambda: failing_terms_review(INLINE_MAX),
    "1,000 affinity terms, DoesNotExist on keys no node has (every node matches)": lambda: _terms("DoesNotExist"),
    "1,000 affinity terms, In on hostnames no node has": lambda: _terms("In"),
    "1,000 affinity terms, In on keys no node has": lambda: _terms("NotIn"),
    "one term NotIn 4,000 hostnames": _hostnames_not_in,
    "Pod with ~820 GPU containers": lambda: many_containers_review(INLINE_MAX),
    "Deployment with ~810 GPU containers": lambda: many_containers_review(INLINE_MAX, "Deployment"),
    "nine core+mem containers no node holds together": _fragmented,
    "Pod pinned to a node (spec.nodeName) with ~800 GPU containers": _pinned_containers,
}


def evaluate(engine: Engine, state: object, body: bytes) -> float:
    started = time.perf_counter()
    answer_review(parse_review(decode_kubernetes_json(body)), engine, state, "validate")  # type: ignore[arg-type]
    return time.perf_counter() - started


def gc001_work(engine: Engine, state: object, body: bytes) -> str:
    obj = json.loads(body)["request"]["object"]
    spec = obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]
    names = engine.names
    demand = demand_from_containers("", container_requests(spec, ("spec",), names), names)
    budget = WorkBudget(10**9)
    capacity_index(names).verdict(state, demand, node_selector_from_spec(spec, ("spec",)), budget)  # type: ignore[arg-type]
    return f"{budget.spent:,}"


def ordinary_under_churn(engine: Engine, state: object, nodes: list[str], repeat: int) -> float:
    """Median seconds per realistic review, a pod starting on some node before each and the pod
    started four reviews before ending (so every node keeps about the pods it had)."""
    pod = json.loads((ROOT / "tests" / "data" / "pod-realistic.json").read_text())
    body = api_server_json(review_for(pod))
    times = []
    for i in range(repeat):
        node = nodes[i * 7919 % len(nodes)]
        started = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"churn-{i}", "namespace": "default"},
                   "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {
                       "aliyun.com/gpu-mem": "1"}}}]}, "status": {"phase": "Running"}}
        state.upsert_pod(pod_from_manifest(started, engine.names))  # type: ignore[attr-defined]
        if i >= 4:
            state.remove_pod("default", f"churn-{i - 4}")  # type: ignore[attr-defined]
        times.append(evaluate(engine, state, body))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=40000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    settings = Settings()
    engine = Engine(settings)
    started = time.perf_counter()
    big = snapshot_from_objects(snapshot(args.nodes, args.pods)["items"], settings.names)
    capacity_index(settings.names).warm(big)
    gc.collect()
    gc.freeze()  # as the server does after start-up (webhook/serving.py)
    keep_full_collections_short()  # and while it serves (webhook/server/process_tuning.py)
    print(f"{args.nodes} nodes, {args.pods} pods loaded and indexed in {time.perf_counter() - started:.1f} s; "
          f"capacity.max_work={settings.capacity.max_work:,}; host: {host_speed():.0f} ns per empty loop", flush=True)
    print("| shape | body | whole review, median | max | GC001 work (uncapped) |\n|---|---|---|---|---|")
    worst = 0.0
    for label, make in SHAPES.items():
        bodies = [make() for _ in range(args.repeat)]
        times = [evaluate(engine, big, body) for body in bodies]
        worst = max(worst, max(times))
        print(f"| {label} | {len(bodies[0]):,} B | {statistics.median(times) * 1000:.1f} ms | "
              f"{max(times) * 1000:.1f} ms | {gc001_work(engine, big, make())} |", flush=True)
    print(f"\nworst shape: {worst * 1000:.1f} ms (target <= 20 ms); host: {host_speed():.0f} ns per empty loop")
    small = snapshot_from_objects(snapshot(4, 32)["items"], settings.names)
    capacity_index(settings.names).warm(small)
    big_nodes = [n.name for n in big.nodes()]
    small_nodes = [n.name for n in small.nodes()]
    for round_no in range(3):
        at_4 = ordinary_under_churn(engine, small, small_nodes, args.repeat * 10)
        at_5000 = ordinary_under_churn(engine, big, big_nodes, args.repeat * 10)
        print(f"round {round_no + 1}: realistic pod review with a pod started before each: 4 nodes "
              f"{at_4 * 1e6:.0f} us, {args.nodes} nodes {at_5000 * 1e6:.0f} us, ratio {at_5000 / at_4:.2f} "
              "(target <= 2)", flush=True)


if __name__ == "__main__":
    main()
