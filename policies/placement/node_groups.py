"""The nodes grouped as GC001's index keeps them: per node a summary of what the question reads, per
group of nodes alike for a selector (one mode, the same values of the labels it reads) maps of node
names by card size, free memory and shape, and the projections that find the groups a selector
matches in sets."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from policies.model.selectors import NodeSelector, Requirement
from policies.model.settings import Names
from policies.placement.placement import NodeProfile
from policies.placement.work_budget import NODE, WorkBudget

NAME = "\0metadata.name"  # the pseudo-label ``matchFields`` reads: a node's name


def selector_keys(selector: NodeSelector) -> tuple[frozenset[str], bool]:
    """The label keys the selector reads, and whether it names nodes (``matchFields``)."""
    keys = {key for key, _ in selector.labels}
    by_name = False
    for term in selector.terms or ():
        keys.update(r.key for r in term.labels)
        by_name = by_name or bool(term.fields)
    return frozenset(keys), by_name


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """What the index keeps of one node (from its profile), as the keys of its groups' maps."""

    profile: NodeProfile
    mode: str  # its mode as GC001 reads it: the label, else what the node advertises
    order: int  # its place among the nodes (the walk's order: ties go to the first)
    sizes: frozenset[int]  # card sizes, GiB
    count: int  # its cards
    free_cards: frozenset[tuple[int, int]]  # (size, the most free GiB of its cards of that size)
    free_both: frozenset[tuple[int, int]]  # (free GiB, free %) of its cards (GC001's "not now" words)
    best_mem_only: int  # free GiB of its freest card with room, if it takes a mem-only pod; else -1
    core_cards: frozenset[tuple[int, int]]  # (free GiB, free %) of cards with room, if it takes core+mem
    room_free: int  # free GiB on its cards with room, in all (an over-committed card adds none)
    # Everything ``judge`` reads of the node for a pod not on it yet: nodes of one shape hold the
    # same pods, so a review judges each shape once.
    shape: Shape


class Shape:
    """A node's shape as a key, its hash worked out once (a tuple of tuples hashes them all anew
    on every look-up)."""

    __slots__ = ("_hash", "key")

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and self._hash == other._hash and self.key == other.key


def summarise(profile: NodeProfile, names: Names, order: int) -> NodeSummary:
    cards = profile.cards.cards
    limit = profile.pod_limit
    room = [c for c in cards if limit is None or len(c.pods) < limit]
    best = max((c.free_mem for c in room), default=-1) if profile.takes_mem_only else -1
    core = frozenset((c.free_mem, 100 - c.used_core) for c in room) if profile.takes_core_mem else frozenset()
    most_free: dict[int, int] = {}
    for c in cards:
        most_free[c.total_mem] = max(most_free.get(c.total_mem, c.free_mem), c.free_mem)
    shape = Shape((profile.mode, profile.cards.placement, limit, profile.static_cpu, bool(profile.mem_only),
                   bool(profile.core_mem), tuple((c.total_mem, c.used_mem, c.used_core, len(c.pods)) for c in cards)))
    return NodeSummary(profile, profile.mode, order, frozenset(c.total_mem for c in cards), len(cards),
                       frozenset(most_free.items()), frozenset((c.free_mem, c.free_core) for c in cards),
                       best, core, sum(max(c.free_mem, 0) for c in room), shape)  # over-committed: none


def _drop(index: dict[Any, set[str]], key: Any, name: str) -> None:
    names = index.get(key)
    if names is not None:
        names.discard(name)
        if not names:
            del index[key]


class _Best:
    """Per key of a map of node sets, the node that ranks highest, kept as nodes come and go: found
    again from the set (once) only after the best one left."""

    __slots__ = ("_best",)

    def __init__(self) -> None:
        self._best: dict[Any, tuple[Any, str]] = {}

    def added(self, key: Any, rank: Any, name: str, first: bool) -> None:
        best = self._best.get(key)
        if first or (best is not None and rank > best[0]):  # an unknown best stays unknown until asked
            self._best[key] = (rank, name)

    def removed(self, key: Any, name: str) -> None:
        best = self._best.get(key)
        if best is not None and best[1] == name:
            del self._best[key]

    def get(self, key: Any, holders: set[str], rank: Callable[[str], Any], budget: WorkBudget) -> str:
        best = self._best.get(key)
        if best is None:
            budget.charge(len(holders))
            name = max(holders, key=rank)
            best = self._best[key] = (rank(name), name)
        return best[1]


