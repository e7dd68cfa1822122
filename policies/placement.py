"""Can this pod run on that node? The checks behind GB001-GB005 and node filtering.

Pure functions over a pod's GPU demand, a node and the pods already on it. The admission
rules for ``pods/binding`` and the scoring engine both call ``placement_problems`` so a
node the ranking accepts is a binding the webhook admits, and the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .cards import NodeCards, node_cards, place_pod
from .cluster import NodeInfo, PodGPU, PodInfo
from .resources import ContainerRequest
from .settings import Names

SHARED_MODES = frozenset({"cgpu", "core_mem", "share", "mps"})
ALL_MODES = frozenset({"default", "topology"}) | SHARED_MODES


@dataclass(frozen=True, slots=True)
class PodDemand:
    """What a pod asks of a node's GPUs."""

    key: str
    gpus: tuple[PodGPU, ...]
    whole_gpus: int = 0
    topology_gpus: int = 0

    @property
    def uses_shared(self) -> bool:
        return bool(self.gpus)

    @property
    def is_core_mem(self) -> bool:
        return any(g.core for g in self.gpus)

    @property
    def job_type(self) -> str:
        return "core+mem" if self.is_core_mem else "mem-only"


def demand_from_containers(key: str, containers: Sequence[ContainerRequest], names: Names) -> PodDemand:
    r = names.resources
    gpus: list[PodGPU] = []
    whole = topology = 0
    for c in containers:
        mem = c.count(r.gpu_mem)
        if mem is not None:
            core = c.amount(r.gpu_core)
            gpus.append(PodGPU(c.name, mem, int(core) if core is not None else 0))
        whole += int(c.amount(r.gpu_exclusive) or 0)
        topology += int(c.amount(r.gpu_topology) or 0)
    return PodDemand(key, tuple(gpus), whole, topology)


def demand_from_pod(pod: PodInfo) -> PodDemand:
    return PodDemand(pod.key, pod.gpus, 0, pod.topology_gpus)


def cpu_manager_policy(node: NodeInfo, names: Names) -> str:
    key = names.labels.cpu_manager_policy
    return node.labels.get(key) or node.annotations.get(key) or ""


@dataclass
class PlacementResult:
    problems: list[tuple[str, str]]
    cards: list[int] | None = None
    state: NodeCards | None = None

    @property
    def fits(self) -> bool:
        return not self.problems


def placement_problems(demand: PodDemand, node: NodeInfo, pods_on_node: Sequence[PodInfo],
                       names: Names) -> PlacementResult:
    """Every reason the pod cannot go on the node, as (rule id, message); cards when it can."""
    mode = node.labels.get(names.labels.schedule, "")
    problems: list[tuple[str, str]] = []
    node_label = f"node {node.name}"
    if demand.uses_shared:
        if cpu_manager_policy(node, names) == "static":
            problems.append(("GB005", f"{node_label} runs the static CPU manager policy, which shared GPU "
                                      f"scheduling does not support; pick a node with policy none"))
        if mode not in SHARED_MODES:
            shown = mode or "unset (exclusive)"
            problems.append(("GB002", f"{node_label} has {names.labels.schedule}={shown}; shared-GPU pods "
                                      f"need one of {', '.join(sorted(SHARED_MODES))}"))
        elif demand.is_core_mem and mode != "core_mem":
            problems.append(("GB002", f"{node_label} has {names.labels.schedule}={mode}; core+mem pods "
                                      f"need core_mem"))
        live = [p for p in pods_on_node if p.uses_shared_gpu and not p.terminated and p.key != demand.key]
        other = [p for p in live if p.is_core_mem != demand.is_core_mem]
        if other:
            kinds = "core+mem" if other[0].is_core_mem else "mem-only"
            shown = ", ".join(p.key for p in other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
            problems.append(("GB001", f"{node_label} already runs {kinds} pods ({shown}); a {demand.job_type} "
                                      f"pod cannot share the node with them"))
    elif mode == "topology" and demand.whole_gpus and not demand.topology_gpus:
        problems.append(("GB002", f"{node_label} has {names.labels.schedule}=topology and takes only "
                                  f"topology workloads ({names.resources.gpu_topology}); this pod asks for "
                                  f"{names.resources.gpu_exclusive}"))
    result = PlacementResult(problems)
    if not demand.uses_shared or any(rule == "GB002" for rule, _ in problems):
        return result
    occupancy = node_cards(node, pods_on_node, names)
    # No mode, so no cGPU pod limit: tells a card that is full (GB004) from one that is crowded (GB003).
    unlimited = NodeCards(occupancy.node, "", occupancy.placement,
                          [type(c)(c.index, c.total_mem, c.used_mem, c.used_core, set(c.pods))
                           for c in occupancy.cards])
    cards, no_fit = place_pod(unlimited, demand.key, demand.gpus)
    if no_fit is not None:
        problems.append(("GB004", f'{node_label}: container "{no_fit.container}" fits no card: '
                                  + "; ".join(no_fit.reasons)))
        return result
    cards, no_fit = place_pod(occupancy, demand.key, demand.gpus)
    if no_fit is not None:
        problems.append(("GB003", f'{node_label}: container "{no_fit.container}" fits no card under the '
                                  f"cGPU limit of pods per card: " + "; ".join(no_fit.reasons)))
        return result
    result.cards, result.state = cards, occupancy
    return result
