"""Audit findings as report objects that report UIs show (Policy Reporter, Kyverno's and
Kubewarden's UIs): OpenReports ``openreports.io/v1alpha1`` Report / ClusterReport, or the older
``wgpolicyk8s.io/v1alpha2`` PolicyReport / ClusterPolicyReport (the Kubernetes Policy WG's API,
from which OpenReports was forked; both CRDs' schemas are the same in what is written here).

One object per namespace with findings (pods), one cluster-scoped object (nodes), each named
``gpushare-audit``. Bounded: at most ``audit.max_results_per_report`` results per object (the
summary still counts every finding, and an annotation says how many were left out), and
objects for at most ``audit.max_reports`` namespaces, those with the most findings first.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from policies.audit.audit import AuditFinding, AuditResult
from policies.model.settings import AuditSettings

REPORT_NAME = "gpushare-audit"
SOURCE = "gpushare"
TRUNCATED_ANNOTATION = "gpushare.io/results-left-out"
SEVERITIES = {"deny": "high", "warn": "medium"}
# What marks the objects this tool writes (the writer lists and prunes by it).
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpushare")
RESULTS = {"deny": "fail", "warn": "warn"}


@dataclass(frozen=True)
class ReportApi:
    group: str
    version: str
    kind: str  # namespaced
    cluster_kind: str
    plural: str
    cluster_plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


OPENREPORTS = ReportApi("openreports.io", "v1alpha1", "Report", "ClusterReport", "reports", "clusterreports")
POLICYREPORT = ReportApi("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "ClusterPolicyReport",
                         "policyreports", "clusterpolicyreports")
APIS = {"openreports": OPENREPORTS, "policyreport": POLICYREPORT}


def candidates(kind: str) -> tuple[ReportApi, ...]:
    """The report APIs to try, in order: ``auto`` is OpenReports (where Kyverno and Kubewarden
    are moving), then the Policy WG's PolicyReport; a named kind is that one alone."""
    return (OPENREPORTS, POLICYREPORT) if kind == "auto" else (APIS[kind],)


def _result(f: AuditFinding, seconds: int) -> dict[str, Any]:
    resource: dict[str, Any] = {"apiVersion": f.api_version, "kind": f.kind, "name": f.name}
    if f.namespace:
        resource["namespace"] = f.namespace
    return {"source": SOURCE, "policy": f.rule, "rule": f.rule, "category": "GPU sharing",
            "result": RESULTS[f.severity], "severity": SEVERITIES[f.severity], "scored": True,
            "message": f.message, "resources": [resource], "timestamp": {"seconds": seconds, "nanos": 0}}


def _report(api: ReportApi, namespace: str, findings: list[AuditFinding], limit: int, seconds: int) -> dict[str, Any]:
    counts = Counter(RESULTS[f.severity] for f in findings)
    kept = sorted(findings, key=lambda f: (f.severity != "deny", f.rule, f.namespace, f.name))[:limit]
    metadata: dict[str, Any] = {"name": REPORT_NAME, "labels": {MANAGED_BY[0]: MANAGED_BY[1]}}
    if namespace:
        metadata["namespace"] = namespace
    if len(findings) > limit:
        metadata["annotations"] = {TRUNCATED_ANNOTATION: str(len(findings) - limit)}
    return {"apiVersion": api.api_version, "kind": api.kind if namespace else api.cluster_kind,
            "metadata": metadata,
            "summary": {"pass": 0, "fail": counts["fail"], "warn": counts["warn"], "error": 0, "skip": 0},
            "results": [_result(f, seconds) for f in kept]}


def report_objects(result: AuditResult, api: ReportApi, settings: AuditSettings, now: float) -> list[dict[str, Any]]:
    """The report objects for one audit: the cluster report first, then namespaces by findings."""
    by_namespace: dict[str, list[AuditFinding]] = {}
    for f in result.active:
        by_namespace.setdefault(f.namespace, []).append(f)
    seconds = int(now)
    cluster = by_namespace.pop("", [])
    out = [_report(api, "", cluster, settings.max_results_per_report, seconds)]
    ranked = sorted(by_namespace.items(), key=lambda item: (-len(item[1]), item[0]))[: settings.max_reports]
    out += [_report(api, ns, items, settings.max_results_per_report, seconds) for ns, items in sorted(ranked)]
    return out
