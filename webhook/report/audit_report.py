"""An audit result as a check Report, so ``gpushare audit`` prints with ``check``'s reporters
(text, json, sarif, ...) and exits with its codes: 0 nothing fails, 1 a finding fails the run."""

from __future__ import annotations

from policies.audit.audit import AuditFinding, AuditResult
from policies.model.settings import Severity
from policies.rules.base import Finding
from webhook.report.checking import CheckedObject, Located, Report


def _located(f: AuditFinding, source: str) -> Located:
    return Located(Finding(f.rule, f.severity, f.message), source, 0, 0, f.label, f.kind, f.name, f.namespace,
                   f.exemption_reason)


def audit_report(result: AuditResult, source: str, fail_on: Severity = "deny") -> Report:
    """``source`` names the cluster (``live:in-cluster``, the snapshot's path) in every finding."""
    by_object: dict[str, CheckedObject] = {}
    for f in result.findings:
        obj = by_object.get(f.label)
        if obj is None:
            obj = by_object[f.label] = CheckedObject(source, 0, f.label, [], [])
        (obj.exempted if f.exempted else obj.findings).append(_located(f, source))
    report = Report(fail_on=fail_on, sources=[source], objects=list(by_object.values()),
                    origin=source, judged=result.nodes + result.pods + result.workloads)
    return report
