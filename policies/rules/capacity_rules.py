"""GC001: a pod (or workload template) that no card of the cluster can hold, at CREATE."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from ..capacity import CapacityVerdict, judge_capacity
from ..cluster import ClusterState
from ..placement import NodeProfile, PodDemand, demand_from_containers
from ..relevance import Relevance
from ..scoring import Scorer
from ..selectors import NodeSelector, node_selector_from_spec
from ..settings import Names
from ..subject import Subject
from .base import Found, rule
from .placement_rules import placement_of
from .pod_resources import POD_KINDS

SWITCH = "capacity"


def asks_gpu_memory(subject: Subject) -> bool:
    """A pod or template asking for gpu-mem (the only demand GC001 judges)."""
    return subject.names.resources.gpu_mem in subject.asked


class VerdictCache:
    """GC001's verdicts for one version of the node profiles, by what a pod asks.

    ``judge_capacity`` reads every node, so a cluster of thousands of nodes would cost every review
    milliseconds; the pods of one workload ask the same thing, and the profiles change only when a
    node or its pods do (the scoring engine then builds a new tuple, and the verdicts start
    afresh). The entry is replaced in one assignment, so threads never see verdicts of another
    version of the profiles."""

    MAX_ENTRIES = 1024

    def __init__(self) -> None:
        self._entry: tuple[Sequence[NodeProfile] | None, dict[tuple[object, ...], CapacityVerdict]] = (None, {})

    def verdict(self, demand: PodDemand, selector: NodeSelector, profiles: Sequence[NodeProfile],
                names: Names) -> CapacityVerdict:
        held, verdicts = self._entry
        if held is not profiles:
            verdicts = {}
            self._entry = (profiles, verdicts)
        # The pod's own key only matters to a pod already on a node, which GC001's (a pod at
        # CREATE, named "Pod ns/name") never is: pods of one workload share the verdict.
        key = (demand.gpus, demand.whole_gpus, demand.topology_gpus, demand.refused, selector)
        found = verdicts.get(key)
        if found is None:
            found = judge_capacity(replace(demand, key=""), selector, profiles, names)
            if len(verdicts) < self.MAX_ENTRIES:
                verdicts[key] = found
        return found


# One node-profile cache per configuration (as the scheduler extender keeps one per process) and
# the verdicts over it, by the identity of the configuration's names (hashing them costs more).
_TOOLS: dict[int, tuple[Names, Scorer, VerdictCache]] = {}


def _capacity_tools(names: Names) -> tuple[Scorer, VerdictCache]:
    tools = _TOOLS.get(id(names))
    if tools is None or tools[0] is not names:
        if len(_TOOLS) >= 8:
            _TOOLS.clear()
        tools = _TOOLS[id(names)] = (names, Scorer(names), VerdictCache())
    return tools[1], tools[2]


@rule("GC001", severity="warn", seed="000, 003", kinds=POD_KINDS, operations=("CREATE",), stateful=True,
      applies=asks_gpu_memory, relevance=Relevance(resources=("gpu_mem",)),
      title="Some node of the cluster can hold the pod",
      doc="A container's gpu-mem must fit on one card of a node that could take the pod (its mode, "
          "its card-model selectors); core+mem pods need a core_mem node. A pod no such card can ever "
          "hold gets this rule's severity (warn by default: a node pool that scales from zero may bring "
          "bigger cards; set deny to refuse it); one that fits no card now gets a warning naming the "
          "closest card.")
def some_node_can_hold_it(subject: Subject) -> Iterator[Found]:
    if placement_of(subject) is not None:
        return  # a pod pinned by spec.nodeName skips the scheduler: GB004 judges its node
    state: ClusterState | None = None
    for pod in subject.pods:
        demand = demand_from_containers(pod.label, pod.containers, subject.names)
        if not demand.gpus:
            continue
        if state is None:
            state = subject.usable_state(SWITCH, f"{subject.label}: whether any node can hold it")
        # The cluster as the watch shows it (an admission view adds assumed bindings on top, which an
        # advisory "not now" can do without): its profiles are kept up to date per node change.
        scorer, verdicts = _capacity_tools(subject.names)
        _, profiles = scorer.profiles(getattr(state, "base", state))
        verdict = verdicts.verdict(demand, node_selector_from_spec(pod.spec, pod.spec_path), profiles, subject.names)
        if verdict.never:
            yield Found(f"{pod.label} cannot run on any node the cluster has: {verdict.never}; accepted: a request "
                        f"that fits such a card, or add nodes with bigger cards first", pod.spec_path)
        elif verdict.not_now:
            yield Found(f"{pod.label} cannot be scheduled now: {verdict.not_now}", pod.spec_path, advisory=True)
