"""Can this pod run on that node? The checks behind GB001-GB005 and node filtering.

Pure functions over a pod's GPU demand, a node and the pods already on it. The admission
rules for ``pods/binding`` and the scoring engine both go through ``judge`` (admission by
way of ``placement_problems``), so a node the ranking accepts is a binding the webhook
admits, and the other way round. What judging needs from a node and its pods is derived
once into a ``NodeProfile``; the scorer caches profiles until their node changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from policies.model.cluster import NodeInfo, PodGPU, PodInfo
from policies.model.cluster_manifests import shared_gpus
from policies.model.modes import SHARED_MODES
from policies.model.resources import ContainerRequest, cards_per_container
from policies.model.settings import Names
from policies.placement.card_choice import CardOrder, no_fit_reasons, place_pod
from policies.placement.cards import NodeCards, NoFit, node_cards
from policies.placement.topology import TopologyCards, choose_card_set, topology_cards

# The node-level refusals no eviction can cure (kube-scheduler's FailedAndUnresolvable): the node's
# mode (GB002) and its CPU manager policy (GB005) hold whatever runs on it; GB001, GB003 and GB004
# can clear when pods go.
UNRESOLVABLE_RULES = frozenset({"GB002", "GB005"})


@dataclass(slots=True, unsafe_hash=True)  # not frozen (never changed all the same), as PodGPU: built for every review
class PodDemand:
    """What a pod asks of a node's GPUs."""

    key: str
    gpus: tuple[PodGPU, ...]
    whole_gpus: int = 0
    topology_gpus: int = 0
    # GPU values rule GS003 refuses ('container "c": aliyun.com/gpu-mem=4000m'): never a card
    # demand, but a ranking says so instead of "no GPU requested".
    refused: tuple[str, ...] = ()
    # Derived once: judging reads it for every node.
    is_core_mem: bool = field(init=False, compare=False)
    # One container on one card: the case judging and ranking answer without copying a node.
    single_card: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        gpus = self.gpus
        self.is_core_mem = any(g.core for g in gpus) if gpus else False
        self.single_card = len(gpus) == 1 and gpus[0].cards == 1

    @property
    def uses_shared(self) -> bool:
        return bool(self.gpus)

    @property
    def job_type(self) -> str:
        return "core+mem" if self.is_core_mem else "mem-only"


def demand_from_containers(key: str, containers: Sequence[ContainerRequest], names: Names,
                           labels: Mapping[str, str] | None = None) -> PodDemand:
    """What a pod (or a workload's pod) asks of a node, as the scheduler counts it (``shared_gpus``:
    app containers on cards, spread over the cards the multi-GPU label asks; whole GPUs by the
    effective request). ``labels``: the pod's labels."""
    mem = names.resources.gpu_mem
    found = shared_gpus(containers, names, labels or {})
    cards = cards_per_container(labels or {}, names) or 1
    refused = tuple(f'container "{c.name}": {mem}={value.raw}' for c in containers
                    if c.is_app and (value := c.value(mem)) is not None and c.memory(names, cards) is None)
    return PodDemand(key, found.gpus, found.exclusive, found.topology, refused)


def demand_from_pod(pod: PodInfo) -> PodDemand:
    return PodDemand(pod.key, pod.gpus, 0, pod.topology_gpus)


def cpu_manager_policy(node: NodeInfo, names: Names) -> str:
    """The node's CPU manager policy: its label, else its annotation (what the operator published
    wins), else what its kubelet reported through /configz (opt-in); "" when unknown."""
    key = names.labels.cpu_manager_policy
    return node.labels.get(key) or node.annotations.get(key) or node.kubelet_cpu_manager_policy


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """A node and what its pods hold, as judging needs it. Read-only once built."""

    node: NodeInfo
    name: str
    mode: str  # the label, else what the node advertises (cards.node_mode)
    mode_inferred: bool  # no mode label: judged by what the node advertises
    static_cpu: bool
    mem_only: tuple[str, ...]  # live mem-only shared-GPU pods, by key
    core_mem: tuple[str, ...]  # live core+mem shared-GPU pods, by key
    # GB001, GB002 and GB005 surely pass for a mem-only / a core+mem pod: decided once per node.
    takes_mem_only: bool
    takes_core_mem: bool
    cards: NodeCards  # shared-GPU occupancy; judging places pods on copies
    order: CardOrder
    card_size: int  # GiB per card
    binpack: bool
    pod_limit: int | None  # cGPU pods per card, on the modes that have the limit
    topology: TopologyCards | None  # whole-GPU occupancy, topology nodes only


