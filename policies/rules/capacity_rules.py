"""GC001: a pod (or workload template) that no card of the cluster can hold, at CREATE.

It needs the cluster's state, so its machinery (the capacity index, placement) is imported when it
first runs: ``gpushare check`` without ``--snapshot`` never loads it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from types import SimpleNamespace
from typing import TYPE_CHECKING

from policies.model.selectors import node_selector_from_spec
from policies.model.settings import CapacitySettings
from policies.model.subject import Subject
from policies.rules.base import Found, rule
from policies.rules.placement_rules import placement_of
from policies.rules.pod_resources import POD_KINDS
from policies.rules.relevance import Relevance

if TYPE_CHECKING:
    from policies.model.cluster import ClusterState

SWITCH = "capacity"


@functools.cache
def _machinery() -> SimpleNamespace:
    """The capacity index and placement, imported on GC001's first run (an import statement in the
    rule would look them up again on every review)."""
    from policies.placement.capacity_index import capacity_index
    from policies.placement.placement import demand_from_containers
    from policies.placement.work_budget import TooCostly, WorkBudget, too_costly

    return SimpleNamespace(TooCostly=TooCostly, WorkBudget=WorkBudget, capacity_index=capacity_index,
                           too_costly=too_costly, demand_from_containers=demand_from_containers)


def asks_gpu_memory(subject: Subject) -> bool:
    """A pod or template asking for gpu-mem (the only demand GC001 judges)."""
    return subject.names.resources.gpu_mem in subject.asked


@rule("GC001", severity="warn", seed="000, 003", kinds=POD_KINDS, operations=("CREATE",), stateful=True,
      applies=asks_gpu_memory, relevance=Relevance(resources=("gpu_mem",)),
      title="Some node of the cluster can hold the pod",
      doc="A container's gpu-mem must fit on one card of a node that could take the pod (its mode, "
          "its card-model selectors); core+mem pods need a core_mem node. A pod no such card can ever "
          "hold gets this rule's severity (warn by default: a node pool that scales from zero may bring "
          "bigger cards; set deny to refuse it); one that fits no card now gets a warning naming the "
          "closest card. A pod whose check would cost more than capacity.max_work (thousands of affinity "
          "terms or GPU containers) is too costly to evaluate, with this rule's severity.")
def some_node_can_hold_it(subject: Subject) -> Iterator[Found]:
    if placement_of(subject) is not None:
        return  # a pod pinned by spec.nodeName skips the scheduler: GB004 judges its node
    machinery = _machinery()

    state: ClusterState | None = None
    # One budget for the review, whatever number of pod templates it holds (capacity_index).
    cap = subject.settings.capacity.max_work if subject.settings is not None else CapacitySettings().max_work
    budget = machinery.WorkBudget(cap)
    for pod in subject.pods:
        demand = machinery.demand_from_containers(pod.label, pod.containers, subject.names, pod.labels)
        if not demand.gpus:
            continue
        if state is None:
            state = subject.usable_state(SWITCH, f"{subject.label}: whether any node can hold it")
        # The cluster as the watch shows it (an admission view adds assumed bindings on top, which an
        # advisory "not now" can do without), in an index kept up to date per node change; the work
        # is counted, and past the cap the pod is not judged but called too costly (capacity_index).
        selector = node_selector_from_spec(pod.spec, pod.spec_path)
        try:
            index = machinery.capacity_index(subject.names)
            verdict = index.verdict(getattr(state, "base", state), demand, selector, budget)
        except machinery.TooCostly:
            yield Found(machinery.too_costly(pod.label, selector, demand, cap), pod.spec_path)
            return
        if verdict.never:
            decided = f"{pod.label} cannot run on any node the cluster has: {verdict.never}"
            yield Found(f"{decided}; accepted: {verdict.accepted}", pod.spec_path, brief=decided)
        elif verdict.not_now:
            yield Found(f"{pod.label} cannot be scheduled now: {verdict.not_now}", pod.spec_path, advisory=True)
