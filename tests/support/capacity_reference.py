"""The reference GC001's index is compared with: a plain walk over every node, the obvious way.

policies/placement/capacity_index.py answers "could any node that may take this pod hold it, and
does one hold it now?" from maps it keeps up to date; this walk answers the same question by
looking at each node in turn, with the same words (policies/placement/capacity.py), and
tests/domain/test_capacity_index.py checks that the two agree on generated clusters. It serves only as
that test's reference, so it lives here, not in the webhook.
"""

from __future__ import annotations

from collections.abc import Sequence

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
from policies.placement.placement import NodeProfile, PodDemand, judge


def judge_capacity(demand: PodDemand, selector: NodeSelector, profiles: Sequence[NodeProfile],
                   names: Names) -> CapacityVerdict:
    """What the cluster's nodes say about ``demand`` (only shared-GPU demands are judged).

    ``profiles`` are the nodes with what their pods hold, as the scoring engine keeps them up to
    date (built once per node change, not once per review). A node's mode is its label, else what
    it advertises (cards.node_mode), as the placement rules judge it."""
    if not demand.gpus:
        return CapacityVerdict()
    if demand.is_core_mem and not any(p.mode == "core_mem" for p in profiles):
        return no_core_mem_node(names)
    matching = [p for p in profiles if selector.empty or selector.mismatch(p.node.labels, p.node.name) is None]
    if not matching:
        return NO_MATCHING_NODE
    candidates = [p for p in matching if p.mode in modes_for(demand)]
    if not candidates:
        return no_node_of_its_mode(demand, selector)
    largest = max((CardAt(p.name, c.index, c.total_mem) for p in candidates for c in p.cards.cards),
                  key=lambda c: (c.total_mem, c.node), default=None)
    if largest is None:
        return NO_CARDS_SHOWN
    most = max(candidates, key=lambda p: (len(p.cards.cards), p.name))
    never = (larger_than_every_card(demand, largest, names)
             or spread_over_more_cards_than_any_node(demand, most.name, len(most.cards.cards), names))
    if never is not None:
        return never
    for profile in candidates:
        if judge(demand, profile, names).fits:
            return CapacityVerdict()
    return CapacityVerdict(not_now=_not_now(demand, candidates, names))


def _not_now(demand: PodDemand, candidates: Sequence[NodeProfile], names: Names) -> str:
    """Why no node holds the pod right now, naming what does not fit: memory, or compute when some
    card has the memory (a core+mem pod's compute is as scarce as its memory)."""
    need = max(demand.gpus, key=lambda g: g.mem_per_card).mem_per_card
    cards = [(p.name, c) for p in candidates for c in p.cards.cards]
    roomy = [(node, c) for node, c in cards if c.free_mem >= need]
    most_compute = max(roomy, key=lambda nc: nc[1].free_core) if roomy else None  # the first, on ties
    if most_compute is not None and max(g.core_per_card for g in demand.gpus):
        return not_now_text(demand, most_compute, None, names)
    closest = max(((node, c) for node, c in cards if c.total_mem >= need),
                  key=lambda nc: nc[1].free_mem, default=None)  # the first, on ties
    return not_now_text(demand, None, closest, names)
