"""What is wrong in the cluster right now: every node and GPU pod of a state, judged.

Two kinds of findings:

- the admission rules, on the objects as the state records them: nodes rebuilt from their
  records (what the node rules read is all there), pods rebuilt from their GPU requests.
  Pods repeat a few shapes thousands of times, so each distinct shape is judged once;
- the invariants GA001-GA007 (``rules/cluster_invariants.py``), which only a running cluster
  can break: over-committed or crowded cards, mixed job types, pods on nodes whose mode does
  not take them, card indices past the node's cards, pods never assigned, another scheduler.

Pure: the state, the settings and the time go in, findings come out. The CLI, the server's
periodic audit and the dashboard all call ``audit_state``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from policies.admission.engine import Engine
from policies.model.cluster import ClusterState, NodeInfo, PodGPU, PodInfo
from policies.model.isolation_findings import env_manifest
from policies.model.resources import ShapeError
from policies.model.settings import Names, PolicySettings, Severity
from policies.model.workloads import WorkloadConfigError
from policies.placement.cards import (
    CARD_LIMITED_MODES,
    CORE_PER_CARD,
    MAX_PODS_PER_CARD,
    NodeCards,
    node_cards,
    recorded_cards,
)
from policies.placement.placement import UNRESOLVABLE_RULES, PodDemand, mode_problems, node_profile
from policies.rules.base import REGISTRY, Finding

SHOWN = 3  # pods named in one message before "and N more"
# Rules reported once per running pod (policies/model/isolation.py: every env entry is one finding at admission).
ONE_PER_POD = frozenset({"GS010", "GS011"})
_PLACEHOLDER_NS, _PLACEHOLDER_NAME = "gpushare-audit-ns", "gpushare-audit-pod"


@dataclass(frozen=True, slots=True)
class AuditFinding:
    """One finding on one object of the cluster."""

    rule: str
    severity: Severity
    message: str
    kind: str  # Node, Pod, or a custom workload's kind (PyTorchJob...)
    name: str
    namespace: str = ""  # "" for nodes
    node: str = ""  # the node the finding concerns (a pod's node)
    exempted: bool = False
    exemption_reason: str = ""
    api_version: str = "v1"  # a custom workload's own

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


@dataclass
class AuditResult:
    findings: list[AuditFinding] = field(default_factory=list)
    nodes: int = 0
    pods: int = 0
    workloads: int = 0  # custom workloads judged (training jobs, Ray clusters...)
    unjudged: list[str] = field(default_factory=list)  # custom workloads that could not be judged, and why

    @property
    def active(self) -> list[AuditFinding]:
        return [f for f in self.findings if not f.exempted]

    def counts(self) -> Counter[tuple[str, str]]:
        """(rule, severity) -> findings, exempted ones left out: what /metrics exposes."""
        return Counter((f.rule, f.severity) for f in self.active)

    def by_node(self) -> dict[str, list[AuditFinding]]:
        out: dict[str, list[AuditFinding]] = {}
        for f in self.active:
            if f.node:
                out.setdefault(f.node, []).append(f)
        return out


def _shown(keys: Sequence[str]) -> str:
    return ", ".join(keys[:SHOWN]) + (f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else "")


class Auditor:
    """Judges states with one engine; keeps the per-shape pod verdicts between runs."""

    def __init__(self, settings: PolicySettings, engine: Engine | None = None) -> None:
        self.settings = settings
        self.names = settings.names
        self.engine = engine or Engine(settings)
        self._shapes: dict[tuple[Any, ...], tuple[list[Finding], list[Finding], str]] = {}

    # -- configured severities ------------------------------------------------------------
    def _severity(self, rule_id: str) -> Severity | None:
        override = self.settings.rules.get(rule_id)
        if override is not None and not override.enabled:
            return None
        if override is not None and override.severity:
            return override.severity
        return REGISTRY[rule_id].severity

    def _add(self, out: list[AuditFinding], rule_id: str, message: str, kind: str, name: str,
             namespace: str = "", node: str = "") -> None:
        severity = self._severity(rule_id)
        if severity is not None:
            out.append(AuditFinding(rule_id, severity, f"{rule_id}: {message}", kind, name, namespace, node))

    # -- the run ----------------------------------------------------------------------------
    def audit(self, state: ClusterState, now: float, workloads: Iterable[dict[str, Any]] = ()) -> AuditResult:
        """Every finding on every node and GPU pod of ``state``, and on the custom workloads given (a
        PyTorchJob's templates, judged as at admission); ``now`` is Unix time (GA006)."""
        result = AuditResult()
        for obj in workloads:
            result.workloads += 1
            self._workload_rules(obj, state, result.findings, result.unjudged)
        out = result.findings
        nodes = state.nodes()
        result.nodes = len(nodes)
        known = set()
        for node in nodes:
            known.add(node.name)
            pods = state.pods_on_node(node.name)
            self._node_rules(node, state, out)
            self._node_invariants(node, pods, out, now)
            for pod in pods:
                result.pods += 1
                self._pod_rules(pod, out)
        pods_of = getattr(state, "pods", None)
        if callable(pods_of):  # pods not bound, or bound to nodes the state does not hold
            for pod in pods_of():
                if pod.node_name in known:
                    continue
                result.pods += 1
                self._pod_rules(pod, out)
                self._scheduler(pod, out)
        return result

    # -- admission rules on the recorded objects --------------------------------------------
    def _node_rules(self, node: NodeInfo, state: ClusterState, out: list[AuditFinding]) -> None:
        subject = self.engine.subject("Node", node_manifest(node), state=state)
        verdict = self.engine.validate(subject)
        for f in verdict.findings:
            out.append(AuditFinding(f.rule, f.severity, f.message, "Node", node.name, "", node.name))
        for f in verdict.exempted:
            out.append(AuditFinding(f.rule, f.severity, f.message, "Node", node.name, "", node.name,
                                    True, verdict.exemption_reason))

    def _pod_rules(self, pod: PodInfo, out: list[AuditFinding]) -> None:
        if not (pod.gpus or pod.init_gpus or pod.env) or pod.terminated:
            return
        exempt = self.names.exempt_annotation, self.names.exempt_reason_annotation
        # Whether an exemption annotation is honoured depends on the pod's namespace
        # (exemptions.annotation_namespaces, the namespace's label): a pod carrying one is judged in
        # its own namespace; the others in a placeholder one, so that a shape is judged once.
        namespace = pod.namespace if exempt[0] in pod.annotations else _PLACEHOLDER_NS
        shape = (pod.gpus, pod.init_gpus, pod.env, pod.annotations.get(exempt[0]), pod.annotations.get(exempt[1]),
                 namespace)
        judged = self._shapes.get(shape)
        if judged is None:
            manifest = pod_manifest(pod, self.names, exempt)
            manifest["metadata"]["namespace"] = namespace
            verdict = self.engine.validate(self.engine.subject("Pod", manifest, namespace=namespace))
            judged = self._shapes[shape] = (one_per_pod(verdict.findings), one_per_pod(verdict.exempted),
                                            verdict.exemption_reason)
        findings, exempted, reason = judged
        if not findings and not exempted:
            return
        placeholder, label = f"Pod {namespace}/{_PLACEHOLDER_NAME}", f"Pod {pod.key}"
        for f in findings:
            out.append(AuditFinding(f.rule, f.severity, f.message.replace(placeholder, label), "Pod",
                                    pod.name, pod.namespace, pod.node_name))
        for f in exempted:
            out.append(AuditFinding(f.rule, f.severity, f.message.replace(placeholder, label), "Pod",
                                    pod.name, pod.namespace, pod.node_name, True, reason))

    def _workload_rules(self, obj: dict[str, Any], state: ClusterState, out: list[AuditFinding],
                        unjudged: list[str]) -> None:
        kind = str(obj.get("kind", ""))
        subject = self.engine.subject(kind, obj, state=state)
        try:
            verdict = self.engine.validate(subject)
        except (ShapeError, WorkloadConfigError) as exc:  # said, not fatal: the others are still judged
            unjudged.append(f"{subject.label} could not be judged: {exc}")
            return
        api_version = str(obj.get("apiVersion", ""))
        for f in verdict.findings:
            out.append(AuditFinding(f.rule, f.severity, f.message, kind, subject.name, subject.namespace,
                                    api_version=api_version))
        for f in verdict.exempted:
            out.append(AuditFinding(f.rule, f.severity, f.message, kind, subject.name, subject.namespace,
                                    exempted=True, exemption_reason=verdict.exemption_reason,
                                    api_version=api_version))

    # -- invariants -------------------------------------------------------------------------
    def _node_invariants(self, node: NodeInfo, pods: list[PodInfo], out: list[AuditFinding], now: float) -> None:
        live = [p for p in pods if not p.terminated and p.uses_gpu]
        if not live:
            return
        names = self.names
        on_card: dict[int, list[str]] = {}

        def charged(card: int, key: str, gib: int) -> None:
            holders = on_card.setdefault(card, [])
            if key not in holders:
                holders.append(key)

        occupancy = node_cards(node, pods, names, on_charge=charged)
        self._cards(node, occupancy, on_card, out)
        profile = node_profile(node, pods, names)
        if profile.mem_only and profile.core_mem:
            self._add(out, "GA003", f"node {node.name} runs mem-only pods ({_shown(profile.mem_only)}) and "
                                    f"core+mem pods ({_shown(profile.core_mem)}) together; move one kind to "
                                    f"another node", "Node", node.name, node=node.name)
        count = len(occupancy.cards)
        for pod in live:
            demand = PodDemand(pod.key, pod.gpus, pod.exclusive_gpus, pod.topology_gpus)
            for rule_id, message in mode_problems(demand, profile, names):
                if rule_id in UNRESOLVABLE_RULES:
                    self._add(out, "GA004", f"Pod {pod.key} runs on node {node.name}, but {message}",
                              "Pod", pod.name, pod.namespace, node.name)
            if pod.gpus:
                for gpu, cards in zip(pod.gpus, recorded_cards(pod, names), strict=True):
                    past = sorted(i for i in (cards or {}) if i >= count)
                    if past:
                        self._add(out, "GA005", f'Pod {pod.key} container "{gpu.container}" is recorded on GPU'
                                                f'{past[0]}, but node {node.name} has {count} card'
                                                f'{"" if count == 1 else "s"} (GPU0..GPU{max(count - 1, 0)})',
                                  "Pod", pod.name, pod.namespace, node.name)
                self._unassigned(pod, out, now)
                self._scheduler(pod, out)

    def _cards(self, node: NodeInfo, occupancy: NodeCards, on_card: dict[int, list[str]],
               out: list[AuditFinding]) -> None:
        limited = occupancy.mode in CARD_LIMITED_MODES
        for card in occupancy.cards:
            holders = on_card.get(card.index, [])
            if card.used_mem > card.total_mem:
                unit = occupancy.unit
                self._add(out, "GA001", f"node {node.name} GPU{card.index}: {card.used_mem} {unit} of gpu-mem "
                                        f"assigned on a {card.total_mem} {unit} card ({_shown(holders)})",
                          "Node", node.name, node=node.name)
            if occupancy.mode == "core_mem" and card.used_core > CORE_PER_CARD:
                self._add(out, "GA001", f"node {node.name} GPU{card.index}: {card.used_core}% compute assigned "
                                        f"on one card, at most {CORE_PER_CARD}% ({_shown(holders)})",
                          "Node", node.name, node=node.name)
            if limited and len(card.pods) > MAX_PODS_PER_CARD:
                self._add(out, "GA002", f"node {node.name} GPU{card.index}: {len(card.pods)} pods on one card, "
                                        f"the cGPU limit is {MAX_PODS_PER_CARD}", "Node", node.name, node=node.name)

    def _unassigned(self, pod: PodInfo, out: list[AuditFinding], now: float) -> None:
        for assigned_key, time_key in self.names.assignment.pairs:
            assigned = pod.annotations.get(assigned_key)
            if assigned is None:
                continue
            if assigned.strip().lower() != "false":
                return
            stamp = pod.annotations.get(time_key, "")
            if not stamp.isdigit():
                return
            age = now - int(stamp) / 1e9  # Unix nanoseconds, as the scheduler writes it
            bound = self.settings.audit.unassigned_after_seconds
            if age > bound:
                self._add(out, "GA006", f"Pod {pod.key} on node {pod.node_name} is still {assigned_key}=false "
                                        f"{age:.0f}s after its {time_key} (bound {bound:.0f}s): the device plugin "
                                        f"has not assigned its card", "Pod", pod.name, pod.namespace, pod.node_name)
            return

    def _scheduler(self, pod: PodInfo, out: list[AuditFinding]) -> None:
        expected = self.settings.audit.expected_scheduler
        if not expected or not pod.gpus or pod.terminated:
            return
        actual = pod.scheduler_name or self.names.default_scheduler
        if actual != expected:
            where = f"on node {pod.node_name}" if pod.node_name else "not bound yet"
            self._add(out, "GA007", f"Pod {pod.key} ({where}) asks for {self.names.resources.gpu_mem} and has "
                                    f"schedulerName {actual}; GPU pods are scheduled by {expected} "
                                    f"(audit.expected_scheduler)", "Pod", pod.name, pod.namespace, pod.node_name)


def audit_state(state: ClusterState, settings: PolicySettings, now: float, engine: Engine | None = None,
                workloads: Iterable[dict[str, Any]] = ()) -> AuditResult:
    """One audit of ``state`` and of the custom workloads given (see ``Auditor``)."""
    return Auditor(settings, engine).audit(state, now, workloads)


def node_manifest(node: NodeInfo) -> dict[str, Any]:
    """A Node object holding everything the record keeps (what the node rules read)."""
    status: dict[str, Any] = {
        "allocatable": {k: str(v) for k, v in node.allocatable.items()},
        "capacity": {k: str(v) for k, v in node.capacity.items()},
        "nodeInfo": {"kubeletVersion": node.kubelet_version, "containerRuntimeVersion": node.container_runtime,
                     "osImage": node.os_image},
    }
    if node.internal_ip:
        status["addresses"] = [{"type": "InternalIP", "address": node.internal_ip}]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": dict(node.labels), "annotations": dict(node.annotations)},
            "spec": {"providerID": node.provider_id} if node.provider_id else {}, "status": status}


