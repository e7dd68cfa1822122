"""Can this pod run on that node? The checks behind GB001-GB005 and node filtering.

Pure functions over a pod's GPU demand, a node and the pods already on it. The admission
rules for ``pods/binding`` and the scoring engine both go through ``judge`` (admission by
way of ``placement_problems``), so a node the ranking accepts is a binding the webhook
admits, and the other way round. What judging needs from a node and its pods is derived
once into a ``NodeProfile``; the scorer caches profiles until their node changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .cards import CardOrder, NodeCards, choose_card, node_cards, place_pod
from .cluster import NodeInfo, PodGPU, PodInfo
from .resources import ContainerRequest
from .settings import Names
from .topology import TopologyCards, choose_card_set, topology_cards

SHARED_MODES = frozenset({"cgpu", "core_mem", "share", "mps"})
ALL_MODES = frozenset({"default", "topology"}) | SHARED_MODES


@dataclass(frozen=True, slots=True)
class PodDemand:
    """What a pod asks of a node's GPUs."""

    key: str
    gpus: tuple[PodGPU, ...]
    whole_gpus: int = 0
    topology_gpus: int = 0
    # Derived once: judging reads it for every node.
    is_core_mem: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_core_mem", any(g.core for g in self.gpus))

    @property
    def uses_shared(self) -> bool:
        return bool(self.gpus)

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
            index = c.index if c.group == "containers" else None
            gpus.append(PodGPU(c.name, mem, int(core) if core is not None else 0, index))
        whole += int(c.amount(r.gpu_exclusive) or 0)
        topology += int(c.amount(r.gpu_topology) or 0)
    return PodDemand(key, tuple(gpus), whole, topology)


def demand_from_pod(pod: PodInfo) -> PodDemand:
    return PodDemand(pod.key, pod.gpus, 0, pod.topology_gpus)


def cpu_manager_policy(node: NodeInfo, names: Names) -> str:
    key = names.labels.cpu_manager_policy
    return node.labels.get(key) or node.annotations.get(key) or ""


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """A node and what its pods hold, as judging needs it. Read-only once built."""

    node: NodeInfo
    mode: str
    static_cpu: bool
    mem_only: tuple[str, ...]  # live mem-only shared-GPU pods, by key
    core_mem: tuple[str, ...]  # live core+mem shared-GPU pods, by key
    cards: NodeCards  # shared-GPU occupancy; judging places pods on copies
    order: CardOrder
    pod_limit: int | None  # cGPU pods per card, on the modes that have the limit
    topology: TopologyCards | None  # whole-GPU occupancy, topology nodes only


def node_profile(node: NodeInfo, pods_on_node: Sequence[PodInfo], names: Names) -> NodeProfile:
    live = sorted((p for p in pods_on_node if p.uses_shared_gpu and not p.terminated), key=lambda p: p.key)
    occupancy = node_cards(node, pods_on_node, names)
    mode = occupancy.mode
    return NodeProfile(
        node=node,
        mode=mode,
        static_cpu=cpu_manager_policy(node, names) == "static",
        mem_only=tuple(p.key for p in live if not p.is_core_mem),
        core_mem=tuple(p.key for p in live if p.is_core_mem),
        cards=occupancy,
        order=CardOrder(occupancy.cards, occupancy.placement),
        pod_limit=occupancy.pod_limit(),
        topology=topology_cards(node, pods_on_node, names) if mode == "topology" else None,
    )


@dataclass
class PlacementResult:
    problems: list[tuple[str, str]]
    # Per shared-GPU container the card it would get, or the whole-GPU card set on a topology node.
    cards: list[int] | None = None
    state: NodeCards | None = None

    @property
    def fits(self) -> bool:
        return not self.problems


def _mode_problems(demand: PodDemand, profile: NodeProfile, names: Names) -> list[tuple[str, str]]:
    """GB001, GB002, GB005: whether the node takes this kind of pod at all."""
    problems: list[tuple[str, str]] = []
    mode = profile.mode
    schedule = names.labels.schedule
    if demand.uses_shared:
        if profile.static_cpu:
            problems.append(("GB005", f"node {profile.node.name} runs the static CPU manager policy, which "
                                      f"shared GPU scheduling does not support; pick a node with policy none"))
        if mode not in SHARED_MODES:
            shown = mode or "unset (exclusive)"
            problems.append(("GB002", f"node {profile.node.name} has {schedule}={shown}; shared-GPU pods "
                                      f"need one of {', '.join(sorted(SHARED_MODES))}"))
        elif demand.is_core_mem and mode != "core_mem":
            problems.append(("GB002", f"node {profile.node.name} has {schedule}={mode}; core+mem pods "
                                      f"need core_mem"))
        others = profile.mem_only if demand.is_core_mem else profile.core_mem
        other = [k for k in others if k != demand.key]
        if other:
            kinds = "mem-only" if demand.is_core_mem else "core+mem"
            shown = ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
            problems.append(("GB001", f"node {profile.node.name} already runs {kinds} pods ({shown}); a "
                                      f"{demand.job_type} pod cannot share the node with them"))
    elif demand.topology_gpus:
        if mode != "topology":
            shown = mode or "unset (exclusive)"
            problems.append(("GB002", f"node {profile.node.name} has {schedule}={shown}; pods asking for "
                                      f"{names.resources.gpu_topology} need {schedule}=topology"))
    elif mode == "topology" and demand.whole_gpus:
        problems.append(("GB002", f"node {profile.node.name} has {schedule}=topology and takes only "
                                  f"topology workloads ({names.resources.gpu_topology}); this pod asks for "
                                  f"{names.resources.gpu_exclusive}"))
    return problems


