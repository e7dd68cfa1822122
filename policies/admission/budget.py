"""What one object may make the rules judge: at most ``budget.max_templates`` pod templates,
``budget.max_containers`` containers and ``budget.max_affinity_terms`` affinity terms.

The rules' work grows with these counts (every rule walks every template and container; GC001
and the placement checks compare affinity terms with nodes), not with the body's bytes: 4 MiB of
Volcano Job holds 5,000 templates, 4 MiB of Pod 7,000 containers. The engine counts them before
any rule runs, with ``len`` where a list says its size and stopping at the first count over its
limit, so counting costs no more than the limits allow. An object over its budget is not judged:
it is denied, or admitted unjudged where ``budget.when_exceeded`` is ``admit``; either way the
answer says what was counted, the limit and what would be accepted (docs/operations.md, "What one
review may cost").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.model.resources import CONTAINER_GROUPS, POD_SPEC_PATHS, ShapeError, pod_spec
from policies.model.settings import BudgetSettings
from policies.model.workload_sites import pod_locations
from policies.model.workloads import WorkloadKind

BUDGET_ID = "budget"  # the finding's id in answers and audit annotations (no rule: the engine's own limit)
_GROUPS = ("initContainers", "containers", "ephemeralContainers")
_NODE_TERMS = ("requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution")
_POD_AFFINITIES = ("podAffinity", "podAntiAffinity")


@dataclass(frozen=True, slots=True)
class Overrun:
    """The first count found over its limit, with the counts so far (counting stopped there)."""

    what: str  # "pod templates", "containers", "affinity terms"
    setting: str  # budget.max_templates ...
    limit: int
    templates: int
    containers: int
    affinity_terms: int


class _Counter:
    def __init__(self, limits: BudgetSettings) -> None:
        self.limits = limits
        self.templates = self.containers = self.terms = 0

    def over(self) -> Overrun | None:
        limits = self.limits
        for what, setting, count, limit in (
                ("pod templates", "max_templates", self.templates, limits.max_templates),
                ("containers", "max_containers", self.containers, limits.max_containers),
                ("affinity terms", "max_affinity_terms", self.terms, limits.max_affinity_terms)):
            if count > limit:
                return Overrun(what, f"budget.{setting}", limit, self.templates, self.containers, self.terms)
        return None

    def add_pod(self, spec: dict[str, Any] | None, containers: int) -> Overrun | None:
        self.templates += 1
        self.containers += containers
        if isinstance(spec, dict):
            self.terms += affinity_terms(spec, self.limits.max_affinity_terms - self.terms + 1)
        return self.over()


def affinity_terms(spec: dict[str, Any], stop_after: int) -> int:
    """Node affinity requirements (at least one per term, required or preferred) and pod
    (anti-)affinity terms of a pod spec; counting stops once past ``stop_after``."""
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict):
        return 0
    count = 0
    node = affinity.get("nodeAffinity")
    if isinstance(node, dict):
        required = node.get(_NODE_TERMS[0])
        terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
        preferred = node.get(_NODE_TERMS[1])
        for listed, wrapped in ((terms, False), (preferred, True)):
            if not isinstance(listed, list):
                continue
            for term in listed:
                if wrapped:
                    term = term.get("preference") if isinstance(term, dict) else None
                count += _requirements(term)
                if count > stop_after:
                    return count
    for name in _POD_AFFINITIES:
        pods = affinity.get(name)
        if isinstance(pods, dict):
            for key in _NODE_TERMS:
                listed = pods.get(key)
                count += len(listed) if isinstance(listed, list) else 0
    return count


def _requirements(term: Any) -> int:
    if not isinstance(term, dict):
        return 1
    found = sum(len(term[k]) for k in ("matchExpressions", "matchFields") if isinstance(term.get(k), list))
    return max(found, 1)


def overrun(kind: str, obj: dict[str, Any], workload: WorkloadKind | None, limits: BudgetSettings) -> Overrun | None:
    """The first budget ``obj`` exceeds, or None. Kinds without pods (a Node, a Binding) have none.
    ShapeError, as the rules' reading raises it, where the containers counted are not objects."""
    counter = _Counter(limits)
    if workload is not None:
        for spec, containers in pod_locations(workload, obj):
            found = counter.add_pod(spec, containers)
            if found is not None:
                return found
        return None
    if kind not in POD_SPEC_PATHS:
        return None
    spec, path = pod_spec(obj, kind)  # a ShapeError where the object has no pod spec's shape (a 400)
    if spec is None:
        return None
    containers = 0
    for group in _GROUPS:
        items = spec.get(group)
        if not isinstance(items, list):
            continue  # absent; anything else is the rules' to refuse (a 400)
        if group in CONTAINER_GROUPS:  # as the rules read them: a malformed list is bad input, not a big one
            for index, item in enumerate(items[: limits.max_containers + 1]):
                if not isinstance(item, dict):
                    raise ShapeError((*path, group, index), f"must be an object, got {type(item).__name__}")
        containers += len(items)
    return counter.add_pod(spec, containers)


def describe(overrun_: Overrun, label: str, limits: BudgetSettings) -> tuple[str, str]:
    """The finding's message and its brief form (a warning of at most 256 characters)."""
    found = overrun_
    counted = (f"counted before stopping: {_count(found.templates, 'pod template')}, "
               f"{_count(found.containers, 'container')}, {_count(found.affinity_terms, 'affinity term')}")
    accepted = (f"accepted: at most {limits.max_templates} pod templates, {limits.max_containers} containers and "
                f"{limits.max_affinity_terms} affinity terms in one object (real workloads have a few of each), "
                f"or a larger {found.setting} in the webhook's configuration")
    outcome = ("admitted without evaluation (budget.when_exceeded: admit)" if limits.when_exceeded == "admit"
               else "denied (budget.when_exceeded: deny)")
    head = f"{BUDGET_ID}: {label} is too large to evaluate: more than {found.limit} {found.what} ({found.setting})"
    return f"{head} ({counted}); {accepted}; {outcome}", f"{head}; {outcome}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