def node_profile(node: NodeInfo, pods_on_node: Sequence[PodInfo], names: Names) -> NodeProfile:
    live = sorted((p for p in pods_on_node if p.uses_shared_gpu and not p.terminated), key=lambda p: p.key)
    occupancy = node_cards(node, pods_on_node, names)
    mode = occupancy.mode
    inferred = not node.labels.get(names.labels.schedule) and mode != ""  # node_mode read what it advertises
    static = cpu_manager_policy(node, names) == "static"
    mem_only = tuple(p.key for p in live if not p.is_core_mem)
    core_mem = tuple(p.key for p in live if p.is_core_mem)
    return NodeProfile(
        node=node,
        name=node.name,
        mode=mode,
        mode_inferred=inferred,
        static_cpu=static,
        mem_only=mem_only,
        core_mem=core_mem,
        takes_mem_only=not static and mode in SHARED_MODES and not core_mem,
        takes_core_mem=not static and mode == "core_mem" and not mem_only,
        cards=occupancy,
        order=CardOrder(occupancy.cards, occupancy.placement),
        card_size=occupancy.cards[0].total_mem if occupancy.cards else 0,
        binpack=occupancy.placement == "binpack",
        pod_limit=occupancy.pod_limit(),
        topology=topology_cards(node, pods_on_node, names) if mode == "topology" else None,
    )


@dataclass(slots=True)
class PlacementResult:
    problems: list[tuple[str, str]]
    # The cards the pod would get: per shared-GPU container its cards, one after the other (a
    # container spread over M cards has M), or the whole-GPU card set on a topology node.
    cards: list[int] | None = None
    state: NodeCards | None = None
    # Warnings that do not refuse the placement, as (rule id, message).
    notes: list[tuple[str, str]] = field(default_factory=list)

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
            problems.append(("GB005", f"node {profile.name} runs the static CPU manager policy, which "
                                      f"shared GPU scheduling does not support; pick a node with policy none"))
        if mode not in SHARED_MODES:
            shown = mode or "unset (exclusive)"
            problems.append(("GB002", f"node {profile.name} has {schedule}={shown}; shared-GPU pods "
                                      f"need one of {', '.join(sorted(SHARED_MODES))}"))
        elif demand.is_core_mem and mode != "core_mem":
            problems.append(("GB002", f"node {profile.name} has {schedule}={mode}; core+mem pods "
                                      f"need core_mem"))
        others = profile.mem_only if demand.is_core_mem else profile.core_mem
        other = [k for k in others if k != demand.key]
        if other:
            kinds = "mem-only" if demand.is_core_mem else "core+mem"
            shown = ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
            problems.append(("GB001", f"node {profile.name} already runs {kinds} pods ({shown}); a "
                                      f"{demand.job_type} pod cannot share the node with them"))
    elif demand.topology_gpus:
        if mode != "topology":
            shown = mode or "unset (exclusive)"
            problems.append(("GB002", f"node {profile.name} has {schedule}={shown}; pods asking for "
                                      f"{names.resources.gpu_topology} need {schedule}=topology"))
    elif mode == "topology" and demand.whole_gpus:
        problems.append(("GB002", f"node {profile.name} has {schedule}=topology and takes only "
                                  f"topology workloads ({names.resources.gpu_topology}); this pod asks for "
                                  f"{names.resources.gpu_exclusive}"))
    return problems


def mode_problems(demand: PodDemand, profile: NodeProfile, names: Names) -> list[tuple[str, str]]:
    """GB001, GB002, GB005 for a pod on a node: whether the node takes this kind of pod at all
    (the audit asks it of pods already running there)."""
    return _mode_problems(demand, profile, names)


def _place_shared(demand: PodDemand, profile: NodeProfile, result: PlacementResult, keep_state: bool) -> None:
    """GB003/GB004: cards for every container, or why not."""
    if demand.single_card and not keep_state:
        _place_one(demand, profile, result)
        return
    name = profile.name
    occupancy = profile.cards.copy()
    placed = place_pod(occupancy, demand.key, demand.gpus)  # no pod limit: full (GB004) apart from crowded (GB003)
    if profile.pod_limit is not None and placed.fits:
        occupancy = profile.cards.copy()
        placed = place_pod(occupancy, demand.key, demand.gpus, profile.pod_limit)
        if placed.no_fit is not None:
            result.problems.append(_no_card("GB003", name, placed.no_fit))
            return
    if placed.no_fit is not None:
        result.problems.append(_no_card("GB004", name, placed.no_fit))
        return
    result.cards = None if placed.cards is None else [i for cards in placed.cards for i in cards]
    result.state = occupancy


