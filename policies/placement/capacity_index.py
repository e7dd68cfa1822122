"""GC001's question at any scale, at a bounded cost: an index of the nodes kept up to date per
node change, and a count of the work each review may do.

A plain walk (``judge_capacity``, tests/capacity_reference.py) answers "could any node that may take this pod
hold it, ever, and now?" by walking every node: its selector against every node, every card for the
largest, a placement per node until one fits. At 5,000 nodes that is milliseconds per review
whenever the cluster changed since the last one (a busy cluster changes every second), and a pod
can make it seconds: a thousand affinity terms no node matches cost terms x nodes, hundreds of
containers cost containers x cards per node.

Here the nodes are grouped by their mode and by the values of the labels the pod's selector
reads (``Projection``; a selector that names nodes by ``metadata.name`` groups by name), and
each group keeps, per node change, what the question needs: the card sizes it has, the free
memory of its cards, the best free card of the nodes that take a mem-only pod, the free (memory,
compute) of the cards of nodes that take a core+mem pod. The selector is matched once per group,
"does any node hold it now" is a lookup for a one-container pod (and a short search for several
containers, each candidate confirmed by ``placement.judge``), and the verdicts and their words
are ``judge_capacity``'s (tests/test_capacity_index.py compares the two on generated clusters).

Every review's work is counted (``WorkBudget``) as it is done: a group or node looked at, a
requirement matched, a label read, a card compared, a container placed on a card. Past the
cap (``capacity.max_work``) the question is not answered: GC001 says the pod is too costly to
evaluate. The cap is far above any real pod (docs/operations.md, "What one review may cost").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from policies.model.cluster import ClusterState
from policies.model.selectors import NodeSelector, Requirement
from policies.model.settings import Names
from policies.placement.capacity import (
    NO_CARDS_SHOWN,
    NO_MATCHING_NODE,
    CapacityVerdict,
    CardAt,
    larger_than_every_card,
    modes_for,
    no_core_mem_node,
    no_node_of_its_mode,
    not_now_text,
    spread_over_more_cards_than_any_node,
)
from policies.placement.cards import Card
from policies.placement.placement import NodeProfile, PodDemand, judge, node_profile

# A unit of work is about one look-up in a dict or set (~0.1 µs here); these cost more each:
GROUP = 10  # a group of nodes asked about (its maps read, in Python)
NODE = 5  # a node added to a grouping being built (its labels read apart)
PLACING = 10  # a container placed on a card by ``judge``
NAME = "\0metadata.name"  # the pseudo-label ``matchFields`` reads: a node's name


class TooCostly(Exception):
    """The review's work passed the cap before its question was answered."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"more than {cap} units of work")
        self.cap = cap


class WorkBudget:
    """Units of work one review may spend; ``spent`` is what it has."""

    __slots__ = ("cap", "spent")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.spent = 0

    def charge(self, units: int) -> None:
        self.spent += units
        if self.spent > self.cap:
            raise TooCostly(self.cap)


def too_costly(label: str, selector: NodeSelector, demand: PodDemand, cap: int) -> str:
    """GC001's words for a pod past the cap: what it asked, the cap, and what to simplify."""
    terms = selector.terms or ()
    requirements = len(selector.labels) + sum(len(t.labels) + len(t.fields) for t in terms)
    return (f"{label} is too costly to evaluate: whether some node can hold its {len(demand.gpus)} GPU "
            f"container(s) under its node constraints ({len(terms)} required node affinity terms, {requirements} "
            f"requirements in all) took more than capacity.max_work={cap} units of work; accepted: fewer affinity "
            f"terms and GPU containers (real pods have a few of each, and take a few hundred units)")


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


