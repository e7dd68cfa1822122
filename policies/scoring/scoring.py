"""Where can this pod go, on which cards, and why not elsewhere.

Filters every node (card-model selectors and required node affinity, then the placement
checks GB001-GB005 through ``placement.judge``) and scores the nodes that fit, 0..100,
by the node's own placement policy (ACK "GPU node scheduling labels"):

- binpack (default): how full the chosen cards are after placing the pod, so the
  fullest card that fits wins and empty cards stay free for large requests;
- spread: how empty the chosen cards stay, so the emptiest card wins;
- topology (whole GPUs): half how full the node is after placing, half how well the
  chosen cards are linked (their slowest link against the node's fastest).

A core+mem container counts memory and compute alike. Pods that ask for no GPU, or
only for exclusive ``nvidia.com/gpu``, are filtered but not scored (0): kube-scheduler
ranks those. Per-node profiles are cached until the state reports a change on that node,
so ranking one pod against a large cluster costs a pass over cached data.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from policies.model.cluster import ClusterState, NodeInfo
from policies.model.gpu_memory import memory_problem
from policies.model.resources import ContainerRequest, container_requests, is_zero, pod_labels, pod_spec
from policies.model.selectors import NodeSelector, node_selector_from_spec
from policies.model.settings import Names
from policies.placement.card_choice import STRIDE
from policies.placement.cards import CORE_PER_CARD
from policies.placement.placement import (
    UNRESOLVABLE_RULES,
    NodeProfile,
    PodDemand,
    demand_from_containers,
    judge,
    node_profile,
    quick_card,
)
from policies.placement.topology import set_min_link

# The reason given for a node the state does not know (yet): it may appear soon.
NO_STATE = "state"
# Filters that preemption cannot cure: kube-scheduler's FailedAndUnresolvableNodes (the
# placement rules that say so are marked in policies/rules/placement_rules.py).
UNRESOLVABLE_FILTERS = frozenset({"NodeAffinity", "NodeResourcesFit"})


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What ranking needs from a pod or a workload's pod template."""

    demand: PodDemand
    selector: NodeSelector
    pinned_node: str = ""  # spec.nodeName: the pod skips the scheduler and goes there


def unusable_values(containers: Sequence[ContainerRequest], names: Names, cards: int = 1) -> list[tuple[str, str]]:
    """Why a pod's GPU values place it nowhere: unreadable, not a whole count, or larger than
    ``cards`` cards (the multi-GPU label's). Ranking skips a value it cannot read, so a caller that
    must not treat such a pod as asking for nothing (the scheduler extender) asks this first. A zero
    of whole GPUs is no request (``ContainerRequest.has``), not a problem."""
    r = names.resources
    problems: list[tuple[str, str]] = []
    rule_of = {r.gpu_mem: "GS003", r.gpu_core: "GS001"}
    for c in containers:
        for resource in (r.gpu_mem, r.gpu_core, r.gpu_exclusive, r.gpu_topology):
            for value in (c.limits.get(resource), c.requests.get(resource)):
                if value is None or (resource in (r.gpu_exclusive, r.gpu_topology) and is_zero(value)):
                    continue
                memory = memory_problem(value, names, cards) if resource == r.gpu_mem else None
                if memory is not None:
                    why = memory.why
                elif value.quantity is None:
                    why = f"is not a quantity ({value.error})"
                elif value.whole_count is None and resource != r.gpu_core:
                    why = "is not a whole number >= 1"
                elif resource == r.gpu_core and not (0 < value.quantity <= CORE_PER_CARD):
                    why = f"is not a percentage of one card (1..{CORE_PER_CARD})"
                else:
                    continue
                problems.append((rule_of.get(resource, "NodeResourcesFit"),
                                 f'container "{c.name}": {resource}={value.raw!r} {why}'))
    return problems