def _place_one(demand: PodDemand, profile: NodeProfile, result: PlacementResult) -> None:
    """One container on one card, on the cached order, without copying: the choice place_pod makes."""
    gpu, occupancy = demand.gpus[0], profile.cards
    limit = profile.pod_limit
    position = profile.order.first_fit_position(gpu.mem, gpu.core, demand.key, limit)
    if position >= 0:
        result.cards = [profile.order.cards[position].index]
        return
    if not occupancy.cards:
        result.problems.append(_no_card("GB004", profile.name, NoFit(gpu.container,
                                                                     ("the node has no shared GPU cards",))))
        return
    # No card fits under the limit: GB004 when none fits even without it, else GB003.
    unlimited = no_fit_reasons(occupancy.cards, gpu, demand.key, None, occupancy.unit)
    if len(unlimited) == len(occupancy.cards):
        result.problems.append(_no_card("GB004", profile.name, NoFit(gpu.container, tuple(unlimited))))
        return
    limited = no_fit_reasons(occupancy.cards, gpu, demand.key, limit, occupancy.unit)
    result.problems.append(_no_card("GB003", profile.name, NoFit(gpu.container, tuple(limited))))


def _no_card(rule: str, node: str, no_fit: NoFit) -> tuple[str, str]:
    reasons = "; ".join(no_fit.reasons)
    if no_fit.cards > 1:
        what = f'container "{no_fit.container}" needs {no_fit.cards} cards' + (
            f" and {no_fit.fitting} {'fits' if no_fit.fitting == 1 else 'fit'}" if no_fit.fitting >= 0 else "")
    else:
        what = f'container "{no_fit.container}" fits no card'
    if rule == "GB004":
        return rule, f"node {node}: {what}: {reasons}"
    return rule, f"node {node}: {what} under the cGPU limit of pods per card: {reasons}"


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
        result.problems.append(("GB004", f"node {profile.name} has {len(cards.free())} of {cards.count} "
                                         f"GPUs free{held}, needs {demand.topology_gpus}"))
        return
    result.cards = list(chosen)


def _may_object(demand: PodDemand, profile: NodeProfile) -> bool:
    """False when the mode checks surely pass: the common case, decided without building messages."""
    if demand.gpus:
        return not (profile.takes_core_mem if demand.is_core_mem else profile.takes_mem_only)
    return bool(demand.topology_gpus or demand.whole_gpus) and (
        (profile.mode != "topology") if demand.topology_gpus else profile.mode == "topology")


def quick_card(demand: PodDemand, profile: NodeProfile) -> int:
    """For a one-container shared-GPU pod the node surely takes, where its card is in
    ``profile.order`` (see ``CardOrder.hot``); -1 otherwise (ask ``judge``).

    ``judge``'s answer for the common case, without building a result or a message:
    ranking a pod against thousands of nodes mostly ends here.
    """
    if not demand.single_card or not (profile.takes_core_mem if demand.is_core_mem else profile.takes_mem_only):
        return -1
    gpu = demand.gpus[0]
    return profile.order.first_fit_position(gpu.mem, gpu.core, demand.key, profile.pod_limit)


def judge(demand: PodDemand, profile: NodeProfile, names: Names, *, keep_state: bool = False) -> PlacementResult:
    """Every reason the pod cannot go on the node, as (rule id, message); its cards when it can.

    With ``keep_state`` the result carries the node's card occupancy after the placement.
    Never changes ``profile``.
    """
    problems = _mode_problems(demand, profile, names) if _may_object(demand, profile) else []
    result = PlacementResult(problems)
    for rule, _ in problems:
        if rule == "GB002":  # the node does not take this kind of pod: its cards do not matter
            return result
    if profile.mode_inferred and demand.uses_shared:
        schedule = names.labels.schedule
        result.notes.append(("GB002", f"node {profile.name} has no {schedule} label; judged as {profile.mode}, "
                                      f"which its {names.resources.gpu_mem} capacity shows"))
    if demand.uses_shared:
        _place_shared(demand, profile, result, keep_state)
    elif demand.topology_gpus:
        _place_whole(demand, profile, result)
    return result


def placement_problems(demand: PodDemand, node: NodeInfo, pods_on_node: Sequence[PodInfo],
                       names: Names) -> PlacementResult:
    """Every reason the pod cannot go on the node, as (rule id, message); cards when it can."""
    return judge(demand, node_profile(node, pods_on_node, names), names, keep_state=True)
