"""GC001's question at any scale, at a bounded cost: an index of the nodes kept up to date per
node change, and a count of the work each review may do.

A plain walk (``judge_capacity``, tests/support/capacity_reference.py) answers "could any node that may take this pod
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
are ``judge_capacity``'s (tests/domain/test_capacity_index.py compares the two on generated clusters).

Every review's work is counted (``WorkBudget``) as it is done: a group or node looked at, a
requirement matched, a label read, a card compared, a container placed on a card. Past the
cap (``capacity.max_work``) the question is not answered: GC001 says the pod is too costly to
evaluate. The cap is far above any real pod (docs/operations.md, "What one review may cost").

The groups and their maps are in ``node_groups``, the work count in ``work_budget``; here is the
index over them and the question it answers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from policies.model.cluster import ClusterState
from policies.model.selectors import NodeSelector
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
from policies.placement.node_groups import GroupMaps, NodeSummary, Projection, Shape, selector_keys, summarise
from policies.placement.placement import NodeProfile, PodDemand, judge, node_profile
from policies.placement.work_budget import GROUP, NODE, PLACING, WorkBudget


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
