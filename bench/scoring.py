"""Rank one pod against 500, 5,000 and 20,000 nodes of 8 cards with 8 pods each.

Prints, per cluster size, the median time per pod (and the best round, since the machine
may be shared) for:

- warm: a ranking with every node profile cached, the steady state of a server;
- 1 change: a ranking after one pod changed somewhere, so one profile is rebuilt;
- filter: the scheduler extender's filter on every node name (ranking plus the
  FailedNodes map with a reason per node that does not fit);
- cold: the first ranking, which builds every profile (a restart, or a new snapshot);
  ``gpushare serve`` pays it when the routes are created, not on the first request.

and the memory the cached profiles hold.

CPU time of the process is printed beside wall time: on a shared machine it is the
steadier figure. After the cold ranking, the state and the profiles are frozen out of the
garbage collector's reach, as ``gpushare serve`` does with what it builds at start.
Target: <= 20 ms per pod at 5,000 nodes, growing linearly.
Nothing is asserted; the numbers are for reading.

    .venv/bin/python bench/scoring.py [--nodes 500,5000,20000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable

from policies.model.cluster import NodeInfo, PodGPU, PodInfo
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.model.settings import Names
from policies.scoring.scoring import PodRequest, Scorer, pod_request
from webhook.routes.extender import Extender, ExtenderArgs
from webhook.settings import Settings, load_settings

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
        snapshot.upsert_node(NodeInfo(name, node_labels, {}, f"cn-beijing.i-bench{n}", f"10.0.{n // 250}.{n % 250}",
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


def the_pod(names: Names) -> tuple[dict, PodRequest]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "infer", "namespace": "team-b"},
           "spec": {"containers": [{"name": "infer", "image": "cuda", "resources": {"limits": {
               names.resources.gpu_mem: 4}}}]}}
    return pod, pod_request("Pod", pod, names, key="team-b/infer")


def measure(fn: Callable[[], object], rounds: int, before: Callable[[], object] | None = None) -> dict[str, float]:
    """Median and best wall and CPU seconds of ``fn`` over ``rounds`` calls."""
    walls, cpus = [], []
    for _ in range(rounds):
        if before is not None:
            before()
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return {"wall": statistics.median(walls), "best": min(walls), "cpu": statistics.median(cpus)}


def row(label: str, count: int, figures: dict[str, float]) -> str:
    return (f"{count:>7} {label:<9} {figures['wall'] * 1e3:>9.2f} {figures['best'] * 1e3:>9.2f} "
            f"{figures['cpu'] * 1e3:>9.2f} {figures['wall'] / count * 1e6:>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="500,5000,20000")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    settings = load_settings()
    names = settings.names
    pod, request = the_pod(names)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"one pod (4 GiB, mem-only) vs N nodes x {CARDS} cards x {PODS_PER_NODE} pods; {args.rounds} rounds; "
          f"{os.cpu_count()} CPUs, load average {load:.2f} at start")
    print(f"{'nodes':>7} {'what':<9} {'median ms':>9} {'best ms':>9} {'cpu ms':>9} {'us/node':>9}")
    for count in (int(c) for c in args.nodes.split(",")):
        run_size(count, settings, pod, request, args.rounds)


def run_size(count: int, settings: Settings, pod: dict, request: PodRequest, rounds: int) -> None:
    names = settings.names
    state = build_cluster(count, names)
    scorer = Scorer(names)
    extender = Extender(settings, scorer)
    node_names = [n.name for n in state.nodes()]
    pods = state.pods()
    rng = random.Random(1)
    gc.collect()

    def rank() -> object:
        return scorer.rank(request, state)

    def change_one_pod() -> None:
        victim = pods[rng.randrange(len(pods))]
        state.upsert_pod(PodInfo(victim.namespace, victim.name, victim.uid, victim.node_name, victim.phase,
                                 victim.gpus, dict(victim.annotations)))

    cold = measure(rank, 1)
    # As gpushare serve does: the state and the profiles built with the routes exist before the
    # worker freezes its start-up objects out of the collector's reach.
    gc.collect()
    gc.freeze()
    warm = measure(rank, rounds)
    changed = measure(rank, rounds, change_one_pod)
    filtered = measure(lambda: extender.filter(ExtenderArgs(pod, node_names, None), state), rounds)
    fits = sum(1 for s in scorer.rank(request, state) if s.fits)
    for label, figures in (("warm", warm), ("1 change", changed), ("filter", filtered), ("cold", cold)):
        print(row(label, count, figures))
    gc.unfreeze()
    tracemalloc.start()
    fresh = Scorer(names)
    fresh.profiles(state)
    held = tracemalloc.get_traced_memory()[0]  # while ``fresh`` still holds its profiles
    tracemalloc.stop()
    del fresh
    print(f"{'':>7} {fits} of {count} nodes fit; the cached profiles hold {held / 2**20:.1f} MiB "
          f"({held / count / 1024:.1f} KiB per node)")


if __name__ == "__main__":
    main()
