"""Whole GPUs on ``topology`` nodes: which cards are held, and the best set for a new pod.

A topology pod's cards are the ones ACK recorded in ``topology.kubernetes.io/gpu-visible``
("0,1"); a pod without that record is given the lowest-index free cards, pods in
namespace/name order, so every reader of the same state agrees.

How well cards are linked comes from the node annotation ``gpushare.io/gpu-topology``
(docs/scoring.md): JSON ``{"bandwidth": [[...], ...]}``, a square matrix with the
bandwidth in GB/s between card i and card j (the diagonal is ignored). As ACK's
topology-aware scheduler does, a set of cards is as good as its slowest link: the set
with the highest minimum pairwise bandwidth wins, then the highest total, then the
lowest indices. Without the annotation the lowest-index free cards are taken.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb

from policies.model.cluster import NodeInfo, PodInfo
from policies.model.settings import Names

# Card sets compared exactly per node (C(8,4) = 70, C(16,8) = 12,870); beyond, greedy.
MAX_EXACT_COMBINATIONS = 20_000

Matrix = tuple[tuple[float, ...], ...]


@dataclass(frozen=True, slots=True)
class TopologyCards:
    """Whole-GPU occupancy of one topology node; read-only."""

    node: str
    count: int
    held: dict[int, str]  # card index -> key of the pod holding it
    bandwidth: Matrix | None
    note: str = ""  # why the node's topology annotation was not used, if it was not

    def free(self) -> list[int]:
        return [i for i in range(self.count) if i not in self.held]

    def link(self, a: int, b: int) -> float:
        assert self.bandwidth is not None
        return self.bandwidth[a][b]

    @property
    def best_link(self) -> float:
        if self.bandwidth is None or self.count < 2:
            return 0.0
        return max(self.bandwidth[i][j] for i in range(self.count) for j in range(self.count) if i != j)


def topology_card_count(node: NodeInfo, names: Names) -> int:
    name = names.resources.gpu_topology
    count = node.allocatable.get(name) or node.capacity.get(name)
    if not count:
        label = node.labels.get(names.labels.card_count, "")
        count = int(label) if label.isdigit() else 0
    return count


def parse_bandwidth(text: str, count: int) -> tuple[Matrix | None, str]:
    """The bandwidth matrix of the node annotation, or (None, why it is unusable)."""
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        return None, f"not JSON ({exc.args[0]})"
    rows = parsed.get("bandwidth") if isinstance(parsed, dict) else None
    if not isinstance(rows, list) or len(rows) != count:
        return None, f'needs {{"bandwidth": [...]}} with {count} rows, one per card'
    matrix: list[tuple[float, ...]] = []
    for i, row in enumerate(rows):
        if (not isinstance(row, list) or len(row) != count
                or not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in row)):
            return None, f"row {i} must list {count} non-negative numbers"
        matrix.append(tuple(float(v) for v in row))
    for i in range(count):
        for j in range(i + 1, count):
            if matrix[i][j] != matrix[j][i]:
                return None, f"not symmetric: card {i} to {j} is {matrix[i][j]:g}, {j} to {i} is {matrix[j][i]:g}"
    return tuple(matrix), ""


def _visible_cards(pod: PodInfo, names: Names) -> list[int] | None:
    text = pod.annotations.get(names.card_annotations.topology_visible, "")
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        return None
    return [int(p) for p in parts]


def topology_cards(node: NodeInfo, pods: Sequence[PodInfo], names: Names) -> TopologyCards:
    """Which whole GPUs of the node the topology pods on it hold."""
    count = topology_card_count(node, names)
    bandwidth: Matrix | None = None
    note = ""
    annotation = node.annotations.get(names.card_annotations.node_topology)
    if annotation is not None:
        bandwidth, why = parse_bandwidth(annotation, count)
        if bandwidth is None:
            note = f"annotation {names.card_annotations.node_topology} ignored: {why}"
    held: dict[int, str] = {}
    unrecorded: list[PodInfo] = []
    for pod in sorted((p for p in pods if p.topology_gpus > 0 and not p.terminated), key=lambda p: p.key):
        visible = _visible_cards(pod, names)
        if visible is not None and all(0 <= i < count for i in visible):
            held.update(dict.fromkeys(visible, pod.key))
        else:
            unrecorded.append(pod)
    for pod in unrecorded:
        free = [i for i in range(count) if i not in held]
        held.update(dict.fromkeys(free[: pod.topology_gpus], pod.key))
    return TopologyCards(node.name, count, held, bandwidth, note)


def _set_quality(cards: TopologyCards, chosen: Sequence[int]) -> tuple[float, float]:
    """(slowest link, total) of a set of at least two cards: every caller asks only of such sets."""
    links = [cards.link(a, b) for a, b in combinations(chosen, 2)]
    return min(links), sum(links)


def _greedy_set(cards: TopologyCards, free: list[int], wanted: int) -> tuple[int, ...]:
    """Grow from each starting card by the card with the best slowest link; keep the best set."""
    best: tuple[int, ...] = tuple(free[:wanted])
    best_quality = _set_quality(cards, best)
    for start in free:
        chosen = [start]
        while len(chosen) < wanted:
            rest = [c for c in free if c not in chosen]
            chosen.append(max(rest, key=lambda c: (min(cards.link(c, x) for x in chosen), -c)))
        quality = _set_quality(cards, chosen)
        if quality > best_quality:
            best, best_quality = tuple(sorted(chosen)), quality
    return best


def choose_card_set(cards: TopologyCards, wanted: int) -> tuple[int, ...] | None:
    """The free cards a pod asking for ``wanted`` whole GPUs gets; None when too few are free."""
    free = cards.free()
    if wanted > len(free):
        return None
    if cards.bandwidth is None or wanted < 2:
        return tuple(free[:wanted])
    if comb(len(free), wanted) > MAX_EXACT_COMBINATIONS:
        return _greedy_set(cards, free, wanted)
    best: tuple[int, ...] | None = None
    best_quality = (-1.0, -1.0)
    for candidate in combinations(free, wanted):  # in lexicographic order: ties keep the lowest
        quality = _set_quality(cards, candidate)
        if quality > best_quality:
            best, best_quality = candidate, quality
    return best


def set_min_link(cards: TopologyCards, chosen: Sequence[int]) -> float | None:
    """The slowest link inside the set, when the node describes its links and the set has two cards."""
    if cards.bandwidth is None or len(chosen) < 2:
        return None
    return _set_quality(cards, chosen)[0]
