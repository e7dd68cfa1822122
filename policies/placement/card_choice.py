"""Where a new pod's containers would go on a node's cards: the order its placement policy tries them
in (binpack the fullest first, spread the emptiest), the greedy choice, and when that finds no room,
a bounded search of every assignment of containers to cards before a placement is refused (so a
refusal means no scheduler could place the pod). Admission (GB003/GB004), scoring and ``inspect``
share these functions, so they can never disagree."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from policies.model.cluster import PodGPU
from policies.placement.cards import CORE_PER_CARD, Card, NodeCards, NoFit, Placement, take_share

STRIDE = 4  # fields per card in ``CardOrder.hot``: free GiB, free compute, pods, card index
# Choices tried before a placement is given up as undecided (and allowed: never stricter than
# the scheduler). Pods have a handful of GPU containers and never reach it; 300 random pods of up
# to 20 containers packed tight onto 2-8 cards took at most 17 ms each (a shared 2-core host).
SEARCH_BUDGET = 2_000


def _fits(card: Card, gpu: PodGPU, pod_key: str, pod_limit: int | None, unit: str = "GiB") -> str | None:
    """None when the container's share of one card fits the card, else the reason it does not."""
    free, mem, core = card.total_mem - card.used_mem, gpu.mem_per_card, gpu.core_per_card
    if free < mem:
        return f"GPU{card.index} has {free}/{card.total_mem} {unit} free, needs {mem}"
    if core and CORE_PER_CARD - card.used_core < core:
        return f"GPU{card.index} has {CORE_PER_CARD - card.used_core}% compute free, needs {core}%"
    if pod_limit is not None and pod_key not in card.pods and len(card.pods) >= pod_limit:
        return f"GPU{card.index} already runs {len(card.pods)} pods, the cGPU limit is {pod_limit}"
    return None