def one_per_pod(findings: list[Finding]) -> list[Finding]:
    """One finding per pod for a rule of ``ONE_PER_POD``: the first, saying how many more there are
    (the variables a pod sets are one thing to fix; a report of every entry would crowd the others out)."""
    counted = Counter(f.rule for f in findings if f.rule in ONE_PER_POD)
    if all(n == 1 for n in counted.values()):
        return findings
    out, seen = [], set()
    for f in findings:
        if counted.get(f.rule, 1) == 1:
            out.append(f)
        elif f.rule not in seen:
            seen.add(f.rule)
            out.append(replace(f, message=f"{f.message} (and {counted[f.rule] - 1} more in this pod)"))
    return out


def pod_manifest(pod: PodInfo, names: Names, exempt: Iterable[str]) -> dict[str, Any]:
    """A placeholder-named Pod with the record's GPU requests (as limits), its multi-GPU label, what it
    sets in the variables the device plugin and cGPU own, and its exemption."""
    r = names.resources

    def container(gpu: PodGPU) -> dict[str, Any]:
        limits = {r.gpu_mem: str(gpu.mem)}
        if gpu.core:
            limits[r.gpu_core] = str(gpu.core)
        return {"name": gpu.container, "resources": {"limits": limits}}

    annotations = {k: pod.annotations[k] for k in exempt if k in pod.annotations}
    groups = {"containers": [container(g) for g in pod.gpus], "initContainers": [container(g) for g in pod.init_gpus]}
    if pod.env is not None:  # a container that sets judged names is rebuilt from its record, GPUs and all
        for group, built in env_manifest(pod.env).items():
            names_set = {c["name"] for c in built}
            groups[group] = [c for c in groups.get(group, []) if c["name"] not in names_set] + built
    spec: dict[str, Any] = {"containers": groups["containers"] or [{"name": "main"}]}
    for group in ("initContainers", "ephemeralContainers"):
        if groups.get(group):
            spec[group] = groups[group]
    if pod.env is not None and pod.env.mode is not None:
        spec["nodeSelector"] = {names.labels.schedule: pod.env.mode}
    if pod.env is not None and not pod.env.service_links:
        spec["enableServiceLinks"] = False
    metadata: dict[str, Any] = {"name": _PLACEHOLDER_NAME, "namespace": _PLACEHOLDER_NS, "annotations": annotations}
    spread = max((g.cards for g in pod.gpus), default=1)
    if spread > 1:
        metadata["labels"] = {names.labels.pod_gpu_count: str(spread)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
