"""GPU allocation per node and card, as ``kubectl inspect cgpu`` reports it (ACK GPU-sharing pages).

Built on ``cards.node_cards``: the occupancy admission and scoring decide with is the
occupancy ``inspect`` shows, so the three never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.model.cluster import ClusterState
from policies.model.settings import Names
from policies.placement.cards import CORE_PER_CARD, PENDING, node_cards

CORE_MODE = "core_mem"


@dataclass(frozen=True, slots=True)
class CardUsage:
    index: int
    used_mem: int
    total_mem: int
    used_core: int
    total_core: int = CORE_PER_CARD


@dataclass(frozen=True, slots=True)
class PodUsage:
    namespace: str
    name: str
    mem_by_card: dict[int, int]  # card index -> GiB; ``PENDING`` for memory the scheduler recorded on no card

    @property
    def mem(self) -> int:
        return sum(self.mem_by_card.values())

    @property
    def pending_mem(self) -> int:
        return self.mem_by_card.get(PENDING, 0)


@dataclass(frozen=True, slots=True)
class NodeUsage:
    name: str
    ip: str
    mode: str
    placement: str
    cards: tuple[CardUsage, ...]
    pods: tuple[PodUsage, ...]
    # GPU memory of pods the scheduler recorded on no card: on the node, on no card (the open-source
    # ``kubectl inspect gpushare`` shows it in a Pending column and counts it in the node's total).
    pending_mem: int = 0
    unit: str = "GiB"

    @property
    def used_mem(self) -> int:
        return sum(c.used_mem for c in self.cards) + self.pending_mem

    @property
    def total_mem(self) -> int:
        return sum(c.total_mem for c in self.cards)

    @property
    def shows_core(self) -> bool:
        """Compute is allocated per card only on core_mem nodes."""
        return self.mode == CORE_MODE


@dataclass(frozen=True, slots=True)
class ClusterUsage:
    nodes: tuple[NodeUsage, ...]

    @property
    def used_mem(self) -> int:
        return sum(n.used_mem for n in self.nodes)

    @property
    def total_mem(self) -> int:
        return sum(n.total_mem for n in self.nodes)

    @property
    def percent(self) -> int:
        """Whole percent, rounded down, as the ACK pages print it (3/15 is 20%, 24/60 is 40%)."""
        return self.used_mem * 100 // self.total_mem if self.total_mem else 0

    @property
    def max_cards(self) -> int:
        return max((len(n.cards) for n in self.nodes), default=0)

    @property
    def has_pending(self) -> bool:
        return any(n.pending_mem for n in self.nodes)


def node_usage(state: ClusterState, node_name: str, names: Names) -> NodeUsage | None:
    """Allocation on one node, or None when it has no shared GPU memory to report."""
    node = state.get_node(node_name)
    if node is None:
        return None
    pods: dict[str, PodUsage] = {}

    def charged(card: int, key: str, gib: int) -> None:
        namespace, _, name = key.partition("/")
        usage = pods.setdefault(key, PodUsage(namespace, name, {}))
        usage.mem_by_card[card] = usage.mem_by_card.get(card, 0) + gib

    occupancy = node_cards(node, state.pods_on_node(node_name), names, on_charge=charged)
    if not occupancy.cards or occupancy.total_mem <= 0:
        return None
    cards = tuple(CardUsage(c.index, c.used_mem, c.total_mem, c.used_core) for c in occupancy.cards)
    return NodeUsage(node.name, node.internal_ip, occupancy.mode, occupancy.placement, cards,
                     tuple(pods[k] for k in sorted(pods)), sum(occupancy.pending.values()), occupancy.unit)


def cluster_usage(state: ClusterState, names: Names, only: tuple[str, ...] = ()) -> ClusterUsage:
    """Every node with shared GPU memory (or just the ``only`` ones), by name."""
    wanted = set(only)
    node_names = sorted(n.name for n in state.nodes() if not wanted or n.name in wanted)
    usages = (node_usage(state, name, names) for name in node_names)
    return ClusterUsage(tuple(u for u in usages if u is not None))