class CardOrder:
    """A node's cards in the order its placement policy tries them.

    binpack tries the fullest card first (least free memory, then lowest index); spread
    the emptiest (least used memory, then fewest pods, then lowest index). The first card
    in that order that fits is the choice. Built once per occupancy and read-only, so a
    cached order serves many scoring calls. What the choice reads is kept in one flat
    tuple of small integers (``hot``: free GiB, free compute, pods, card index per card,
    in order), so scanning a node touches one object, not a card object per card; for
    binpack a bisection skips the cards too full for the request.
    """

    __slots__ = ("_free", "cards", "hot", "placement")

    def __init__(self, cards: Sequence[Card], placement: Placement) -> None:
        self.placement = placement
        if placement == "spread":
            self.cards = tuple(sorted(cards, key=lambda c: (c.used_mem, len(c.pods), c.index)))
            self._free: tuple[int, ...] | None = None
        else:
            self.cards = tuple(sorted(cards, key=lambda c: (c.total_mem - c.used_mem, c.index)))
            self._free = tuple(c.total_mem - c.used_mem for c in self.cards)
        self.hot = tuple(value for c in self.cards
                         for value in (c.total_mem - c.used_mem, CORE_PER_CARD - c.used_core, len(c.pods), c.index))

    def first_fit_position(self, mem: int, core: int, pod_key: str, pod_limit: int | None) -> int:
        """Where in the order the chosen card is (its fields start at ``STRIDE * position`` in ``hot``); -1 for none."""
        hot = self.hot
        position = bisect_left(self._free, mem) if self._free is not None else 0
        base, end = position * STRIDE, len(hot)
        while base < end:
            if (hot[base] >= mem and (not core or hot[base + 1] >= core)
                    and (pod_limit is None or hot[base + 2] < pod_limit
                         or pod_key in self.cards[base // STRIDE].pods)):
                return base // STRIDE
            base += STRIDE
        return -1

    def first_fit(self, gpu: PodGPU, pod_key: str, pod_limit: int | None) -> Card | None:
        position = self.first_fit_position(gpu.mem_per_card, gpu.core_per_card, pod_key, pod_limit)
        return None if position < 0 else self.cards[position]

    def first_fits(self, gpu: PodGPU, pod_key: str, pod_limit: int | None) -> list[Card]:
        """The first ``gpu.cards`` cards in this order that each fit the container's share, or
        fewer when the node has not that many."""
        return [c for c in self.cards if _fits(c, gpu, pod_key, pod_limit) is None][:gpu.cards]


def no_fit_reasons(cards: Sequence[Card], gpu: PodGPU, pod_key: str, pod_limit: int | None,
                   unit: str = "GiB") -> list[str]:
    """Why each card cannot take the container, in card order (cards that could are left out)."""
    return [why for card in cards if (why := _fits(card, gpu, pod_key, pod_limit, unit)) is not None]


def choose_cards(cards: Sequence[Card], gpu: PodGPU, pod_key: str, placement: Placement,
                 pod_limit: int | None) -> list[Card] | None:
    """The cards for one container: the fullest that fit (binpack) or the emptiest (spread), as
    many as it spreads over; None when too few fit."""
    order = CardOrder(cards, placement)
    if gpu.cards == 1:
        card = order.first_fit(gpu, pod_key, pod_limit)
        return [card] if card is not None else None
    chosen = order.first_fits(gpu, pod_key, pod_limit)
    return chosen if len(chosen) == gpu.cards else None


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a new pod's containers go: per container its card indices, in container order
    (``cards`` is None when the search gave up undecided: the pod is taken to fit), or why not."""

    cards: list[tuple[int, ...]] | None
    no_fit: NoFit | None = None

    @property
    def fits(self) -> bool:
        return self.no_fit is None


def place_pod(node_state: NodeCards, pod_key: str, gpus: Sequence[PodGPU], limit: int | None = None) -> Placed:
    """Cards for each container of a new pod, taken from ``node_state``; or why not.

    The node's placement policy chooses (binpack, spread). When that greedy choice leaves a
    container without room, every assignment is tried (``_assignment``) before giving up: a pod
    the scheduler could place by another choice is never refused. ``node_state`` ends holding the
    pod when it fits.
    """
    if not node_state.cards:
        return Placed(None, NoFit(gpus[0].container, ("the node has no shared GPU cards",), gpus[0].cards))
    saved = [c.copy() for c in node_state.cards]
    chosen: list[tuple[int, ...]] = []
    for gpu in gpus:
        cards = choose_cards(node_state.cards, gpu, pod_key, node_state.placement, limit)
        if cards is None:
            node_state.cards[:] = saved
            return _search_or_refuse(node_state, pod_key, gpus, limit, gpu, len(chosen))
        for card in cards:
            take_share(card, gpu.mem_per_card, gpu.core_per_card, pod_key)
        chosen.append(tuple(c.index for c in cards))
    return Placed(chosen)


def _search_or_refuse(node_state: NodeCards, pod_key: str, gpus: Sequence[PodGPU], limit: int | None,
                      failed: PodGPU, placed_before: int) -> Placed:
    """The greedy choice failed at ``failed``: try every assignment; refuse only when none exists."""
    found = _assignment(node_state.cards, pod_key, gpus, limit)
    if found is not None:
        if found:  # an assignment: the node ends holding the pod
            by_index = {c.index: c for c in node_state.cards}
            for gpu, cards in zip(gpus, found, strict=True):
                for index in cards:
                    take_share(by_index[index], gpu.mem_per_card, gpu.core_per_card, pod_key)
            return Placed(found)
        return Placed(None)  # undecided within the budget: taken to fit
    # Why, in the words of the greedy attempt: the state the containers before ``failed`` left.
    attempt = [c.copy() for c in node_state.cards]
    for gpu in gpus[:placed_before]:
        for card in choose_cards(attempt, gpu, pod_key, node_state.placement, limit) or ():
            take_share(card, gpu.mem_per_card, gpu.core_per_card, pod_key)
    reasons = no_fit_reasons(attempt, failed, pod_key, limit, node_state.unit)
    fitting = len(attempt) - len(reasons)
    if failed.cards > len(attempt):
        reasons, fitting = [f"the node has {len(attempt)} card{'' if len(attempt) == 1 else 's'}"], -1
    return Placed(None, NoFit(failed.container, tuple(reasons), failed.cards, fitting))


def _picks(groups: list[list[int]], wanted: int) -> Iterator[tuple[int, ...]]:
    """Every way to take ``wanted`` cards from groups of cards that look alike, once per way: k
    cards of a group are its first k (the others would be the same choice)."""
    if wanted == 0:
        yield ()
        return
    if sum(len(group) for group in groups) < wanted:
        return
    first, rest = groups[0], groups[1:]
    for taken in range(min(wanted, len(first)), -1, -1):
        for more in _picks(rest, wanted - taken):
            yield (*first[:taken], *more)


def _assignment(cards: Sequence[Card], pod_key: str, gpus: Sequence[PodGPU],
                limit: int | None) -> list[tuple[int, ...]] | None:
    """Cards for every container such that each card holds what it is given (memory, compute, the
    pods-per-card limit); None when no such assignment exists, [] when the budget ran out first.

    Depth-first over the containers, largest share first; cards that look alike to a container
    (same free memory, free compute, pod count and whether the pod is already there) are one
    choice, which keeps the search small on nodes of identical cards. Every choice tried counts
    against ``SEARCH_BUDGET``, so a pod of many containers or cards cannot stall a review."""
    free = {c.index: [c.total_mem - c.used_mem, CORE_PER_CARD - c.used_core, len(c.pods), pod_key in c.pods]
            for c in cards}
    usable = [state for state in free.values() if limit is None or state[3] or state[2] < limit]
    if (sum(g.mem_per_card * g.cards for g in gpus) > sum(max(state[0], 0) for state in usable)
            or sum(g.core_per_card * g.cards for g in gpus) > sum(max(state[1], 0) for state in usable)):
        return None  # more than all the room there is: no assignment, without searching
    order = sorted(range(len(gpus)), key=lambda i: (-gpus[i].mem_per_card, -gpus[i].core_per_card))
    chosen: dict[int, tuple[int, ...]] = {}
    budget = [SEARCH_BUDGET]

    def fits(state: list[Any], gpu: PodGPU) -> bool:
        return (state[0] >= gpu.mem_per_card and (not gpu.core_per_card or state[1] >= gpu.core_per_card)
                and (limit is None or state[3] or state[2] < limit))

    def place(at: int) -> bool | None:
        if at == len(order):
            return True
        gpu = gpus[order[at]]
        groups: dict[tuple[Any, ...], list[int]] = {}
        for index, state in free.items():
            if fits(state, gpu):
                groups.setdefault(tuple(state), []).append(index)
        for pick in _picks(list(groups.values()), gpu.cards):
            budget[0] -= 1
            if budget[0] < 0:
                return None
            saved = {i: list(free[i]) for i in pick}
            for i in pick:
                state = free[i]
                state[0] -= gpu.mem_per_card
                state[1] -= gpu.core_per_card
                if not state[3]:
                    state[2], state[3] = state[2] + 1, True
            chosen[order[at]] = pick
            outcome = place(at + 1)
            if outcome is not False:
                return outcome
            free.update(saved)
        return False

    outcome = place(0)
    if outcome is None:
        return []
    return [chosen[i] for i in range(len(gpus))] if outcome else None
