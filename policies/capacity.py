"""Can any node the cluster has ever hold this pod, and can one hold it now? (rule GC001)

Pure functions over the pod's demand and the nodes (with the pods on them). "Could take
it" is the node's mode (core_mem for core+mem pods, a shared mode for mem-only ones) and
the pod's hard node constraints (nodeSelector, required node affinity, so card-model
selectors count). A container's gpu-mem must fit on one card, so the largest card of those
nodes bounds what the pod can ever get.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .cards import node_cards
from .cluster import NodeInfo, PodInfo
from .placement import SHARED_MODES, PodDemand, judge, node_profile
from .selectors import NodeSelector
from .settings import Names


@dataclass(frozen=True, slots=True)
class CardAt:
    node: str
    index: int
    total_mem: int
    free_mem: int = 0

    @property
    def where(self) -> str:
        return f"GPU{self.index} of node {self.node}"


@dataclass(frozen=True, slots=True)
class CapacityVerdict:
    """never: no node could ever hold it; not_now: none holds it now. At most one is set."""

    never: str = ""
    not_now: str = ""


def _modes_for(demand: PodDemand) -> frozenset[str]:
    return frozenset({"core_mem"}) if demand.is_core_mem else SHARED_MODES


def _could_take(node: NodeInfo, demand: PodDemand, selector: NodeSelector, names: Names) -> bool:
    return (node.labels.get(names.labels.schedule, "") in _modes_for(demand)
            and selector.mismatch(node.labels, node.name) is None)


def judge_capacity(demand: PodDemand, selector: NodeSelector, nodes: Sequence[NodeInfo],
                   pods_on_node: Callable[[str], Iterable[PodInfo]], names: Names) -> CapacityVerdict:
    """What the cluster's nodes say about ``demand`` (only shared-GPU demands are judged)."""
    if not demand.gpus:
        return CapacityVerdict()
    need = max(demand.gpus, key=lambda g: g.mem)
    if demand.is_core_mem and not any(n.labels.get(names.labels.schedule) == "core_mem" for n in nodes):
        return CapacityVerdict(never=f"it asks for {names.resources.gpu_core} and the cluster has no core_mem node "
                                     f"(computing power allocation needs a core_mem node pool)")
    candidates = [n for n in nodes if _could_take(n, demand, selector, names)]
    if not candidates:
        kind = "core_mem" if demand.is_core_mem else f"shared-mode ({', '.join(sorted(SHARED_MODES))})"
        constraint = "" if selector.empty else " that matches its node selectors or affinity"
        return CapacityVerdict(never=f"the cluster has no {kind} node{constraint}")
    largest = max((CardAt(n.name, c.index, c.total_mem) for n in candidates for c in node_cards(n, (), names).cards),
                  key=lambda c: (c.total_mem, c.node), default=None)
    if largest is None:
        return CapacityVerdict(never="no node that could take it shows its GPU cards (gpu-mem and gpu-count)")
    if need.mem > largest.total_mem:
        return CapacityVerdict(never=f'container "{need.container}" asks for {names.resources.gpu_mem}={need.mem}, '
                                     f"more than the largest card of any node that could take it: "
                                     f"{largest.total_mem} GiB ({largest.where})")
    closest: CardAt | None = None
    for node in candidates:
        pods: Iterable[PodInfo] = pods_on_node(node.name)
        profile = node_profile(node, list(pods), names)
        if judge(demand, profile, names).fits:
            return CapacityVerdict()
        for card in profile.cards.cards:
            if card.total_mem >= need.mem and (closest is None or card.free_mem > closest.free_mem):
                closest = CardAt(node.name, card.index, card.total_mem, card.free_mem)
    shown = (f"; the closest is {closest.where} with {closest.free_mem} of {closest.total_mem} GiB free"
             if closest is not None else "")
    return CapacityVerdict(not_now=f'container "{need.container}" ({names.resources.gpu_mem}={need.mem}) fits no '
                                   f"card of the nodes that could take it right now{shown}; it stays Pending until "
                                   f"GPU memory is freed")
