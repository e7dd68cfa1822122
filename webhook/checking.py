"""``gpushare check`` without the command line: manifests -> the engine -> a Report.

The engine is the one the webhook runs, so a manifest passes here exactly when the
admission webhook would admit it (for the rules that need no cluster state, and with
``--snapshot`` for the stateful ones too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from policies.cluster import ClusterState
from policies.engine import Engine
from policies.resources import ShapeError, render_path
from policies.rules.base import Finding
from policies.settings import Severity

from .manifests import Manifest, ManifestError, parse_manifests

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
    def field(self) -> str:
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
    problems: list[Problem] = field(default_factory=list)

    @property
    def findings(self) -> list[Located]:
        return [f for o in self.objects for f in o.findings]

    @property
    def exempted(self) -> list[Located]:
        return [f for o in self.objects for f in o.exempted]

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
            "objects": len(self.objects),
            "skipped": self.skipped,
            "denials": sum(f.severity == "deny" for f in findings),
            "warnings": sum(f.severity == "warn" for f in findings),
            "exempted": len(self.exempted),
            "errors": len(self.problems),
        }


class Checker:
    """Judges manifests with one engine and, optionally, one cluster state."""

    def __init__(self, engine: Engine, state: ClusterState | None = None,
                 known_nodes: dict[str, dict[str, Any]] | None = None, namespace: str = "default") -> None:
        self.engine = engine
        self.state = state
        # Raw Node objects of the snapshot: a Node manifest with one of these names is judged
        # as an UPDATE of it, the way the webhook would see the change.
        self.known_nodes = known_nodes or {}
        self.namespace = namespace

    def check_text(self, text: str, source: str, report: Report) -> None:
        """Parse and judge one file's text into ``report``; unreadable input becomes a Problem."""
        report.sources.append(source)
        try:
            manifests = parse_manifests(text, source)
        except ManifestError as exc:
            report.problems.append(Problem.of(exc))
            return
        for manifest in manifests:
            if not self.engine.handles(manifest.kind):
                report.skipped += 1
                continue
            try:
                report.objects.append(self.check_manifest(manifest))
            except ShapeError as exc:
                report.problems.append(Problem(source, manifest.line_of(exc.path), f"{manifest.kind}: {exc}"))

    def check_manifest(self, manifest: Manifest) -> CheckedObject:
        kind, obj = manifest.kind, manifest.obj
        namespace = "" if kind in CLUSTER_SCOPED else self.namespace
        old = self.known_nodes.get(_name(obj)) if kind == "Node" else None
        subject = self.engine.subject(kind, obj, operation="UPDATE" if old is not None else "CREATE",
                                      namespace=namespace, old=old, state=self.state)
        verdict = self.engine.validate(subject)

        def locate(finding: Finding, reason: str = "") -> Located:
            return Located(finding, manifest.source, manifest.line_of(finding.path), manifest.line,
                           subject.label, kind, subject.name, subject.ns, reason)

        return CheckedObject(manifest.source, manifest.line, subject.label,
                             [locate(f) for f in verdict.findings],
                             [locate(f, verdict.exemption_reason) for f in verdict.exempted])


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""