@dataclass(slots=True)
class GroupMaps:
    """What GC001 asks of a group's nodes, as maps of node names by what the question asks."""

    sizes: dict[int, set[str]] = field(default_factory=dict)  # card size -> nodes with such a card
    counts: dict[int, set[str]] = field(default_factory=dict)  # number of cards -> nodes
    free_cards: dict[tuple[int, int], set[str]] = field(default_factory=dict)  # (size, free) -> nodes
    free_both: dict[tuple[int, int], set[str]] = field(default_factory=dict)  # (free GiB, free %) -> nodes
    mem_only: dict[int, set[str]] = field(default_factory=dict)  # best free card with room -> nodes
    core_cards: dict[tuple[int, int], set[str]] = field(default_factory=dict)  # (free GiB, free %) -> nodes
    shapes: dict[Shape, set[str]] = field(default_factory=dict)
    # GC001 names the last node by name with the largest card, and the first node in the nodes'
    # order with the card closest to fitting.
    last_by_size: _Best = field(default_factory=_Best)
    last_by_count: _Best = field(default_factory=_Best)
    first_by_free: _Best = field(default_factory=_Best)
    first_by_both: _Best = field(default_factory=_Best)

    def add(self, node: NodeSummary) -> None:
        # Inline set-defaults: every node of a group is added once when its maps are built.
        name = node.profile.name
        for size in node.sizes:
            holders = self.sizes.setdefault(size, set())
            self.last_by_size.added(size, name, name, not holders)
            holders.add(name)
        holders = self.counts.setdefault(node.count, set())
        self.last_by_count.added(node.count, name, name, not holders)
        holders.add(name)
        for key in node.free_cards:
            holders = self.free_cards.setdefault(key, set())
            self.first_by_free.added(key, -node.order, name, not holders)
            holders.add(name)
        for key in node.free_both:
            holders = self.free_both.setdefault(key, set())
            self.first_by_both.added(key, -node.order, name, not holders)
            holders.add(name)
        if node.best_mem_only >= 0:
            self.mem_only.setdefault(node.best_mem_only, set()).add(name)
        for key in node.core_cards:
            self.core_cards.setdefault(key, set()).add(name)
        self.shapes.setdefault(node.shape, set()).add(name)

    def remove(self, node: NodeSummary) -> None:
        name = node.profile.name
        for size in node.sizes:
            _drop(self.sizes, size, name)
            self.last_by_size.removed(size, name)
        _drop(self.counts, node.count, name)
        self.last_by_count.removed(node.count, name)
        for key in node.free_cards:
            _drop(self.free_cards, key, name)
            self.first_by_free.removed(key, name)
        for key in node.free_both:
            _drop(self.free_both, key, name)
            self.first_by_both.removed(key, name)
        if node.best_mem_only >= 0:
            _drop(self.mem_only, node.best_mem_only, name)
        for key in node.core_cards:
            _drop(self.core_cards, key, name)
        _drop(self.shapes, node.shape, name)


class Group:
    """Nodes alike for a selector: one mode, the same values of the labels it reads (and one
    name, when it names nodes). Its maps are built the first time a selector matches it, then
    kept up to date: a grouping by a label every node has its own value of (hostnames, names)
    has a group per node, and a selector picks a few of them."""

    __slots__ = ("maps", "members", "mode")

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.members: set[str] = set()
        self.maps: GroupMaps | None = None

    def add(self, node: NodeSummary) -> None:
        self.members.add(node.profile.name)
        if self.maps is not None:
            self.maps.add(node)

    def remove(self, node: NodeSummary) -> None:
        self.members.discard(node.profile.name)
        if self.maps is not None:
            self.maps.remove(node)

    def built(self, nodes: dict[str, NodeSummary], budget: WorkBudget) -> GroupMaps:
        """Its maps, built from its members' summaries the first time they are asked for."""
        if self.maps is None:
            budget.charge(NODE * len(self.members))
            maps = GroupMaps()
            for name in self.members:
                maps.add(nodes[name])
            self.maps = maps
        return self.maps


