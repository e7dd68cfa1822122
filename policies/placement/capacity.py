"""GC001's verdicts and words: can any node the cluster has ever hold this pod, and can one hold it now?

"Could take it" is the node's mode (core_mem for core+mem pods, a shared mode for mem-only ones)
and the pod's hard node constraints (nodeSelector, required node affinity, so card-model
selectors count). A container's gpu-mem must fit on one card, so the largest card of those
nodes bounds what the pod can ever get. The index (capacity_index) answers the question; the
plain walk over every node it is compared with lives with its test (tests/support/capacity_reference.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.model.modes import SHARED_MODES
from policies.model.selectors import NodeSelector
from policies.model.settings import Names
from policies.placement.cards import Card
from policies.placement.placement import PodDemand


@dataclass(frozen=True, slots=True)
class CardAt:
    node: str
    index: int
    total_mem: int

    @property
    def where(self) -> str:
        return f"GPU{self.index} of node {self.node}"


@dataclass(frozen=True, slots=True)
class CapacityVerdict:
    """never: no node could ever hold it; not_now: none holds it now. At most one is set."""

    never: str = ""
    not_now: str = ""
    # What would be accepted instead, for ``never``.
    accepted: str = "a request that fits such a card, or add nodes with bigger cards first"


def modes_for(demand: PodDemand) -> frozenset[str]:
    return frozenset({"core_mem"}) if demand.is_core_mem else SHARED_MODES


# GC001's "never" words, one place for the index (capacity_index) and the walk it is compared with
# (tests/support/capacity_reference.py); each is asked in this order, the first that holds is the verdict.
NO_MATCHING_NODE = CapacityVerdict(never="no node of the cluster matches its node selectors or affinity",
                                   accepted="a node selector or affinity that a node of the cluster matches")
NO_CARDS_SHOWN = CapacityVerdict(never="no node that could take it shows its GPU cards (gpu-mem and gpu-count)")


def no_core_mem_node(names: Names) -> CapacityVerdict:
    return CapacityVerdict(never=f"it asks for {names.resources.gpu_core} and the cluster has no core_mem node "
                                 f"(computing power allocation needs a core_mem node pool)")


def no_node_of_its_mode(demand: PodDemand, selector: NodeSelector) -> CapacityVerdict:
    kind = "core_mem" if demand.is_core_mem else f"shared-mode ({', '.join(sorted(SHARED_MODES))})"
    constraint = "" if selector.empty else " that matches its node selectors or affinity"
    return CapacityVerdict(never=f"the cluster has no {kind} node{constraint}",
                           accepted=f"add a {kind} node{constraint} first")


def larger_than_every_card(demand: PodDemand, largest: CardAt, names: Names) -> CapacityVerdict | None:
    """The container asking most per card, when even the largest card could not hold it."""
    need = max(demand.gpus, key=lambda g: g.mem_per_card)
    if need.mem_per_card <= largest.total_mem:
        return None
    unit = names.memory_unit
    share = f"{need.mem_per_card} {unit} on each of {need.cards} cards" if need.cards > 1 else \
        f"{names.resources.gpu_mem}={need.mem}"
    return CapacityVerdict(never=f'container "{need.container}" asks for {share}, more than the largest card of '
                                 f"any node that could take it: {largest.total_mem} {unit} ({largest.where})")


def spread_over_more_cards_than_any_node(demand: PodDemand, node: str, cards: int,
                                         names: Names) -> CapacityVerdict | None:
    """The container spread over most cards, when ``node``, with the most cards (``cards``), has fewer."""
    spread = max(demand.gpus, key=lambda g: g.cards)
    if spread.cards <= cards:
        return None
    label = names.labels.pod_gpu_count
    return CapacityVerdict(never=f'container "{spread.container}" spreads over {spread.cards} cards (pod label '
                                 f"{label}) and the most any node that could take it has is {cards} (node {node})",
                           accepted=f"a {label} label of at most {cards}")


def not_now_text(demand: PodDemand, most_compute: tuple[str, Card] | None, closest: tuple[str, Card] | None,
                 names: Names) -> str:
    """GC001's "not now" words: the card with the most compute free among those with the memory when
    the pod asks for compute and one has it, else the card closest to fitting (either may be None)."""
    unit = names.memory_unit
    if most_compute is not None:
        core = max(demand.gpus, key=lambda g: g.core_per_card)
        node, card = most_compute
        return (f'container "{core.container}" ({names.resources.gpu_core}={core.core_per_card}) fits no card of the '
                f"nodes that could take it right now: the most compute free is {card.free_core}% "
                f"on GPU{card.index} of node {node}; it stays Pending until compute is freed")
    need = max(demand.gpus, key=lambda g: g.mem_per_card)
    shown = (f"; the closest is GPU{closest[1].index} of node {closest[0]} with {closest[1].free_mem} of "
             f"{closest[1].total_mem} {unit} free" if closest is not None else "")
    return (f'container "{need.container}" ({names.resources.gpu_mem}={need.mem}) fits no card of the nodes that '
            f"could take it right now{shown}; it stays Pending until GPU memory is freed")