def pod_request(kind: str, obj: dict[str, Any], names: Names, *, key: str,
                containers: Sequence[ContainerRequest] | None = None) -> PodRequest:
    """The ranking request of a Pod or workload object; ShapeError when its spec is malformed."""
    spec, base = pod_spec(obj, kind)
    if containers is None:
        containers = container_requests(spec, base, names)
    node_name = (spec or {}).get("nodeName")
    return PodRequest(demand_from_containers(key, containers, names, pod_labels(obj, kind)),
                      node_selector_from_spec(spec, base), node_name if isinstance(node_name, str) else "")


@dataclass(slots=True)
class NodeScore:
    """One node's verdict for one pod."""

    node: str
    fits: bool
    score: int = 0
    problems: Sequence[tuple[str, str]] = ()  # (rule id or scheduler plugin, message)
    cards: list[int] | None = None
    profile: NodeProfile | None = None
    # No eviction could make this node fit (kube-scheduler's FailedAndUnresolvableNodes).
    unresolvable: bool = False

    @property
    def reasons(self) -> list[str]:
        return [f"{rule}: {message}" for rule, message in self.problems]


def _unresolvable(problems: Sequence[tuple[str, str]], demand: PodDemand, profile: NodeProfile) -> bool:
    unresolvable = UNRESOLVABLE_FILTERS | UNRESOLVABLE_RULES
    for rule, _ in problems:
        if rule in unresolvable:
            return True
        if rule == "GB004" and demand.gpus and any(
                g.mem_per_card > profile.card_size or g.core_per_card > CORE_PER_CARD
                or g.cards > len(profile.cards.cards) for g in demand.gpus):
            return True  # larger than a whole card, or more cards than the node has
        whole = profile.topology
        if rule == "GB004" and demand.topology_gpus and whole is not None and demand.topology_gpus > whole.count:
            return True
    return False


def _exclusive_problem(demand: PodDemand, node: NodeInfo, names: Names) -> tuple[str, str] | None:
    """kube-scheduler's resource fit for whole exclusive GPUs, by allocatable (usage is its business)."""
    resource = names.resources.gpu_exclusive
    have = node.allocatable.get(resource, node.capacity.get(resource, 0))
    if have >= demand.whole_gpus:
        return None
    return ("NodeResourcesFit", f"node {node.name} has {have} {resource} allocatable, needs {demand.whole_gpus}")


def shared_score(demand: PodDemand, profile: NodeProfile, cards: Sequence[int]) -> int:
    """0..100: how full (binpack) or how empty (spread) the chosen cards are once the pod is placed.

    Memory of the distinct chosen cards, after placing, over their size; for core+mem
    pods the average of that and the same for compute.
    """
    all_cards = profile.cards.cards
    chosen = {index: all_cards[index] for index in cards}
    mem_used = sum(c.used_mem for c in chosen.values()) + sum(g.mem_per_card * g.cards for g in demand.gpus)
    fill = mem_used / sum(c.total_mem for c in chosen.values())
    if demand.is_core_mem:
        core_used = sum(c.used_core for c in chosen.values()) + sum(g.core_per_card * g.cards for g in demand.gpus)
        fill = (fill + core_used / (CORE_PER_CARD * len(chosen))) / 2
    return round(100 * (fill if profile.cards.placement == "binpack" else 1 - fill))


def topology_score(profile: NodeProfile, cards: Sequence[int]) -> int:
    """0..100: half how full the node is after placing, half how well the chosen cards are linked."""
    whole = profile.topology
    assert whole is not None and whole.count
    fill = (len(whole.held) + len(cards)) / whole.count
    slowest = set_min_link(whole, cards)
    if len(cards) < 2:
        link = 1.0
    elif slowest is None or not whole.best_link:
        link = 0.5  # links unknown: neither rewarded nor ruled out
    else:
        link = slowest / whole.best_link
    return round(100 * (fill + link) / 2)