class Projection:
    """The nodes grouped for selectors that read ``keys`` (and names, with ``by_name``)."""

    def __init__(self, keys: frozenset[str], by_name: bool) -> None:
        self.keys = tuple(sorted(keys))
        self.by_name = by_name
        self._keys = (*self.keys, NAME) if by_name else self.keys  # what groups are indexed by
        self.groups: dict[tuple[Any, ...], Group] = {}
        self._of: dict[str, tuple[Any, ...]] = {}  # node -> its group's key
        # label key -> value -> the groups with it (a group hashes by identity, not by its key, which
        # is as long as the key set): an ``In`` (or a nodeSelector entry) finds the groups it may
        # match by its values, not by reading every group (hostnames, node pools).
        self._by_value: dict[str, dict[str | None, set[Group]]] = {k: {} for k in self._keys}

    def add(self, node: NodeSummary, budget: WorkBudget | None = None) -> None:
        if budget is not None:
            budget.charge(NODE + len(self.keys))
        values = tuple(map(node.profile.node.labels.get, self.keys))
        name = node.profile.name if self.by_name else ""
        key = (node.mode, values, name)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(node.mode)
            for label, value in zip(self._keys, (*values, name) if self.by_name else values, strict=True):
                self._by_value[label].setdefault(value, set()).add(group)
        group.add(node)
        self._of[node.profile.name] = key

    def remove(self, node: NodeSummary) -> None:
        key = self._of.pop(node.profile.name, None)
        if key is None:
            return
        group = self.groups[key]
        group.remove(node)
        if not group.members:
            del self.groups[key]
            for label, value in zip(self._keys, (*key[1], key[2]) if self.by_name else key[1], strict=True):
                held = self._by_value[label][value]
                held.discard(group)
                if not held:
                    del self._by_value[label][value]

    def matching(self, selector: NodeSelector, budget: WorkBudget) -> Iterable[Group]:
        """The groups whose nodes the selector may run the pod on (``NodeSelector.mismatch`` is
        None), worked out in sets: a requirement is held against each distinct value of its key
        (an ``In`` looks its values up), a term intersects its requirements, the terms unite."""
        if selector.empty:
            return self.groups.values()
        base: set[Group] | None = None
        for key, wanted in selector.labels:  # nodeSelector: every entry, and then a term
            budget.charge(1)
            held = self._by_value[key].get(wanted, set())
            base = held if base is None else base & held
        found: set[Group] = set()  # a new set: the index's own are never handed out
        if selector.terms is None and base is not None:
            found |= base
        for term in selector.terms or ():
            if not term.labels and not term.fields:
                continue  # an empty term matches no node
            matched = base
            checks = [(r.key, r) for r in term.labels] + [(NAME, r) for r in term.fields]
            for key, requirement in checks:
                if matched is not None and not matched:
                    break
                held = self._holding(key, requirement, budget)
                matched = held if matched is None else matched & held
            found |= matched or set()
        budget.charge(len(found))
        return found

    def _holding(self, key: str, requirement: Requirement, budget: WorkBudget) -> set[Group]:
        """The groups whose value of ``key`` meets ``requirement``."""
        by_value = self._by_value[key]
        if requirement.operator == "In":
            budget.charge(len(requirement.values))
            held = [by_value[v] for v in requirement.values if v in by_value]
        else:
            budget.charge(len(by_value))
            if requirement.operator == "NotIn":
                excluded = frozenset(requirement.values)
                held = [groups for v, groups in by_value.items() if v is None or v not in excluded]
            else:  # Exists, DoesNotExist, Gt, Lt: no list to search
                held = [groups for v, groups in by_value.items() if requirement.matches(v)]
        budget.charge(sum(len(groups) for groups in held))
        return set().union(*held)
