"""What would happen to an object, without it happening: verdict, patch, and node ranking.

Shared by ``POST /dry-run`` and ``gpushare score``. Each object is judged on its own
against the state as it is: nothing is assumed, cached as bound, or written back.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from .cluster import ClusterState
from .engine import Engine, Verdict
from .resources import POD_SPEC_PATHS, WORKLOAD_KINDS, Path
from .rule_index import rule_ids
from .rules.base import REGISTRY, Finding
from .scoring import NO_STATE, NodeScore, PodRequest, Scorer, pod_request
from .settings import PolicySettings, Severity

FITTING_NODES_SHOWN = 3


@dataclass
class ObjectReport:
    """The verdict (rule findings, placement findings on a judged node, and the patch) and the ranking."""

    verdict: Verdict
    mutated: dict[str, Any] = field(default_factory=dict)
    request: PodRequest | None = None
    ranking: list[NodeScore] | None = None
    judged_node: str = ""  # the node the placement was judged on (?node= or spec.nodeName)
    # For a workload: the pod its template creates, and what the mutating webhook does to each one.
    pod_preview: PodPreview | None = None


APPLIED_TO_EACH_POD = "applied to each pod at creation"


@dataclass
class PodPreview:
    """A workload's mutations target its pods, not the workload: the pod the template creates,
    the patch the webhook applies to each such pod at creation, and the template as it would be."""

    pod: dict[str, Any]
    patch: list[Any]
    patch_ids: list[str]
    mutated_pod: dict[str, Any]
    mutated_template: dict[str, Any]
    applied: str = APPLIED_TO_EACH_POD


def template_pod(kind: str, obj: dict[str, Any], namespace: str) -> tuple[dict[str, Any], Path] | None:
    """The Pod a workload's template creates (as its controller sends it) and the template's path."""
    path = POD_SPEC_PATHS[kind][:-1]
    template: Any = obj
    for part in path:
        template = template.get(part) if isinstance(template, dict) else None
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return None
    meta: dict[str, Any] = template["metadata"] if isinstance(template.get("metadata"), dict) else {}
    owner = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
    pod_meta = {**copy.deepcopy(meta), "namespace": namespace}
    pod_meta.pop("name", None)
    pod_meta["generateName"] = f"{owner or kind.lower()}-"
    # The controller that creates the pods: a Deployment's are a ReplicaSet's, a CronJob's a Job's.
    direct = {"Deployment": ("apps/v1", "ReplicaSet"), "CronJob": ("batch/v1", "Job")}
    api_version, owner_kind = direct.get(kind, (str(obj.get("apiVersion", "")), kind))
    pod_meta["ownerReferences"] = [{"apiVersion": api_version, "kind": owner_kind, "name": str(owner or ""),
                                    "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": copy.deepcopy(template["spec"])}, path


def placement_severity(settings: PolicySettings, rule_id: str) -> Severity | None:
    """How a placement problem counts on a judged node: the rule's configured severity; None if disabled."""
    if rule_id == NO_STATE:
        return "warn"
    override = settings.rules.get(rule_id)
    if override is not None and not override.enabled:
        return None
    if override is not None and override.severity:
        return override.severity
    registered = REGISTRY.get(rule_id)
    return registered.severity if registered is not None else "deny"


class DryRun:
    """Validate, mutate and rank objects with one engine and one scorer."""

    def __init__(self, engine: Engine, scorer: Scorer) -> None:
        self.engine = engine
        self.scorer = scorer
        self.names = engine.names

    def report(self, kind: str, obj: dict[str, Any], state: ClusterState | None, *, namespace: str = "default",
               node: str = "") -> ObjectReport:
        """The report for one object; ShapeError when the object is malformed."""
        engine = self.engine
        subject = engine.subject(kind, obj, namespace=namespace, state=state)
        verdict = Verdict(kind, subject.name, subject.namespace)
        report = ObjectReport(verdict, mutated=obj)
        if engine.handles(kind):
            verdict.findings = engine.validate(subject).findings
            planned = engine.mutate(subject)
            verdict.patch, verdict.patch_ids = planned.patch, planned.patch_ids
            if verdict.patch:
                report.mutated = jsonpatch.apply_patch(copy.deepcopy(obj), verdict.patch)
            if kind in WORKLOAD_KINDS:
                report.pod_preview = self._pod_preview(kind, report.mutated, subject.namespace or namespace, state)
        if kind not in POD_SPEC_PATHS:
            return report
        request = pod_request(kind, report.mutated, self.names, key=f"{subject.namespace}/{subject.name}",
                              containers=subject.containers)
        report.request = request
        if state is None:
            return report
        report.ranking = self.scorer.rank(request, state)
        report.judged_node = node or request.pinned_node
        if report.judged_node:
            # A pod pinned by spec.nodeName is judged by the engine's placement rules (GB001-GB005)
            # already, as the webhook judges it; add only what they did not report.
            if state.get_node(report.judged_node) is None:
                # The GB rules could only say "not checked: node not in the state"; the dry run's
                # own warning says so and names the nodes that fit.
                verdict.findings = [f for f in verdict.findings if f.rule not in rule_ids("placement")]
            reported = {f.rule for f in verdict.findings}
            verdict.findings += [f for f in self._placement_findings(report, subject.label) if f.rule not in reported]
        return report

    def _pod_preview(self, kind: str, obj: dict[str, Any], namespace: str,
                     state: ClusterState | None) -> PodPreview | None:
        made = template_pod(kind, obj, namespace)
        if made is None:
            return None
        pod, path = made
        planned = self.engine.mutate(self.engine.subject("Pod", pod, namespace=namespace, state=state))
        mutated_pod = jsonpatch.apply_patch(copy.deepcopy(pod), planned.patch) if planned.patch else pod
        template: Any = obj
        for part in path:
            template = template[part]
        mutated_template = {**copy.deepcopy(template), "spec": copy.deepcopy(mutated_pod["spec"])}
        return PodPreview(pod, planned.patch, planned.patch_ids, mutated_pod, mutated_template)

    def _placement_findings(self, report: ObjectReport, label: str) -> list[Finding]:
        assert report.ranking is not None
        verdict = next((s for s in report.ranking if s.node == report.judged_node), None)
        if verdict is None:
            verdict = NodeScore(report.judged_node, False, problems=[
                (NO_STATE, f"node {report.judged_node} is not in the cluster state; its placement is not judged")])
        if verdict.fits:
            return []
        fitting = [s.node for s in report.ranking if s.fits][:FITTING_NODES_SHOWN]
        accepted = (f"; nodes that fit: {', '.join(fitting)}" if fitting else "; no node in the state fits")
        findings = []
        for rule, message in verdict.problems:
            severity = placement_severity(self.engine.settings, rule)
            if severity is None:
                continue
            hint = accepted if rule != NO_STATE else ""
            path = (*POD_SPEC_PATHS[report.verdict.kind], "nodeName")
            findings.append(Finding(rule, severity, f"{rule}: {label}: {message}{hint}", path))
        return findings