class CapacityIndex:
    """GC001's verdicts from an index of one cluster state's nodes, refreshed per node change.

    Safe to share between threads: one lock covers a refresh and the question asked after it."""

    MAX_PROJECTIONS = 16  # key sets kept (a cluster's pods use a few); the oldest is dropped first
    MAX_VERDICTS = 1024

    def __init__(self, names: Names) -> None:
        self.names = names
        self._lock = threading.Lock()
        self._state: ClusterState | None = None
        self._seen = -1
        self._nodes: dict[str, NodeSummary] = {}
        self._next_order = 0
        self._modes: dict[str, int] = {}  # nodes per mode label
        self._projections: dict[tuple[frozenset[str], bool], Projection] = {}
        # Verdicts while the state does not change, by what a pod asks: the pods of one workload
        # ask the same, and a quiet cluster's reviews then cost a look-up.
        self._verdicts: dict[tuple[Any, ...], CapacityVerdict] = {}

    # -- keeping up with the state

    def refresh(self, state: ClusterState) -> None:
        """Bring the index up to date: only the nodes that changed, when the state keeps a change
        log (``generation`` and ``changes_since``, as ClusterSnapshot does); all, otherwise."""
        generation = getattr(state, "generation", None)
        changes_since = getattr(state, "changes_since", None)
        if generation is not None and state is self._state and generation == self._seen:
            return
        self._verdicts = {}
        changed = changes_since(self._seen) if changes_since is not None and state is self._state else None
        if changed is None:
            self._rebuild(state)
        else:
            for name in set(changed):
                node = state.get_node(name)
                self._replace(name, None if node is None else node_profile(node, state.pods_on_node(name),
                                                                           self.names))
        self._state, self._seen = state, generation if generation is not None else -1

    def _rebuild(self, state: ClusterState) -> None:
        self._nodes, self._modes, self._projections, self._next_order = {}, {}, {}, 0
        for node in state.nodes():
            self._replace(node.name, node_profile(node, state.pods_on_node(node.name), self.names))

    def _replace(self, name: str, profile: NodeProfile | None) -> None:
        old = self._nodes.pop(name, None)
        if old is not None:
            self._modes[old.mode] -= 1
            for projection in self._projections.values():
                projection.remove(old)
        if profile is None:
            return
        order = old.order if old is not None else self._next_order
        self._next_order += old is None
        new = self._nodes[name] = summarise(profile, self.names, order)
        self._modes[new.mode] = self._modes.get(new.mode, 0) + 1
        for projection in self._projections.values():
            projection.add(new)

    def warm(self, state: ClusterState) -> None:
        """Build the index (and the grouping of pods without node constraints) now, not in the
        first review: at 5,000 nodes that is a second."""
        with self._lock:
            self.refresh(state)
            budget = WorkBudget(2 * NODE * (len(self._nodes) + 1))
            for group in self._projection(NodeSelector(), budget).groups.values():
                group.built(self._nodes, budget)

    def _projection(self, selector: NodeSelector, budget: WorkBudget) -> Projection:
        key = selector_keys(selector)
        projection = self._projections.pop(key, None)
        if projection is None:
            projection = Projection(*key)
            for node in self._nodes.values():  # built once per key set, then kept up to date
                projection.add(node, budget)
            if len(self._projections) >= self.MAX_PROJECTIONS:
                del self._projections[next(iter(self._projections))]
        self._projections[key] = projection  # the most recently used last
        return projection

    # -- the question

    def verdict(self, state: ClusterState, demand: PodDemand, selector: NodeSelector,
                budget: WorkBudget) -> CapacityVerdict:
        """``judge_capacity``'s verdict for the state's nodes; TooCostly past the budget."""
        if not demand.gpus:
            return CapacityVerdict()
        with self._lock:
            self.refresh(state)
            # The pod's own key only matters to a pod already on a node, which GC001's (a pod at
            # CREATE) never is: pods of one workload share the verdict.
            key = (demand.gpus, demand.whole_gpus, demand.topology_gpus, demand.refused, selector)
            found = self._verdicts.get(key)
            if found is None:
                found = self._verdict(replace(demand, key=""), selector, budget)
                if len(self._verdicts) < self.MAX_VERDICTS:
                    self._verdicts[key] = found
            return found

    def _verdict(self, demand: PodDemand, selector: NodeSelector, budget: WorkBudget) -> CapacityVerdict:
        names = self.names
        if demand.is_core_mem and not self._modes.get("core_mem"):
            return no_core_mem_node(names)
        matching = list(self._projection(selector, budget).matching(selector, budget))
        if not matching:
            return NO_MATCHING_NODE
        modes = modes_for(demand)
        budget.charge(GROUP * len(matching))
        groups = [g.built(self._nodes, budget) for g in matching if g.mode in modes]
        if not groups:
            return no_node_of_its_mode(demand, selector)
        largest = self._largest(groups, budget)
        if largest is None:
            return NO_CARDS_SHOWN
        never = larger_than_every_card(demand, largest, names)
        if never is None:
            most, cards = self._most_cards(groups, budget)
            never = spread_over_more_cards_than_any_node(demand, most, cards, names)
        if never is not None:
            return never
        judged: set[Shape] = set()  # shapes that do not hold it
        for name in self._candidates(groups, demand, budget):
            node = self._nodes[name]
            if node.shape in judged:
                continue
            # A container placed on a card: about ten times a look-up, in time.
            budget.charge(PLACING * sum(g.cards for g in demand.gpus) * max(1, len(node.profile.cards.cards)))
            if judge(demand, node.profile, names).fits:
                return CapacityVerdict()
            judged.add(node.shape)
        return CapacityVerdict(not_now=self._not_now(groups, demand, budget))

    def _not_now(self, groups: Sequence[GroupMaps], demand: PodDemand, budget: WorkBudget) -> str:
        """``capacity.not_now_text`` from the index: the card with the most compute free among those
        with the memory, else the card closest to fitting, each the first the walk meets."""
        need = max(demand.gpus, key=lambda g: g.mem_per_card).mem_per_card
        roomy = None
        if max(g.core_per_card for g in demand.gpus):
            roomy = self._first_card(groups, "free_both", "first_by_both", lambda c: (c.free_mem, c.free_core),
                                     lambda key: key[0] >= need, budget)
        closest = None if roomy is not None else self._first_card(
            groups, "free_cards", "first_by_free", lambda c: (c.total_mem, c.free_mem), lambda key: key[0] >= need,
            budget)
        return not_now_text(demand, roomy, closest, self.names)

    def _first_card(self, groups: Sequence[GroupMaps], table: str, first_by: str,
                    card_key: Callable[[Card], tuple[int, int]], keep: Callable[[tuple[int, int]], bool],
                    budget: WorkBudget) -> tuple[str, Card] | None:
        """Of the cards whose key (``card_key``: the group map ``table``'s keys) ``keep`` keeps, the
        first in the nodes' and the cards' order with the highest second part of the key."""
        keys = [(group, key) for group in groups for key in getattr(group, table) if keep(key)]
        budget.charge(sum(len(getattr(group, table)) for group in groups))
        if not keys:
            return None
        top = max(key[1] for _, key in keys)
        first = min((getattr(group, first_by).get(key, getattr(group, table)[key], self._rank, budget)
                     for group, key in keys if key[1] == top), key=lambda name: self._nodes[name].order)
        card = next(c for c in self._nodes[first].profile.cards.cards
                    if keep(card_key(c)) and card_key(c)[1] == top)
        return first, card

    def _largest(self, groups: Sequence[GroupMaps], budget: WorkBudget) -> CardAt | None:
        """The largest card of the groups' nodes (ties: the last node by name, its first such card)."""
        size = max((max(g.sizes) for g in groups if g.sizes), default=None)
        if size is None:
            return None
        node = max(g.last_by_size.get(size, g.sizes[size], str, budget) for g in groups if size in g.sizes)
        card = next(c for c in self._nodes[node].profile.cards.cards if c.total_mem == size)
        return CardAt(node, card.index, size)

    def _candidates(self, groups: Sequence[GroupMaps], demand: PodDemand, budget: WorkBudget) -> Iterator[str]:
        """Nodes that may hold the pod now, for ``judge`` to confirm. For a one-container pod the
        maps answer exactly what its placement asks (a card with room and the memory, and for
        core+mem the compute, free), so the first node named holds it. For several containers,
        one node of each shape with a card for the largest and the memory of all free on cards
        with room (what ``judge`` then works out is the same for every node of a shape)."""
        mem = max(g.mem_per_card for g in demand.gpus)
        core_mem = demand.is_core_mem
        if len(demand.gpus) == 1 and demand.gpus[0].cards == 1:
            core = demand.gpus[0].core
            for group in groups:
                if core_mem:
                    budget.charge(len(group.core_cards))
                    held = [names for (free, compute), names in group.core_cards.items()
                            if free >= mem and compute >= core]
                else:
                    budget.charge(len(group.mem_only))
                    held = [names for free, names in group.mem_only.items() if free >= mem]
                for names in held:
                    budget.charge(1)
                    yield next(iter(names))  # any of them holds it
            return
        # What placing puts on cards: a spread container N/M (rounded down) on each of its M cards.
        total = sum(g.mem_per_card * g.cards for g in demand.gpus)
        for group in groups:
            budget.charge(len(group.shapes))
            for names in group.shapes.values():
                name = next(iter(names))
                node = self._nodes[name]
                large = (any(free >= mem for free, _ in node.core_cards) if core_mem
                         else node.best_mem_only >= mem)
                if large and node.room_free >= total:
                    yield name

    def _most_cards(self, groups: Sequence[GroupMaps], budget: WorkBudget) -> tuple[str, int]:
        """The node with the most cards of the groups' (ties: the last by name), and its count."""
        count = max(max(g.counts) for g in groups if g.counts)
        budget.charge(len(groups))
        node = max(g.last_by_count.get(count, g.counts[count], str, budget) for g in groups if count in g.counts)
        return node, count

    def _rank(self, name: str) -> int:
        return -self._nodes[name].order


# One index per configuration (the names it reads), by identity (hashing them costs more).
_INDEXES: dict[int, tuple[Names, CapacityIndex]] = {}
_INDEXES_LOCK = threading.Lock()


def capacity_index(names: Names) -> CapacityIndex:
    found = _INDEXES.get(id(names))
    if found is not None and found[0] is names:
        return found[1]
    with _INDEXES_LOCK:
        if len(_INDEXES) >= 8:
            _INDEXES.clear()
        index = CapacityIndex(names)
        _INDEXES[id(names)] = (names, index)
        return index
