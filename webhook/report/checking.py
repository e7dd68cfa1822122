"""``gpushare check`` without the command line: manifests -> the engine -> a Report.

The engine is the one the webhook runs, so a manifest passes here exactly when the
admission webhook would admit it (for the rules that need no cluster state, and with
``--snapshot`` for the stateful ones too).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from policies.admission.engine import Engine, Verdict
from policies.model.grants import NamespaceLabels
from policies.model.resources import POD_SPEC_PATHS, ShapeError, render_path
from policies.model.selectors import node_selector_from_spec
from policies.model.settings import Severity
from policies.model.workloads import WorkloadConfigError, group_of
from policies.rules.base import Finding
from webhook.documents.manifests import Manifest, ManifestError, read_manifest_file
from webhook.documents.sources import STDIN, read_text
from webhook.documents.templates import read_annotations, templated

if TYPE_CHECKING:
    from policies.model.cluster import ClusterState

CLUSTER_SCOPED = frozenset({"Node"})


@dataclass(frozen=True, slots=True)
class Located:
    """A finding with where it is: the file, the offending field's line, the document's line."""

    finding: Finding
    source: str
    line: int
    document_line: int
    object_label: str
    kind: str
    name: str
    namespace: str
    exemption_reason: str = ""

    @property
    def rule(self) -> str:
        return self.finding.rule

    @property
    def severity(self) -> Severity:
        return self.finding.severity

    @property
    def message(self) -> str:
        return self.finding.message

    @property
    def field_path(self) -> str:
        """The offending field as kubectl explains it, e.g. spec.containers[0].resources.limits[...]."""
        return render_path(self.finding.path)


@dataclass(slots=True)
class CheckedObject:
    source: str
    line: int
    label: str
    findings: list[Located]
    exempted: list[Located]


@dataclass(frozen=True, slots=True)
class Problem:
    """Input that could not be judged: unreadable, invalid YAML, or the wrong shape."""

    source: str
    line: int | None
    message: str

    @classmethod
    def of(cls, error: ManifestError) -> Problem:
        return cls(error.source, error.line, error.reason)

    @property
    def text(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.message}"


@dataclass
class Report:
    fail_on: Severity = "deny"
    sources: list[str] = field(default_factory=list)
    objects: list[CheckedObject] = field(default_factory=list)
    skipped: int = 0  # objects of kinds no rule judges (Services, ConfigMaps, ...)
    not_kubernetes: int = 0  # documents that are not Kubernetes objects (compose files, Helm values, ...)
    skipped_kinds: Counter[str] = field(default_factory=Counter)  # by kind (kind.group for custom resources)
    problems: list[Problem] = field(default_factory=list)
    # An audit judges a cluster, not files: where its objects came from, and how many were judged
    # (objects without findings are not listed in ``objects``).
    origin: str = ""
    judged: int | None = None
    # The config file the run read ("" for none), and the cluster-aware rules it could not run.
    config: str = ""
    not_run: tuple[str, ...] = ()

    @property
    def findings(self) -> list[Located]:
        return [f for o in self.objects for f in o.findings]

    @property
    def exempted(self) -> list[Located]:
        return [f for o in self.objects for f in o.exempted]

    def add(self, result: FileResult) -> None:
        self.sources.append(result.source)
        self.objects.extend(result.objects)
        self.skipped += result.skipped
        self.not_kubernetes += result.not_kubernetes
        self.skipped_kinds.update(result.skipped_kinds)
        self.problems.extend(result.problems)

    def fails(self, finding: Located) -> bool:
        """Does this finding fail the run (denials always; warnings with --fail-on warn)?"""
        return finding.severity == "deny" or self.fail_on == "warn"

    @property
    def exit_code(self) -> int:
        if self.problems:
            return 2
        return 1 if any(self.fails(f) for f in self.findings) else 0

    def counts(self) -> dict[str, int]:
        findings = self.findings
        return {
            "files": len(self.sources),
            "objects": len(self.objects) if self.judged is None else self.judged,
            "skipped": self.skipped,
            "notKubernetes": self.not_kubernetes,
            "denials": sum(f.severity == "deny" for f in findings),
            "warnings": sum(f.severity == "warn" for f in findings),
            "exempted": len(self.exempted),
            "errors": len(self.problems),
        }


@dataclass(slots=True)
class FileResult:
    """What one file yielded: judged objects, objects of kinds no rule checks, input problems."""

    source: str
    objects: list[CheckedObject] = field(default_factory=list)
    skipped: int = 0
    not_kubernetes: int = 0
    skipped_kinds: Counter[str] = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)


# API groups of Kubernetes' own kinds: a skipped object of another group is a custom resource, which
# the configuration can add (workloads.kinds) if it holds pod templates.
_KUBERNETES_GROUP = re.compile(r"^(|(?![a-z0-9.-]*\.sigs\.k8s\.io$)[a-z0-9.-]*\.k8s\.io|apps|batch|autoscaling|policy"
                               r"|extensions)$")


def skipped_kind(kind: str, group: str) -> str:
    """How the summary names a skipped kind: Service, or MyJob.example.com for a custom resource."""
    return kind if _KUBERNETES_GROUP.match(group) else f"{kind or '(no kind)'}.{group}"


def is_custom(name: str) -> bool:
    return "." in name


class Checker:
    """Judges manifests with one engine and, optionally, one cluster state."""

    def __init__(self, engine: Engine, state: ClusterState | None = None,
                 known_nodes: dict[str, dict[str, Any]] | None = None, namespace: str = "default",
                 namespaces: NamespaceLabels | None = None) -> None:
        self.engine = engine
        self.state = state
        # Namespace labels (who allows annotation exemptions); else the snapshot's, if it has any.
        self.namespaces = namespaces
        # Raw Node objects of the snapshot: a Node manifest with one of these names is judged
        # as an UPDATE of it, the way the webhook would see the change.
        self.known_nodes = known_nodes or {}
        self.namespace = namespace
        self.annotations = read_annotations(engine.names)  # a placeholder there is not judged

    def check_path(self, path: str, source: str) -> FileResult:
        """Read, parse and judge one file (``-`` is stdin); unreadable input becomes a Problem. A
        kustomization file is what its directory renders to, when kubectl or kustomize can render it."""
        from webhook.documents.kustomize import is_component, is_kustomization, render, renderer

        rendering = path != STDIN and is_kustomization(path) and renderer() is not None and not is_component(path)
        try:
            text = render(path) if rendering else read_text(path, source)
        except ManifestError as exc:
            return FileResult(source, problems=[Problem.of(exc)])
        result = self.check_text(text, source)
        return _at_the_kustomization(result) if rendering else result

    def check_text(self, text: str, source: str) -> FileResult:
        result = FileResult(source)
        try:
            read = read_manifest_file(text, source)
        except ManifestError as exc:
            result.problems.append(Problem.of(exc))
            return result
        result.not_kubernetes = read.not_kubernetes
        maybe_templated = "{{" in text  # most files hold none: their objects are not walked for one
        for manifest in read.manifests:
            group = group_of(manifest.obj)
            if not self.engine.handles(manifest.kind, group):
                result.skipped += 1
                result.skipped_kinds[skipped_kind(manifest.kind, group)] += 1
                continue
            placeholder = templated(manifest.obj, manifest.kind, self.annotations) if maybe_templated else None
            if placeholder is not None:  # never judged as a value: a wrong verdict about text nobody applies
                path, why = placeholder
                result.problems.append(Problem(source, manifest.line_of(path), f"{self._label(manifest)}: {why}"))
                continue
            try:
                result.objects.append(self.check_manifest(manifest))
            except (ShapeError, WorkloadConfigError) as exc:
                result.problems.append(Problem(source, manifest.line_of(exc.path), f"{manifest.kind}: {exc}"))
        return result

    def _label(self, manifest: Manifest) -> str:
        """"Job team-a/train" as the engine names an object, without judging it."""
        meta = manifest.obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        if manifest.kind in CLUSTER_SCOPED:
            return f"{manifest.kind} {meta.get('name')}"
        return f"{manifest.kind} {meta.get('namespace') or self.namespace}/{meta.get('name')}"

    def check_manifest(self, manifest: Manifest) -> CheckedObject:
        kind, obj = manifest.kind, manifest.obj
        workload = self.engine.workload(kind, group_of(obj))
        cluster_scoped = kind in CLUSTER_SCOPED if workload is None else not workload.namespaced
        namespace = "" if cluster_scoped else self.namespace
        old = self.known_nodes.get(_name(obj)) if kind == "Node" else None
        subject = self.engine.subject(kind, obj, operation="UPDATE" if old is not None else "CREATE",
                                      namespace=namespace, old=old, state=self.state,
                                      namespaces=self.namespaces)
        verdict = self.engine.validate(subject)
        if kind in POD_SPEC_PATHS or subject.workload is not None:
            # The node constraints are read as /dry-run and `score` read them: a selector the API
            # server would refuse (Gt "16GiB") is the same problem here, on this object only.
            for pod in subject.pods:
                node_selector_from_spec(pod.spec, pod.spec_path)

        def locate(finding: Finding, reason: str = "") -> Located:
            return Located(finding, manifest.source, manifest.line_of(finding.path), manifest.line,
                           subject.label, kind, subject.name, subject.namespace, reason)

        return CheckedObject(manifest.source, manifest.line, subject.label,
                             [locate(f) for f in verdict.findings],
                             [locate(f, _exemption_note(verdict)) for f in verdict.exempted])

    def check_paths(self, paths: list[tuple[str, str]]) -> Iterator[FileResult]:
        """Judge (path, source name) pairs in order; large inputs fan out over the CPUs."""
        workers = _worker_count(paths)
        if workers < 2:
            yield from (self.check_path(path, source) for path, source in paths)
            return
        import multiprocessing

        global _pool_checker
        _pool_checker = self  # inherited by the forked workers: the engine is built once
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                yield from pool.imap(_check_in_worker, paths, chunksize=max(1, len(paths) // (workers * 8)))
        finally:
            _pool_checker = None


def _at_the_kustomization(result: FileResult) -> FileResult:
    """Findings in rendered objects point at the kustomization file (its first line): the lines of
    the rendered stream are in no file the user has."""
    import dataclasses

    for obj in result.objects:
        obj.line = 1
        obj.findings = [dataclasses.replace(f, line=1, document_line=1) for f in obj.findings]
        obj.exempted = [dataclasses.replace(f, line=1, document_line=1) for f in obj.exempted]
    result.problems = [dataclasses.replace(p, line=None) for p in result.problems]
    return result


# Fan out only when there is enough to share: forking and collecting results costs ~50 ms.
PARALLEL_MIN_FILES = 64
PARALLEL_MIN_BYTES = 2 * 2**20
_pool_checker: Checker | None = None


def _check_in_worker(item: tuple[str, str]) -> FileResult:
    assert _pool_checker is not None
    return _pool_checker.check_path(*item)


def _worker_count(paths: list[tuple[str, str]]) -> int:
    """How many processes to use: one unless the input is large, stdin absent, and CPUs spare."""
    if len(paths) < PARALLEL_MIN_FILES:
        return 1
    import multiprocessing  # only for an input large enough to share

    if "fork" not in multiprocessing.get_all_start_methods() or any(path == STDIN for path, _ in paths):
        return 1
    total = 0
    for path, _ in paths:
        try:
            total += os.stat(path).st_size
        except OSError:
            continue
    if total < PARALLEL_MIN_BYTES:
        return 1
    return min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8)


def _exemption_note(verdict: Verdict) -> str:
    """The reason shown with an exempted finding, naming a config grant when one set it aside."""
    sources = [s for s in verdict.exempted_by if s != "annotation"]
    if len(verdict.exempted_by) == 1 and sources:
        return f"{verdict.exemption_reason} [{sources[0]}]"
    return verdict.exemption_reason


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""
