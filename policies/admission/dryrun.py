"""What would happen to an object, without it happening: verdict, patch, and node ranking.

Shared by ``POST /dry-run`` and ``gpushare score``. Each object is judged on its own
against the state as it is: nothing is assumed, cached as bound, or written back.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from policies.admission.engine import Engine, Verdict
from policies.model.cluster import ClusterState
from policies.model.resources import POD_SPEC_PATHS, WORKLOAD_KINDS, Path, render_path
from policies.model.settings import PolicySettings, Severity
from policies.model.subject import Subject, SubjectPod
from policies.model.workloads import TEMPLATE, group_of
from policies.rules.base import REGISTRY, Finding
from policies.rules.rule_index import rule_ids
from policies.scoring.scoring import NO_STATE, NodeScore, PodRequest, Scorer, pod_request

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
    # For a custom workload: the same, per pod template (a PyTorchJob's Master and Worker...).
    pod_previews: list[PodPreview] = field(default_factory=list)


APPLIED_TO_EACH_POD = "applied to each pod at creation"
APPLIED_TO_OPERATOR_PODS = "applied to each pod its operator creates from this template"
# Pod spec fields a custom workload's pod location carries besides its containers (a KServe component
# inlines a PodSpec among its own fields; an Argo template has them at its level): what the preview's
# pod keeps of it, so that the mutations see the scheduler and the placement the pods get.
POD_FIELDS = ("schedulerName", "nodeSelector", "affinity", "tolerations", "priorityClassName", "nodeName")
# corev1.Container's fields: a KServe model-format container inlines one beside fields of its own
# (storageUri, modelFormat...), which the pod's container does not have.
CONTAINER_FIELDS = frozenset((
    "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources", "resizePolicy",
    "restartPolicy", "restartPolicyRules", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe",
    "startupProbe", "lifecycle", "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy",
    "securityContext", "stdin", "stdinOnce", "tty"))


@dataclass
class PodPreview:
    """A workload's mutations target its pods, not the workload: the pod the template creates,
    the patch the webhook applies to each such pod at creation, and the template as it would be."""

    pod: dict[str, Any]
    patch: list[Any]
    patch_ids: list[str]
    mutated_pod: dict[str, Any]
    mutated_template: dict[str, Any] | None  # None where the location holds no pod template
    applied: str = APPLIED_TO_EACH_POD
    path: str = ""  # a custom workload's: the template's path, e.g. spec.pytorchReplicaSpecs.Worker.template


def template_pod(kind: str, obj: dict[str, Any], namespace: str) -> tuple[dict[str, Any], Path] | None:
    """The Pod a workload's template creates (as its controller sends it) and the template's path."""
    path = POD_SPEC_PATHS[kind][:-1]
    template: Any = obj
    for part in path:
        template = template.get(part) if isinstance(template, dict) else None
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return None
    meta: dict[str, Any] = template["metadata"] if isinstance(template.get("metadata"), dict) else {}
    # The controller that creates the pods: a Deployment's are a ReplicaSet's, a CronJob's a Job's.
    direct = {"Deployment": ("apps/v1", "ReplicaSet"), "CronJob": ("batch/v1", "Job")}
    api_version, owner_kind = direct.get(kind, (str(obj.get("apiVersion", "")), kind))
    return _pod(obj, meta, template["spec"], namespace, api_version, owner_kind), path


def _pod(obj: dict[str, Any], meta: dict[str, Any], spec: dict[str, Any], namespace: str, api_version: str,
         owner_kind: str) -> dict[str, Any]:
    owner = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
    pod_meta = {**copy.deepcopy(meta), "namespace": namespace}
    pod_meta.pop("name", None)
    pod_meta["generateName"] = f"{owner or owner_kind.lower()}-"
    pod_meta["ownerReferences"] = [{"apiVersion": api_version, "kind": owner_kind, "name": str(owner or ""),
                                    "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": copy.deepcopy(spec)}


def operator_pod(subject: Subject, pod: SubjectPod, namespace: str) -> dict[str, Any] | None:
    """The Pod a custom workload's operator creates from one pod location (None where the location is
    not a whole pod: a sidecar's options, TrainJob's resources per node). A pod template is the pod's;
    elsewhere the pod is made of the location's containers and pod fields (a KServe component, an Argo
    template)."""
    site = pod.site
    if site is None or site.location.shape.spec is None:
        return None
    meta = site.meta if site.meta is not None else {}
    if site.location.shape is TEMPLATE:
        spec = site.spec if site.spec is not None else {}
    else:
        meta = {k: meta[k] for k in ("labels", "annotations") if isinstance(meta.get(k), dict)}
        spec = {k: site.spec[k] for k in POD_FIELDS if site.spec is not None and k in site.spec}
        for container in site.containers:
            fields = {k: v for k, v in container.container.items() if k in CONTAINER_FIELDS}
            spec.setdefault(container.group, []).append({**fields, "name": container.name})
    return _pod(subject.obj, meta, spec, namespace, str(subject.obj.get("apiVersion", "")), subject.kind)


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
        if engine.handles(kind, group_of(obj)):
            verdict.findings = engine.validate(subject).findings
            planned = engine.mutate(subject)
            verdict.patch, verdict.patch_ids = planned.patch, planned.patch_ids
            if verdict.patch:
                report.mutated = jsonpatch.apply_patch(copy.deepcopy(obj), verdict.patch)
            if subject.workload is not None:
                report.pod_previews = self._operator_pods(subject, subject.namespace or namespace, state)
            elif kind in WORKLOAD_KINDS:
                report.pod_preview = self._pod_preview(kind, report.mutated, subject.namespace or namespace, state)
        if kind not in POD_SPEC_PATHS or subject.workload is not None:
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
        template: Any = obj
        for part in path:
            template = template[part]
        return self._preview(pod, namespace, state, template)

    def _operator_pods(self, subject: Subject, namespace: str, state: ClusterState | None) -> list[PodPreview]:
        previews = []
        for pod in subject.pods:
            made = operator_pod(subject, pod, namespace)
            if made is None or pod.site is None:
                continue
            template = None
            if pod.site.location.shape is TEMPLATE:  # the template as written
                template = {k: v for k, v in (("metadata", pod.site.meta), ("spec", pod.site.spec)) if v is not None}
            preview = self._preview(made, namespace, state, template)
            preview.applied, preview.path = APPLIED_TO_OPERATOR_PODS, render_path(pod.site.path)
            previews.append(preview)
        return previews

    def _preview(self, pod: dict[str, Any], namespace: str, state: ClusterState | None,
                 template: dict[str, Any] | None) -> PodPreview:
        """The mutating webhook on one pod, and the template as it would be with that pod's spec."""
        planned = self.engine.mutate(self.engine.subject("Pod", pod, namespace=namespace, state=state))
        mutated_pod = jsonpatch.apply_patch(copy.deepcopy(pod), planned.patch) if planned.patch else pod
        mutated_template = None if template is None else {**copy.deepcopy(template),
                                                          "spec": copy.deepcopy(mutated_pod["spec"])}
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
