"""GB001-GB005: a pod placed on a node, by a ``pods/binding`` CREATE or a Pod created with
``spec.nodeName``. The pod of a Binding comes from the cluster state; the node and the pods
already on it always do. One ``placement_problems`` call (shared with scoring) feeds all five.
Placement itself is imported when a placement is first judged: ``gpushare check`` on manifests
without ``spec.nodeName`` never loads it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from policies.model.resources import Path
from policies.model.settings import ResourceNames
from policies.model.subject import StateUnavailable, Subject
from policies.rules.base import Check, Found, rule
from policies.rules.relevance import Relevance

if TYPE_CHECKING:
    from policies.model.cluster import PodInfo
    from policies.placement.placement import PodDemand

PLACEMENT = "placement"

PLACED_KINDS = ("Binding", "Pod")
# A pod asking for any GPU resource, created with spec.nodeName (every binding is sent).
PLACED_GPU_PODS = Relevance(placed_resources=ResourceNames.asked_fields())
SWITCH = "placement"


@functools.cache
def _machinery() -> SimpleNamespace:
    """Placement and the cluster's records, imported when a placement is first judged (an import
    statement in the functions below would look them up again on every review)."""
    from policies.model.cluster_manifests import pod_from_manifest
    from policies.placement.placement import PodDemand, demand_from_containers, placement_problems

    return SimpleNamespace(pod_from_manifest=pod_from_manifest, PodDemand=PodDemand,
                           demand_from_containers=demand_from_containers, placement_problems=placement_problems)


@dataclass(frozen=True, slots=True)
class Placement:
    """A pod going to a node, as the subject tells it."""

    namespace: str
    pod_name: str
    node: str
    path: Path

    @property
    def pod_key(self) -> str:
        return f"{self.namespace}/{self.pod_name}"


def placement_of(subject: Subject) -> Placement | None:
    """The pod and node of a Binding CREATE, or of a Pod created with spec.nodeName; else None
    (worked out once per subject: the engine, the rule family test and the check all ask)."""
    if "placement_of" not in subject.memo:
        subject.memo["placement_of"] = _find_placement(subject)
    return cast("Placement | None", subject.memo["placement_of"])


def _find_placement(subject: Subject) -> Placement | None:
    if subject.operation != "CREATE":
        return None
    if subject.kind == "Binding":
        target: Any = subject.obj.get("target")
        if not isinstance(target, dict) or target.get("kind", "Node") != "Node":
            return None
        node, path = target.get("name"), ("target", "name")
    elif subject.kind == "Pod":
        spec = subject.obj.get("spec")
        node, path = (spec.get("nodeName") if isinstance(spec, dict) else None), ("spec", "nodeName")
    else:
        return None
    name = subject.metadata.get("name")
    if not isinstance(node, str) or not node or not isinstance(name, str) or not name:
        return None
    return Placement(subject.namespace or "default", name, node, path)


def is_placement(subject: Subject) -> bool:
    """Whether the subject places a pod on a node (what GB001-GB005 judge)."""
    return placement_of(subject) is not None


def _demand(subject: Subject, where: Placement, pod: PodInfo | None) -> PodDemand:
    machinery = _machinery()
    demand: PodDemand
    if pod is not None:
        demand = machinery.PodDemand(pod.key, pod.gpus, pod.exclusive_gpus, pod.topology_gpus)
    else:
        demand = machinery.demand_from_containers(where.pod_key, subject.containers, subject.names, subject.pod_labels)
    return demand


def _needs_check(demand: PodDemand) -> bool:
    return demand.uses_shared or demand.whole_gpus > 0 or demand.topology_gpus > 0


def placed_pod(subject: Subject) -> PodInfo | None:
    """The pod record this placement adds to its node (what the assume-cache keeps), if it uses GPUs."""
    where = placement_of(subject)
    if where is None:
        return None
    if subject.kind == "Binding":
        pod = subject.state.get_pod(where.namespace, where.pod_name) if subject.state is not None else None
    else:
        pod = replace(_machinery().pod_from_manifest(subject.obj, subject.names, with_env=False),
                      namespace=where.namespace)
    if pod is None or not pod.uses_gpu:
        return None
    return replace(pod, node_name=where.node)


@dataclass(frozen=True, slots=True)
class Checked:
    where: Placement
    demand: PodDemand
    problems: list[tuple[str, str]]
    notes: list[tuple[str, str]]  # warnings that do not refuse the placement


def _problems(subject: Subject) -> Checked | None:
    """The placement check, computed once per subject; None when there is nothing to check."""
    if "placement" in subject.memo:
        return cast("Checked | None", subject.memo["placement"])
    found = None
    where = placement_of(subject)
    if where is not None:
        found = _check(subject, where)
    subject.memo["placement"] = found
    return found


def _check(subject: Subject, where: Placement) -> Checked | None:
    what = f"{subject.kind} {where.pod_key} to node {where.node}: GPU placement not checked"
    pod: PodInfo | None = None
    if subject.kind == "Binding":
        seen = subject.state
        if seen is not None and seen.get_pod(where.namespace, where.pod_name) is None \
                and seen.has_pod(where.namespace, where.pod_name):
            return None  # a pod without GPUs (resources never change): nothing to place, whoever judges
        state = subject.usable_state(SWITCH, what)
        pod = state.get_pod(where.namespace, where.pod_name)
        if pod is None:
            if state.has_pod(where.namespace, where.pod_name):
                return None  # a pod without GPUs: nothing to place
            raise StateUnavailable(SWITCH, what, f"pod {where.pod_key} is not in the cluster state yet")
    demand = _demand(subject, where, pod)
    if not _needs_check(demand):
        return None
    state = subject.usable_state(SWITCH, what)
    node = state.get_node(where.node)
    if node is None:
        raise StateUnavailable(SWITCH, what, f"node {where.node} is not in the cluster state")
    result = _machinery().placement_problems(demand, node, state.pods_on_node(where.node), subject.names)
    return Checked(where, demand, result.problems, result.notes)


def _accepted(rule_id: str, demand_text: str) -> str:
    hints = {
        "GB001": "bind it to a node that runs only pods of its own type, or none",
        "GB002": "bind it to a node whose mode takes it",
        "GB003": "bind it to a node with a card below the pod limit",
        "GB004": f"bind it to a node with a card that fits {demand_text}",
        "GB005": "bind it to a node with CPU manager policy none",
    }
    return hints[rule_id]


def _demand_text(subject: Subject, demand: PodDemand) -> str:
    r = subject.names.resources
    parts = [f'container "{g.container}" {r.gpu_mem}={g.mem}' + (f" {r.gpu_core}={g.core}" if g.core else "")
             + (f" over {g.cards} cards" if g.cards > 1 else "") for g in demand.gpus]
    if demand.topology_gpus:
        parts.append(f"{r.gpu_topology}={demand.topology_gpus}")
    if demand.whole_gpus:
        parts.append(f"{r.gpu_exclusive}={demand.whole_gpus}")
    return ", ".join(parts)


def placement_rule(rule_id: str, *, seed: str, title: str, doc: str) -> Callable[[Check], Check]:
    """Register a GB rule: denies, judges Binding and Pod CREATEs that place a pod, needs state."""
    return rule(rule_id, severity="deny", seed=seed, kinds=PLACED_KINDS, operations=("CREATE",), stateful=True,
                applies=is_placement, title=title, doc=doc, family=PLACEMENT, relevance=PLACED_GPU_PODS)


def _report(subject: Subject, rule_id: str) -> Iterator[Found]:
    found = _problems(subject)
    if found is None:
        return
    where = found.where
    for found_rule, message in found.problems:
        if found_rule == rule_id:
            demand = _demand_text(subject, found.demand)
            # The message names the node already.
            yield Found(f"{subject.kind} {where.pod_key} ({demand}): {message}; {_accepted(rule_id, demand)}",
                        where.path)
    for found_rule, message in found.notes:
        if found_rule == rule_id:
            yield Found(f"{subject.kind} {where.pod_key}: {message}; label the node to say so", where.path,
                        advisory=True)


@placement_rule("GB001", seed="000",
                title="No mem-only and core+mem pods on one node",
                doc="cGPU cannot run pods that request only GPU memory beside pods that request memory and "
                    "compute on one node; bindings this webhook admitted but the watch has not shown count too.")
def no_job_type_mixing_on_node(subject: Subject) -> Iterator[Found]:
    return _report(subject, "GB001")


@placement_rule("GB002", seed="003",
                title="The node's mode takes the pod",
                doc="core+mem pods only on core_mem nodes; shared-GPU pods only on shared-mode nodes; "
                    "topology nodes take only topology workloads.")
def node_mode_takes_pod(subject: Subject) -> Iterator[Found]:
    return _report(subject, "GB002")


@placement_rule("GB003", seed="002",
                title="At most 20 pods per GPU card on cgpu, core_mem and mps nodes",
                doc="cGPU cannot create more than 20 instances on one card; the 21st pod fails to start.")
def pods_per_card_limit(subject: Subject) -> Iterator[Found]:
    return _report(subject, "GB003")


@placement_rule("GB004", seed="000, 003",
                title="GPU memory and compute fit a card",
                doc="Every container's gpu-mem (and gpu-core.percentage) must fit on one card of the node.")
def fits_a_card(subject: Subject) -> Iterator[Found]:
    return _report(subject, "GB004")


@placement_rule("GB005", seed="001, 002",
                title="No shared-GPU pod on a node with the static CPU policy",
                doc="Shared GPU scheduling does not support nodes whose CPU manager policy is static.")
def no_static_cpu_node(subject: Subject) -> Iterator[Found]:
    return _report(subject, "GB005")