def score_node(request: PodRequest, profile: NodeProfile, names: Names) -> NodeScore:
    """Filter and score one node for the pod."""
    node = profile.node
    selector = request.selector
    if not selector.empty:
        why = selector.mismatch(node.labels, node.name)
        if why is not None:
            return NodeScore(node.name, False, problems=[("NodeAffinity", f"node {node.name}: {why}")],
                             profile=profile, unresolvable=True)
    demand = request.demand
    result = judge(demand, profile, names)
    problems = result.problems
    if demand.whole_gpus:
        exclusive = _exclusive_problem(demand, node, names)
        if exclusive is not None:
            problems = [*problems, exclusive]
    if problems:
        return NodeScore(node.name, False, problems=problems, profile=profile,
                         unresolvable=_unresolvable(problems, demand, profile))
    cards = result.cards
    if demand.gpus and cards is not None:
        score = shared_score(demand, profile, cards)
    elif demand.topology_gpus and cards is not None:
        score = topology_score(profile, cards)
    else:
        score = 0
    return NodeScore(node.name, True, score, cards=cards, profile=profile)


class Scorer:
    """Ranks nodes for pods over a cluster state, keeping node profiles between calls.

    With a state that keeps a change log (``ClusterSnapshot``: ``generation`` and
    ``changes_since``), each call first rebuilds the profiles of just the nodes that
    changed since the last call; a state without one gets fresh profiles every call.
    Ranking never changes the state. Safe to share between threads.
    """

    def __init__(self, names: Names) -> None:
        self.names = names
        self._lock = threading.Lock()
        self._state: ClusterState | None = None
        self._seen = -1  # the state's generation the profiles reflect
        self._profiles: dict[str, NodeProfile] = {}
        self._ordered: tuple[NodeProfile, ...] = ()

    def _build(self, state: ClusterState, node: NodeInfo) -> NodeProfile:
        return node_profile(node, state.pods_on_node(node.name), self.names)

    def profiles(self, state: ClusterState) -> tuple[dict[str, NodeProfile], tuple[NodeProfile, ...]]:
        """Every node's profile, by name and in order, up to date with the state."""
        generation = getattr(state, "generation", None)
        changes_since = getattr(state, "changes_since", None)
        if generation is None or changes_since is None:
            built = {n.name: self._build(state, n) for n in state.nodes()}
            return built, tuple(built.values())
        with self._lock:
            if state is self._state and generation == self._seen:
                return self._profiles, self._ordered
            # Read the generation before the data: a change racing this refresh is seen again next time.
            changed = changes_since(self._seen) if state is self._state else None
            if changed is None:
                self._profiles = {n.name: self._build(state, n) for n in state.nodes()}
            else:
                profiles = dict(self._profiles)
                for name in set(changed):
                    node = state.get_node(name)
                    if node is None:
                        profiles.pop(name, None)
                    else:
                        profiles[name] = self._build(state, node)
                self._profiles = profiles
            self._state, self._seen, self._ordered = state, generation, tuple(self._profiles.values())
            return self._profiles, self._ordered

    def rank(self, request: PodRequest, state: ClusterState, *, node_names: Iterable[str] | None = None,
             nodes: Iterable[NodeInfo] | None = None) -> list[NodeScore]:
        """Every candidate node with its verdict: fitting nodes first, best score first, then by name.

        Candidates are ``nodes`` (objects the caller holds, e.g. the scheduler's NodeList),
        else ``node_names`` looked up in the state, else every node of the state.
        """
        scores: list[NodeScore] = []
        if nodes is not None:
            candidates: Iterable[NodeProfile] = [self._build(state, node) for node in nodes]
        else:
            by_name, ordered = self.profiles(state)
            if node_names is None:
                candidates = ordered
            else:
                candidates = []
                for name in node_names:
                    profile = by_name.get(name)
                    if profile is None:
                        scores.append(NodeScore(name, False, problems=[
                            (NO_STATE, f"node {name} is not in the webhook's cluster state (yet)")]))
                    else:
                        candidates.append(profile)
        self._score_all(request, candidates, scores)
        scores.sort(key=_ranking_key)
        return scores

    def _score_all(self, request: PodRequest, profiles: Iterable[NodeProfile], out: list[NodeScore]) -> None:
        names = self.names
        demand = request.demand
        if not demand.single_card or not request.selector.empty:
            out.extend(score_node(request, profile, names) for profile in profiles)
            return
        # The common case, one container and no node constraints: judge's first step and the
        # score straight from the profile's flat card data, no intermediate objects.
        gpu = demand.gpus[0]
        mem, core = gpu.mem, gpu.core
        core_mem = demand.is_core_mem
        append = out.append
        for profile in profiles:
            position = quick_card(demand, profile)
            if position < 0:
                append(score_node(request, profile, names))
                continue
            hot = profile.order.hot
            base = position * STRIDE
            size = profile.card_size
            fill = (size - hot[base] + mem) / size
            if core_mem:
                fill = (fill + (CORE_PER_CARD - hot[base + 1] + core) / CORE_PER_CARD) / 2
            append(NodeScore(profile.name, True, round(100 * (fill if profile.binpack else 1 - fill)),
                             cards=[hot[base + 3]], profile=profile))


