"""Rank one pod against 500, 5,000 and 20,000 nodes of 8 cards with 8 pods each.

Prints the median time per pod for a warm ranking (profiles cached, the steady state of
a server), for a ranking after one pod changed (one profile rebuilt), and the cold first
ranking that builds every profile. Target: <= 20 ms per pod at 5,000 nodes, growing
linearly. Nothing here is asserted; the numbers are for reading.

    .venv/bin/python bench/scoring.py [--nodes 500,5000,20000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time

from policies.cluster import ClusterSnapshot, NodeInfo, PodGPU, PodInfo
from policies.scoring import PodRequest, Scorer, pod_request
from policies.settings import Names, load_settings

CARDS = 8
GIB_PER_CARD = 16
PODS_PER_NODE = 8


def build_cluster(node_count: int, names: Names, seed: int = 7) -> ClusterSnapshot:
    """A cluster in the shapes of the seeds: mostly cgpu (binpack and spread), some share and core_mem.

    Half the pods carry the scheduler's allocation annotation, half are packed by rule, so
    both ways of reading occupancy are exercised. About one node in ten is too full for
    the pod being ranked, and the core_mem nodes refuse it (GB001), so the ranking also
    explains failures.
    """
    rng = random.Random(seed)
    snapshot = ClusterSnapshot()
    labels = names.labels
    r = names.resources
    for n in range(node_count):
        name = f"cn-beijing.10.{n // 250}.{n % 250}"
        roll = rng.random()
        mode, placement = ("cgpu", "binpack") if roll < 0.4 else ("cgpu", "spread") if roll < 0.7 else (
            ("share", "binpack") if roll < 0.8 else ("core_mem", "binpack"))
        node_labels = {labels.schedule: mode, labels.placement: placement, labels.region: "cn-beijing",
                       labels.card_name: rng.choice(["Tesla-V100-SXM2-16GB", "Tesla-T4", "NVIDIA-A10"]),
                       labels.card_count: str(CARDS), labels.cpu_manager_policy: "none"}
        resources = {r.gpu_mem: CARDS * GIB_PER_CARD, r.gpu_count: CARDS}
        snapshot.upsert_node(NodeInfo(name, node_labels, {}, f"alicloud://i-{n}", f"10.0.{n // 250}.{n % 250}",
                                      dict(resources), dict(resources)))
        full = rng.random() < 0.1
        for p in range(PODS_PER_NODE):
            mem = rng.randint(13, 16) if full else rng.randint(1, 12)
            core = rng.choice([10, 20, 30]) if mode == "core_mem" else 0
            annotations = {}
            if p % 2 == 0:
                card = p if full else rng.randrange(CARDS)
                annotations[names.allocation_annotation] = json.dumps({"0": {str(card): mem}})
            snapshot.upsert_pod(PodInfo("team-a", f"job-{n}-{p}", f"uid-{n}-{p}", name, "Running",
                                        (PodGPU("main", mem, core, 0),), annotations))
    return snapshot


def the_pod(names: Names) -> PodRequest:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "infer", "namespace": "team-b"},
           "spec": {"containers": [{"name": "infer", "image": "cuda", "resources": {"limits": {
               names.resources.gpu_mem: 4}}}]}}
    return pod_request("Pod", pod, names, key="team-b/infer")


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="500,5000,20000")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    names = load_settings().names
    request = the_pod(names)
    print(f"one pod (4 GiB, mem-only) vs N nodes x {CARDS} cards x {PODS_PER_NODE} pods; "
          f"median of {args.rounds} rounds")
    print(f"{'nodes':>7} {'warm ms':>9} {'us/node':>8} {'1 change ms':>12} {'cold ms':>9} {'fit':>6}")
    for count in (int(c) for c in args.nodes.split(",")):
        state = build_cluster(count, names)
        scorer = Scorer(names)
        gc.collect()
        cold = timed(lambda s=scorer, st=state: s.rank(request, st))
        warm = statistics.median(timed(lambda s=scorer, st=state: s.rank(request, st))
                                 for _ in range(args.rounds))
        rng = random.Random(1)
        changed = []
        for round_ in range(args.rounds):
            victim = state.pods()[rng.randrange(count * PODS_PER_NODE)]
            state.upsert_pod(PodInfo(victim.namespace, victim.name, victim.uid, victim.node_name, victim.phase,
                                     victim.gpus, {**victim.annotations, "round": str(round_)}))
            changed.append(timed(lambda s=scorer, st=state: s.rank(request, st)))
        fits = sum(1 for s in scorer.rank(request, state) if s.fits)
        print(f"{count:>7} {warm * 1000:>9.2f} {warm / count * 1e6:>8.2f} {statistics.median(changed) * 1000:>12.2f} "
              f"{cold * 1000:>9.1f} {fits:>6}")


if __name__ == "__main__":
    main()
