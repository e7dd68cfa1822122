"""Per-card GPU occupancy of a node, and where new containers would go.

Occupancy comes from the pods on the node. A pod's cards are the ones the GPU-sharing
scheduler recorded in its annotations:

- ``scheduler.framework.gpushare.allocation`` (ACK GPU sharing v2): JSON
  ``{"<container index>": {"<card index>": <GiB>}}``, the container index counting
  ``spec.containers``; a container may hold GiB on more than one card;
- ``gpushare.alibabacloud.com/core-percentage``: the same shape with compute percent;
- ``ALIYUN_COM_GPU_MEM_IDX`` (v1): one card index for the whole pod.

A pod without them is packed deterministically: pods in namespace/name order, each
container placed by the node's placement policy, exactly as a new container would be.
The same placement function serves admission (GB003/GB004), scoring and ``inspect``, so
they can never disagree.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .cluster import NodeInfo, PodGPU, PodInfo
from .settings import Names

Placement = Literal["binpack", "spread"]
CORE_PER_CARD = 100
# cGPU cannot create more than 20 instances on one card (ACK "Manage the shared GPU scheduling component").
MAX_PODS_PER_CARD = 20
# The modes built on cGPU: cgpu and core_mem (ACK "Manage the shared GPU scheduling component"),
# and mps, "NVIDIA MPS isolation technology combined with Alibaba Cloud cGPU technology" (ACK "GPU
# node scheduling labels"). What the first page states for cGPU (ECS only, the
# memory-isolation regions, the version matrix, 20 pods per card) applies to all three.
CGPU_MODES = frozenset({"cgpu", "core_mem", "mps"})
CARD_LIMITED_MODES = CGPU_MODES
STRIDE = 4  # fields per card in ``CardOrder.hot``: free GiB, free compute, pods, card index


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

    def copy(self) -> Card:
        return Card(self.index, self.total_mem, self.used_mem, self.used_core, self.pods)


@dataclass(slots=True)
class NodeCards:
    node: str
    mode: str
    placement: Placement
    cards: list[Card]

    @property
    def total_mem(self) -> int:
        return sum(c.total_mem for c in self.cards)

    @property
    def used_mem(self) -> int:
        return sum(c.used_mem for c in self.cards)

    def pod_limit(self) -> int | None:
        return MAX_PODS_PER_CARD if self.mode in CARD_LIMITED_MODES else None

    def copy(self) -> NodeCards:
        """A copy to place pods on, leaving this occupancy (possibly cached) untouched."""
        return NodeCards(self.node, self.mode, self.placement, [c.copy() for c in self.cards])


@dataclass(frozen=True, slots=True)
class NoFit:
    """Why a container fits no card: one line per card."""

    container: str
    reasons: tuple[str, ...]


def node_placement(node: NodeInfo, names: Names) -> Placement:
    return "spread" if node.labels.get(names.labels.placement) == "spread" else "binpack"


def node_mode(node: NodeInfo, names: Names) -> str:
    return node.labels.get(names.labels.schedule, "")


def card_count(node: NodeInfo, names: Names) -> int:
    count = node.allocatable.get(names.resources.gpu_count) or node.capacity.get(names.resources.gpu_count)
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


def _fits(card: Card, gpu: PodGPU, pod_key: str, pod_limit: int | None) -> str | None:
    """None when the container fits the card, else the reason it does not."""
    free = card.total_mem - card.used_mem
    if free < gpu.mem:
        return f"GPU{card.index} has {free}/{card.total_mem} GiB free, needs {gpu.mem}"
    if gpu.core and CORE_PER_CARD - card.used_core < gpu.core:
        return f"GPU{card.index} has {CORE_PER_CARD - card.used_core}% compute free, needs {gpu.core}%"
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
        position = self.first_fit_position(gpu.mem, gpu.core, pod_key, pod_limit)
        return None if position < 0 else self.cards[position]


def no_fit_reasons(cards: Sequence[Card], gpu: PodGPU, pod_key: str, pod_limit: int | None) -> list[str]:
    """Why each card cannot take the container, in card order (cards that could are left out)."""
    return [why for card in cards if (why := _fits(card, gpu, pod_key, pod_limit)) is not None]


def choose_card(cards: Sequence[Card], gpu: PodGPU, pod_key: str, placement: Placement,
                pod_limit: int | None, order: CardOrder | None = None) -> tuple[Card | None, list[str]]:
    """The card for one container: fullest that fits (binpack) or emptiest (spread).

    Reasons (one per card, in card order) are only listed when no card fits.
    """
    chosen = (order or CardOrder(cards, placement)).first_fit(gpu, pod_key, pod_limit)
    if chosen is not None:
        return chosen, []
    return None, no_fit_reasons(cards, gpu, pod_key, pod_limit)


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

    ``on_charge(card index, pod key, GiB)`` hears every charge (``inspect -d`` lists pods per card).
    """
    count = card_count(node, names)
    total = node.allocatable.get(names.resources.gpu_mem) or node.capacity.get(names.resources.gpu_mem) or 0
    per_card = total // count if count else 0
    result = NodeCards(node.name, node_mode(node, names), node_placement(node, names),
                       [Card(i, per_card) for i in range(count)])
    if not result.cards:
        return result
    core_annotation = names.card_annotations.core_allocation
    unplaced: list[tuple[PodInfo, PodGPU]] = []
    for pod in sorted((p for p in pods if p.uses_shared_gpu and not p.terminated), key=lambda p: p.key):
        cores = _per_container(pod, core_annotation) if core_annotation in pod.annotations else None
        for position, (gpu, mem) in enumerate(zip(pod.gpus, recorded_cards(pod, names), strict=True)):
            if mem is not None and all(0 <= i < count for i in mem):
                _charge_recorded(result.cards, gpu, mem, cores[position] if cores else None, pod.key)
                if on_charge is not None:
                    for index, gib in mem.items():
                        on_charge(index, pod.key, gib)
            else:
                unplaced.append((pod, gpu))
    for pod, gpu in unplaced:
        card, _ = choose_card(result.cards, gpu, pod.key, result.placement, None)
        # A pod the scheduler placed but that fits nowhere by our count still uses memory:
        # charge the emptiest card so the totals stay true.
        card = card or max(result.cards, key=lambda c: c.free_mem)
        _take(card, gpu.mem, gpu.core, pod.key)
        if on_charge is not None:
            on_charge(card.index, pod.key, gpu.mem)
    return result


def place_pod(node_state: NodeCards, pod_key: str, gpus: Sequence[PodGPU]) -> tuple[list[int] | None, NoFit | None]:
    """Card indices for each container of a new pod, taken from ``node_state``; or why not."""
    limit = node_state.pod_limit()
    chosen: list[int] = []
    for gpu in gpus:
        card, reasons = choose_card(node_state.cards, gpu, pod_key, node_state.placement, limit)
        if card is None:
            if not node_state.cards:
                reasons = ["the node has no shared GPU cards"]
            return None, NoFit(gpu.container, tuple(reasons))
        _take(card, gpu.mem, gpu.core, pod_key)
        chosen.append(card.index)
    return chosen, None
