"""Can any node the cluster has ever hold this pod, and can one hold it now? (rule GC001)

Pure functions over the pod's demand and the nodes (with the pods on them). "Could take
it" is the node's mode (core_mem for core+mem pods, a shared mode for mem-only ones) and
the pod's hard node constraints (nodeSelector, required node affinity, so card-model
selectors count). A container's gpu-mem must fit on one card, so the largest card of those
nodes bounds what the pod can ever get.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .placement import SHARED_MODES, NodeProfile, PodDemand, judge
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


def _could_take(profile: NodeProfile, demand: PodDemand, selector: NodeSelector, names: Names) -> bool:
    node = profile.node
    return (node.labels.get(names.labels.schedule, "") in _modes_for(demand)
            and selector.mismatch(node.labels, node.name) is None)


def judge_capacity(demand: PodDemand, selector: NodeSelector, profiles: Sequence[NodeProfile],
                   names: Names) -> CapacityVerdict:
    """What the cluster's nodes say about ``demand`` (only shared-GPU demands are judged).

    ``profiles`` are the nodes with what their pods hold, as the scoring engine keeps them up to
    date (built once per node change, not once per review)."""
    if not demand.gpus:
        return CapacityVerdict()
    need = max(demand.gpus, key=lambda g: g.mem)
    if demand.is_core_mem and not any(p.node.labels.get(names.labels.schedule) == "core_mem" for p in profiles):
        return CapacityVerdict(never=f"it asks for {names.resources.gpu_core} and the cluster has no core_mem node "
                                     f"(computing power allocation needs a core_mem node pool)")
    candidates = [p for p in profiles if _could_take(p, demand, selector, names)]
    if not candidates:
        kind = "core_mem" if demand.is_core_mem else f"shared-mode ({', '.join(sorted(SHARED_MODES))})"
        constraint = "" if selector.empty else " that matches its node selectors or affinity"
        return CapacityVerdict(never=f"the cluster has no {kind} node{constraint}")
    largest = max((CardAt(p.name, c.index, c.total_mem) for p in candidates for c in p.cards.cards),
                  key=lambda c: (c.total_mem, c.node), default=None)
    if largest is None:
        return CapacityVerdict(never="no node that could take it shows its GPU cards (gpu-mem and gpu-count)")
    if need.mem > largest.total_mem:
        return CapacityVerdict(never=f'container "{need.container}" asks for {names.resources.gpu_mem}={need.mem}, '
                                     f"more than the largest card of any node that could take it: "
                                     f"{largest.total_mem} GiB ({largest.where})")
    closest: CardAt | None = None
    for profile in candidates:
        if judge(demand, profile, names).fits:
            return CapacityVerdict()
        for card in profile.cards.cards:
            if card.total_mem >= need.mem and (closest is None or card.free_mem > closest.free_mem):
                closest = CardAt(profile.name, card.index, card.total_mem, card.free_mem)
    shown = (f"; the closest is {closest.where} with {closest.free_mem} of {closest.total_mem} GiB free"
             if closest is not None else "")
    return CapacityVerdict(not_now=f'container "{need.container}" ({names.resources.gpu_mem}={need.mem}) fits no '
                                   f"card of the nodes that could take it right now{shown}; it stays Pending until "
                                   f"GPU memory is freed")
