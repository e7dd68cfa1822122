"""Per-card GPU occupancy of a node, and where new containers would go.

Occupancy comes from the pods on the node. A pod's card is the one the GPU-sharing
scheduler recorded in its annotations (``scheduler.framework.gpushare.allocation``, a
JSON map ``{"<container index>": {"<card index>": <GiB>}}``, or the legacy
``ALIYUN_COM_GPU_MEM_IDX``); a pod without one is packed deterministically: pods in
namespace/name order, each container placed by the node's placement policy, exactly as a
new container would be. The same placement function serves admission (GB003/GB004),
scoring and ``inspect``, so they can never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from .cluster import NodeInfo, PodGPU, PodInfo
from .settings import Names

Placement = Literal["binpack", "spread"]
CORE_PER_CARD = 100
# cGPU cannot create more than 20 instances on one card (seed 002).
MAX_PODS_PER_CARD = 20
CARD_LIMITED_MODES = frozenset({"cgpu", "core_mem"})


@dataclass(slots=True)
class Card:
    index: int
    total_mem: int
    used_mem: int = 0
    used_core: int = 0
    pods: set[str] = field(default_factory=set)
    # GiB each pod holds on this card (for `inspect -d`).
    pod_mem: dict[str, int] = field(default_factory=dict)

    @property
    def free_mem(self) -> int:
        return self.total_mem - self.used_mem

    @property
    def free_core(self) -> int:
        return CORE_PER_CARD - self.used_core


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


def recorded_cards(pod: PodInfo, names: Names) -> list[int | None]:
    """The card index the scheduler recorded for each of the pod's GPU containers, if any."""
    recorded: list[int | None] = [None] * len(pod.gpus)
    allocation = pod.annotations.get(names.allocation_annotation)
    if allocation:
        try:
            parsed = json.loads(allocation)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            for position, key in enumerate(sorted(parsed, key=lambda k: int(k) if k.isdigit() else 0)):
                cards = parsed[key]
                if position < len(recorded) and isinstance(cards, dict) and cards:
                    first = next(iter(cards))
                    recorded[position] = int(first) if str(first).isdigit() else None
            return recorded
    legacy = pod.annotations.get(names.card_index_annotation, "")
    first = legacy.split(",")[0].strip()
    if first.isdigit():
        recorded = [int(first)] * len(pod.gpus)
    return recorded


def _fits(card: Card, gpu: PodGPU, pod_key: str, pod_limit: int | None) -> str | None:
    """None when the container fits the card, else the reason it does not."""
    if card.free_mem < gpu.mem:
        return f"GPU{card.index} has {card.free_mem}/{card.total_mem} GiB free, needs {gpu.mem}"
    if gpu.core and card.free_core < gpu.core:
        return f"GPU{card.index} has {card.free_core}% compute free, needs {gpu.core}%"
    if pod_limit is not None and pod_key not in card.pods and len(card.pods) >= pod_limit:
        return f"GPU{card.index} already runs {len(card.pods)} pods, the cGPU limit is {pod_limit}"
    return None


def choose_card(cards: Sequence[Card], gpu: PodGPU, pod_key: str, placement: Placement,
                pod_limit: int | None) -> tuple[Card | None, list[str]]:
    """The card for one container: fullest that fits (binpack) or emptiest (spread)."""
    reasons: list[str] = []
    fitting: list[Card] = []
    for card in cards:
        why = _fits(card, gpu, pod_key, pod_limit)
        if why is None:
            fitting.append(card)
        else:
            reasons.append(why)
    if not fitting:
        return None, reasons
    if placement == "spread":
        best = min(fitting, key=lambda c: (c.used_mem, len(c.pods), c.index))
    else:
        best = min(fitting, key=lambda c: (c.free_mem, c.index))
    return best, reasons


def _take(card: Card, gpu: PodGPU, pod_key: str) -> None:
    card.used_mem += gpu.mem
    card.used_core += gpu.core
    card.pods.add(pod_key)
    card.pod_mem[pod_key] = card.pod_mem.get(pod_key, 0) + gpu.mem


def node_cards(node: NodeInfo, pods: Sequence[PodInfo], names: Names) -> NodeCards:
    """The occupancy of every card on the node from the pods running there."""
    count = card_count(node, names)
    total = node.allocatable.get(names.resources.gpu_mem) or node.capacity.get(names.resources.gpu_mem) or 0
    per_card = total // count if count else 0
    result = NodeCards(node.name, node_mode(node, names), node_placement(node, names),
                       [Card(i, per_card) for i in range(count)])
    if not result.cards:
        return result
    unplaced: list[tuple[PodInfo, PodGPU]] = []
    for pod in sorted((p for p in pods if p.uses_shared_gpu and not p.terminated), key=lambda p: p.key):
        for gpu, index in zip(pod.gpus, recorded_cards(pod, names), strict=True):
            if index is not None and 0 <= index < count:
                _take(result.cards[index], gpu, pod.key)
            else:
                unplaced.append((pod, gpu))
    for pod, gpu in unplaced:
        card, _ = choose_card(result.cards, gpu, pod.key, result.placement, None)
        # A pod the scheduler placed but that fits nowhere by our count still uses memory:
        # charge the emptiest card so the totals stay true.
        _take(card or max(result.cards, key=lambda c: c.free_mem), gpu, pod.key)
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
        _take(card, gpu, pod_key)
        chosen.append(card.index)
    return chosen, None