def _ranking_key(score: NodeScore) -> tuple[bool, int, str]:
    return (not score.fits, -score.score, score.node)


def card_details(score: NodeScore, demand: PodDemand) -> list[dict[str, Any]]:
    """Per container (or per pod, for whole GPUs) the cards it would get and how full they would be."""
    profile = score.profile
    if not score.fits or score.cards is None or profile is None:
        return []
    if demand.gpus:
        out: list[dict[str, Any]] = []
        used: dict[int, int] = {}
        cards = iter(score.cards)
        for gpu in demand.gpus:
            indices = [next(cards) for _ in range(gpu.cards)]
            before = {i: used.get(i, profile.cards.cards[i].used_mem) for i in indices}
            used.update({i: before[i] + gpu.mem_per_card for i in indices})
            totals = [profile.cards.cards[i].total_mem for i in indices]
            entry: dict[str, Any] = {
                "container": gpu.container, "gpus": indices, "mem": gpu.mem,
                "gpu_mem_before": ", ".join(f"{before[i]}/{t}" for i, t in zip(indices, totals, strict=True)),
                "gpu_mem_after": ", ".join(f"{used[i]}/{t}" for i, t in zip(indices, totals, strict=True))}
            if gpu.core:
                entry["core"] = gpu.core
            out.append(entry)
        return out
    whole = profile.topology
    assert whole is not None
    return [{"container": None, "gpus": list(score.cards), "min_link_gbps": set_min_link(whole, score.cards)}]


def explain(score: NodeScore, demand: PodDemand) -> list[str]:
    """Why the node scores what it scores, or why it does not fit."""
    if not score.fits:
        return score.reasons
    profile = score.profile
    if profile is None or score.cards is None:
        if demand.whole_gpus:
            return [f"whole GPUs ({demand.whole_gpus}) are counted by kube-scheduler; not scored here"]
        if demand.refused:
            return [f"not ranked on GPUs: {'; '.join(demand.refused)} refused by GS003; "
                    "fix it to see where the pod fits"]
        return ["no GPU requested; kube-scheduler ranks this pod"]
    if demand.gpus:
        placement = profile.cards.placement
        unit = profile.cards.unit
        return [f'{placement}: container "{d["container"]}" on GPU{",".join(map(str, d["gpus"]))}: '
                f'{d["gpu_mem_before"]} -> {d["gpu_mem_after"]} {unit}' for d in card_details(score, demand)]
    whole = profile.topology
    assert whole is not None
    cards = ",".join(str(c) for c in score.cards)
    slowest = set_min_link(whole, score.cards)
    if slowest is not None:
        why = f"topology: GPUs {cards}, slowest link {slowest:g} GB/s (best on the node {whole.best_link:g})"
    elif len(score.cards) > 1:
        why = f"topology: lowest free GPUs {cards} (the node describes no links)"
    else:
        why = f"topology: GPU {cards}"
    return [why] + ([whole.note] if whole.note else [])


def ranking_entry(score: NodeScore, demand: PodDemand) -> dict[str, Any]:
    """One node of a ranking as plain data: node, score, fits, cards, reasons."""
    return {"node": score.node, "score": score.score, "fits": score.fits,
            "cards": card_details(score, demand), "reasons": explain(score, demand)}
