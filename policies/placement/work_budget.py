"""What one review may spend on GC001's question: units of work, counted as they are done, and the
words for a pod past the cap (``capacity.max_work``; docs/operations.md, "What one review may cost")."""

from __future__ import annotations

from policies.model.selectors import NodeSelector
from policies.placement.placement import PodDemand

# A unit of work is about one look-up in a dict or set (~0.1 µs here); these cost more each:
GROUP = 10  # a group of nodes asked about (its maps read, in Python)
NODE = 5  # a node added to a grouping being built (its labels read apart)
PLACING = 10  # a container placed on a card by ``judge``


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
