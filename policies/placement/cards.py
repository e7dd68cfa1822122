"""Per-card GPU occupancy of a node, and where new containers would go.

Occupancy comes from the pods on the node. A pod's cards are the ones the GPU-sharing
scheduler recorded in its annotations:

- ``scheduler.framework.gpushare.allocation`` (ACK GPU sharing v2): JSON
  ``{"<container index>": {"<card index>": <GiB>}}``, the container index counting
  ``spec.containers``; a container may hold GiB on more than one card;
- ``gpushare.alibabacloud.com/core-percentage``: the same shape with compute percent;
- ``ALIYUN_COM_GPU_MEM_IDX`` (v1): one card index for the whole pod.

A pod without them holds no card: it is *pending*, as the open-source scheduler extender
counts it (its device cache adds only pods with a card index: pkg/cache/nodeinfo.go,
addOrUpdatePod) and as ``kubectl inspect gpushare`` shows it (a Pending column:
gpushare-device-plugin cmd/inspect/nodeinfo.go). Its memory counts in the node's total, on no
card. Charging it to a card of our choosing could deny a binding the scheduler has decided.

A new pod's containers are placed by the node's placement policy; when that greedy choice
finds no room, every assignment of containers to cards is tried before a placement is refused,
so a refusal means no scheduler could place the pod. The same functions serve admission
(GB003/GB004), scoring and ``inspect``, so they can never disagree.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from policies.model.cluster import NodeInfo, PodGPU, PodInfo
from policies.model.modes import CGPU_MODES
from policies.model.settings import Names

Placement = Literal["binpack", "spread"]
CORE_PER_CARD = 100
# cGPU cannot create more than 20 instances on one card (ACK "Manage the shared GPU scheduling component").
MAX_PODS_PER_CARD = 20
# The cGPU modes (policies/model/modes.py): 20 pods per card at most.
CARD_LIMITED_MODES = CGPU_MODES
STRIDE = 4  # fields per card in ``CardOrder.hot``: free GiB, free compute, pods, card index
PENDING = -1  # the card index ``on_charge`` hears for memory held on no card (as inspect's Pending column)
# Choices tried before a placement is given up as undecided (and allowed: never stricter than
# the scheduler). Pods have a handful of GPU containers and never reach it; 300 random pods of up
# to 20 containers packed tight onto 2-8 cards took at most 17 ms each (a shared 2-core host).
SEARCH_BUDGET = 2_000


@dataclass(slots=True)
class Card:
    index: int
    total_mem: int
    used_mem: int = 0
    used_core: int = 0
    pods: tuple[str, ...] = ()  # keys of the pods on the card; a tuple: small, and shared by copies

    @property
    def free_mem(self) -> int:
        return self.total_mem - self.used_mem

    @property
    def free_core(self) -> int:
        return CORE_PER_CARD - self.used_core

    def copy(self) -> Card:
        return Card(self.index, self.total_mem, self.used_mem, self.used_core, self.pods)


@dataclass(slots=True)
class NodeCards:
    node: str
    mode: str
    placement: Placement
    cards: list[Card]
    # Pods whose cards the scheduler has not recorded (pod key -> GiB): on the node, on no card.
    pending: dict[str, int] = field(default_factory=dict)
    unit: str = "GiB"  # names.memory_unit, for messages

    @property
    def total_mem(self) -> int:
        return sum(c.total_mem for c in self.cards)

    @property
    def used_mem(self) -> int:
        """On the cards and pending: what the node's pods hold (inspect's node total counts both)."""
        return sum(c.used_mem for c in self.cards) + sum(self.pending.values())

    def pod_limit(self) -> int | None:
        return MAX_PODS_PER_CARD if self.mode in CARD_LIMITED_MODES else None

    def copy(self) -> NodeCards:
        """A copy to place pods on, leaving this occupancy (possibly cached) untouched."""
        return NodeCards(self.node, self.mode, self.placement, [c.copy() for c in self.cards], dict(self.pending),
                         self.unit)


@dataclass(frozen=True, slots=True)
class NoFit:
    """Why a container fits no card (or too few): one line per card that cannot take it."""

    container: str
    reasons: tuple[str, ...]
    cards: int = 1  # the cards the container needs (the multi-GPU pod label)
    fitting: int = 0  # cards that could take it, when it needs more than one (-1: the node has too few)


def node_placement(node: NodeInfo, names: Names) -> Placement:
    return "spread" if node.labels.get(names.labels.placement) == "spread" else "binpack"


def inferred_mode(node: NodeInfo, names: Names) -> str:
    """The mode of a node without the ``ack.node.gpu.schedule`` label that offers shared GPU: what it
    advertises is what the scheduler places against. ``share`` (no pods-per-card limit) when it
    advertises aliyun.com/gpu-mem, ``core_mem`` when it also advertises gpu-core.percentage; ""
    when it offers no shared GPU. Such nodes are the open-source plugin's (labelled gpushare=true,
    AliyunContainerService/gpushare-scheduler-extender pkg/utils/node.go: a node with gpu-mem
    capacity is a sharing node) and nodes whose label was removed (ACK "GPU node scheduling
    labels": removing a label does not restore exclusive scheduling)."""
    r = names.resources
    if not (node.capacity.get(r.gpu_mem) or node.allocatable.get(r.gpu_mem)):
        return ""
    return "core_mem" if node.capacity.get(r.gpu_core) or node.allocatable.get(r.gpu_core) else "share"


def node_mode(node: NodeInfo, names: Names) -> str:
    """The node's mode: its label, else what it advertises (``inferred_mode``)."""
    label = node.labels.get(names.labels.schedule)
    return label if label else inferred_mode(node, names)


def _capacity_first(node: NodeInfo, resource: str) -> int:
    """Capacity, as the scheduler extender reads it (pkg/utils/node.go, GetTotalGPUMemory and
    GetGPUCountInNode), else allocatable. Allocatable is lower only when the device plugin
    reports unhealthy cards, which do not change the size of the healthy ones."""
    return node.capacity.get(resource) or node.allocatable.get(resource) or 0


def card_count(node: NodeInfo, names: Names) -> int:
    count = _capacity_first(node, names.resources.gpu_count)
    if not count:
        label = node.labels.get(names.labels.card_count, "")
        count = int(label) if label.isdigit() else 0
    return count


CardShares = dict[int, int]  # card index -> GiB (or percent) one container holds there


def _json_object(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _shares(value: Any) -> CardShares | None:
    """{"1": 7} -> {1: 7}; None unless every entry is a card index with a positive whole amount."""
    if not isinstance(value, dict) or not value:
        return None
    out: CardShares = {}
    for card, amount in value.items():
        if isinstance(amount, str) and amount.isdigit():
            amount = int(amount)
        if not str(card).isdigit() or isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
            return None
        out[int(card)] = amount
    return out


def _per_container(pod: PodInfo, annotation: str) -> list[CardShares | None]:
    """A ``{"<container index>": {"<card>": amount}}`` annotation, aligned with ``pod.gpus``."""
    parsed = _json_object(pod.annotations.get(annotation))
    if parsed is None:
        return [None] * len(pod.gpus)
    by_index = {int(k): _shares(v) for k, v in parsed.items() if str(k).isdigit()}
    if all(g.index is None for g in pod.gpus):
        # Records built without container positions: take the annotation's keys in order.
        ordered = [by_index[k] for k in sorted(by_index)]
        return [ordered[i] if i < len(ordered) else None for i in range(len(pod.gpus))]
    return [by_index.get(g.index) if g.index is not None else None for g in pod.gpus]


def recorded_cards(pod: PodInfo, names: Names) -> list[CardShares | None]:
    """For each of the pod's GPU containers, the GiB per card the scheduler recorded, if any."""
    if names.allocation_annotation in pod.annotations:
        return _per_container(pod, names.allocation_annotation)
    legacy = pod.annotations.get(names.card_index_annotation, "")
    first = legacy.split(",")[0].strip()
    if first.isdigit():
        return [{int(first): gpu.mem} for gpu in pod.gpus]
    return [None] * len(pod.gpus)


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


def _take(card: Card, mem: int, core: int, pod_key: str) -> None:
    card.used_mem += mem
    card.used_core += core
    if pod_key not in card.pods:
        card.pods += (pod_key,)


def _charge_recorded(cards: list[Card], gpu: PodGPU, mem: CardShares, core: CardShares | None,
                     pod_key: str) -> None:
    for index, gib in mem.items():
        _take(cards[index], gib, 0, pod_key)
    if core is not None and all(0 <= i < len(cards) for i in core):
        for index, percent in core.items():
            cards[index].used_core += percent
    elif gpu.core:
        # No compute record: the compute goes with the card holding most of the memory.
        cards[max(mem, key=lambda i: (mem[i], -i))].used_core += gpu.core


def node_cards(node: NodeInfo, pods: Sequence[PodInfo], names: Names,
               on_charge: Callable[[int, str, int], None] | None = None) -> NodeCards:
    """The occupancy of every card on the node from the pods running there.

    ``on_charge(card index, pod key, GiB)`` hears every charge (``inspect -d`` lists pods per card);
    memory held on no card is heard with the index ``PENDING``. A card's size is the node's
    gpu-mem capacity over its gpu-count (``_capacity_first``), in whole units.
    """
    count = card_count(node, names)
    total = _capacity_first(node, names.resources.gpu_mem)
    per_card = total // count if count else 0
    result = NodeCards(node.name, node_mode(node, names), node_placement(node, names),
                       [Card(i, per_card) for i in range(count)], unit=names.memory_unit)
    core_annotation = names.card_annotations.core_allocation
    for pod in sorted((p for p in pods if p.uses_shared_gpu and not p.terminated), key=lambda p: p.key):
        cores = _per_container(pod, core_annotation) if core_annotation in pod.annotations else None
        for position, (gpu, mem) in enumerate(zip(pod.gpus, recorded_cards(pod, names), strict=True)):
            if mem is not None and all(0 <= i < count for i in mem):
                _charge_recorded(result.cards, gpu, mem, cores[position] if cores else None, pod.key)
                if on_charge is not None:
                    for index, gib in mem.items():
                        on_charge(index, pod.key, gib)
            else:
                result.pending[pod.key] = result.pending.get(pod.key, 0) + gpu.mem
                if on_charge is not None:
                    on_charge(PENDING, pod.key, gpu.mem)
    return result


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
            _take(card, gpu.mem_per_card, gpu.core_per_card, pod_key)
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
                    _take(by_index[index], gpu.mem_per_card, gpu.core_per_card, pod_key)
            return Placed(found)
        return Placed(None)  # undecided within the budget: taken to fit
    # Why, in the words of the greedy attempt: the state the containers before ``failed`` left.
    attempt = [c.copy() for c in node_state.cards]
    for gpu in gpus[:placed_before]:
        for card in choose_cards(attempt, gpu, pod_key, node_state.placement, limit) or ():
            _take(card, gpu.mem_per_card, gpu.core_per_card, pod_key)
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
