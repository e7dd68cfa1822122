"""Benchmark: what GQ005 (docs/quotas.md) adds to a workload review, on a cluster of many GPU pods.

    python bench/quota.py [--pods 20000] [--namespaces 200] [--reviews 2000]

Builds a snapshot of PODS GPU pods over NAMESPACES namespaces, each with a ResourceQuota on
requests.aliyun.com/gpu-mem, and an ElasticQuotaTree with a leaf per namespace; then times
``Engine.validate`` of a Deployment (4 replicas of 8 GiB) with the cluster state: with a pending pod
changing before each review (the state keeps the per-namespace sums pod by pod, so no review adds up
every pod), without, and the same review on the same cluster without any quota object. Prints
microseconds per review (median of the rounds) and the host's load average: a shared machine moves
these figures. What is left per review is reading the quota objects (here 201 of them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from policies.admission.engine import Engine
from policies.model.cluster_manifests import pod_from_manifest
from policies.model.settings import PolicySettings
from webhook.state.snapshot import snapshot_from_objects


def cluster(pods: int, namespaces: int, quotas: bool) -> list[dict]:
    items: list[dict] = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": {
        "ack.node.gpu.schedule": "cgpu"}}, "status": {"capacity": {"aliyun.com/gpu-mem": "640",
                                                                   "aliyun.com/gpu-count": "8"}}}]
    for i in range(pods):
        meta = {"name": f"p{i}", "namespace": f"team-{i % namespaces}"}
        items.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                      "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "resources": {"limits": {
                          "aliyun.com/gpu-mem": str(1 + i % 8)}}}]}, "status": {"phase": "Running"}})
    if quotas:
        for n in range(namespaces):
            meta = {"name": "gpu", "namespace": f"team-{n}"}
            items.append({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta,
                          "spec": {"hard": {"requests.aliyun.com/gpu-mem": "100000"}}})
        items.append({"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
                      "metadata": {"name": "t", "namespace": "kube-system"},
                      "spec": {"root": {"name": "root", "max": {"aliyun.com/gpu-mem": "10000000"},
                                        "min": {"aliyun.com/gpu-mem": "10000000"},
                                        "children": [{"name": f"team-{n}", "namespaces": [f"team-{n}"],
                                                      "max": {"aliyun.com/gpu-mem": "100000"}}
                                                     for n in range(namespaces)]}}})
    return items


DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "serve", "namespace": "team-1"},
              "spec": {"replicas": 4, "template": {"spec": {"schedulerName": "ack-co-scheduler", "containers": [
                  {"name": "c", "resources": {"limits": {"aliyun.com/gpu-mem": "8"}}}]}}}}


def per_review(engine: Engine, state, reviews: int, touch: bool) -> float:
    """Microseconds per review; ``touch``: a pod changes before each review (no kept quota view)."""
    # A pending pod (no node): the nodes' records, which GC001 reads, do not change; the quotas' view does.
    manifest = cluster(1, 1, False)[1]
    del manifest["spec"]["nodeName"]
    pod = pod_from_manifest(manifest, engine.names)
    started = time.perf_counter()
    for _ in range(reviews):
        if touch:
            state.upsert_pod(pod)
        engine.validate(engine.subject("Deployment", DEPLOYMENT, state=state))
    return (time.perf_counter() - started) / reviews * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--namespaces", type=int, default=200)
    parser.add_argument("--reviews", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    engine = Engine(PolicySettings())
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with_quotas = snapshot_from_objects(cluster(args.pods, args.namespaces, True), engine.names)
    without = snapshot_from_objects(cluster(args.pods, args.namespaces, False), engine.names)
    cases = {"a pod changed before each review": (with_quotas, True, max(args.reviews // 20, 20)),
             "no pod changed": (with_quotas, False, args.reviews),
             "no quota object in the cluster": (without, False, args.reviews)}
    for label, (state, touch, reviews) in cases.items():
        figures = [per_review(engine, state, reviews, touch) for _ in range(args.rounds)]
        print(f"{label}: {statistics.median(figures):,.0f} us per review "
              f"({', '.join(f'{f:,.0f}' for f in figures)}; {args.pods:,} GPU pods, {reviews} reviews)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