def _place_shared(demand: PodDemand, profile: NodeProfile, result: PlacementResult, keep_state: bool) -> None:
    """GB003/GB004: a card for every container, or why not."""
    if len(demand.gpus) == 1 and not keep_state:
        _place_one(demand, profile, result)
        return
    name = profile.node.name
    unlimited = profile.cards.copy()
    unlimited.mode = ""  # no cGPU pod limit: tells a card that is full apart from one that is crowded
    cards, no_fit = place_pod(unlimited, demand.key, demand.gpus)
    if no_fit is not None:
        result.problems.append(_no_card("GB004", name, no_fit.container, no_fit.reasons))
        return
    occupancy = profile.cards.copy()
    cards, no_fit = place_pod(occupancy, demand.key, demand.gpus)
    if no_fit is not None:
        result.problems.append(_no_card("GB003", name, no_fit.container, no_fit.reasons))
        return
    result.cards, result.state = cards, occupancy


def _place_one(demand: PodDemand, profile: NodeProfile, result: PlacementResult) -> None:
    """One container on the cached order, without copying: the choice place_pod makes."""
    gpu, occupancy = demand.gpus[0], profile.cards
    limit = profile.pod_limit
    card = profile.order.first_fit(gpu, demand.key, limit)
    if card is not None:
        result.cards = [card.index]
        return
    if not occupancy.cards:
        result.problems.append(_no_card("GB004", profile.node.name, gpu.container,
                                        ("the node has no shared GPU cards",)))
        return
    _, reasons = choose_card(occupancy.cards, gpu, demand.key, occupancy.placement, None, profile.order)
    if reasons:
        result.problems.append(_no_card("GB004", profile.node.name, gpu.container, reasons))
        return
    _, reasons = choose_card(occupancy.cards, gpu, demand.key, occupancy.placement, limit, profile.order)
    result.problems.append(_no_card("GB003", profile.node.name, gpu.container, reasons))


def _no_card(rule: str, node: str, container: str, reasons: Sequence[str]) -> tuple[str, str]:
    if rule == "GB004":
        return rule, f'node {node}: container "{container}" fits no card: ' + "; ".join(reasons)
    return rule, (f'node {node}: container "{container}" fits no card under the cGPU limit of pods per '
                  f"card: " + "; ".join(reasons))


def _place_whole(demand: PodDemand, profile: NodeProfile, result: PlacementResult) -> None:
    """GB004 for topology pods: enough free whole GPUs, and the best-linked set of them."""
    cards = profile.topology
    if cards is None:
        return
    chosen = choose_card_set(cards, demand.topology_gpus)
    if chosen is None:
        holders = sorted(set(cards.held.values()))
        shown = ", ".join(holders[:3]) + (f" and {len(holders) - 3} more" if len(holders) > 3 else "")
        held = f" (held by {shown})" if holders else ""
        result.problems.append(("GB004", f"node {profile.node.name} has {len(cards.free())} of {cards.count} "
                                         f"GPUs free{held}, needs {demand.topology_gpus}"))
        return
    result.cards = list(chosen)


def _may_object(demand: PodDemand, profile: NodeProfile) -> bool:
    """False when the mode checks surely pass: the common case, decided without building messages."""
    if demand.gpus:
        return (profile.static_cpu or profile.mode not in SHARED_MODES
                or (demand.is_core_mem and profile.mode != "core_mem")
                or bool(profile.mem_only if demand.is_core_mem else profile.core_mem))
    return bool(demand.topology_gpus or demand.whole_gpus) and (
        (profile.mode != "topology") if demand.topology_gpus else profile.mode == "topology")


def quick_card(demand: PodDemand, profile: NodeProfile) -> int | None:
    """For a one-container shared-GPU pod the node surely takes, its card; else None (ask ``judge``).

    The first step of ``judge``, without building a result or a message: ranking a pod
    against thousands of nodes mostly ends here.
    """
    if len(demand.gpus) != 1 or _may_object(demand, profile):
        return None
    card = profile.order.first_fit(demand.gpus[0], demand.key, profile.pod_limit)
    return None if card is None else card.index


def judge(demand: PodDemand, profile: NodeProfile, names: Names, *, keep_state: bool = False) -> PlacementResult:
    """Every reason the pod cannot go on the node, as (rule id, message); its cards when it can.

    With ``keep_state`` the result carries the node's card occupancy after the placement.
    Never changes ``profile``.
    """
    if not keep_state:
        index = quick_card(demand, profile)
        if index is not None:
            return PlacementResult([], [index])
    problems = _mode_problems(demand, profile, names) if _may_object(demand, profile) else []
    result = PlacementResult(problems)
    if problems and any(rule == "GB002" for rule, _ in problems):
        return result
    if demand.uses_shared:
        _place_shared(demand, profile, result, keep_state)
    elif demand.topology_gpus:
        _place_whole(demand, profile, result)
    return result


def placement_problems(demand: PodDemand, node: NodeInfo, pods_on_node: Sequence[PodInfo],
                       names: Names) -> PlacementResult:
    """Every reason the pod cannot go on the node, as (rule id, message); cards when it can."""
    return judge(demand, node_profile(node, pods_on_node, names), names, keep_state=True)
