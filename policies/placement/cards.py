"""Per-card GPU occupancy of a node.

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

Where a new pod's containers would go on these cards is ``card_choice``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
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
PENDING = -1  # the card index ``on_charge`` hears for memory held on no card (as inspect's Pending column)


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


def take_share(card: Card, mem: int, core: int, pod_key: str) -> None:
    """Charges the card with a container's share: its memory, its compute, and the pod among its pods."""
    card.used_mem += mem
    card.used_core += core
    if pod_key not in card.pods:
        card.pods += (pod_key,)


def _charge_recorded(cards: list[Card], gpu: PodGPU, mem: CardShares, core: CardShares | None,
                     pod_key: str) -> None:
    for index, gib in mem.items():
        take_share(cards[index], gib, 0, pod_key)
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


