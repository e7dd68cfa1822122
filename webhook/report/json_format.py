"""``--format json``: the whole report as one JSON document, for scripts."""

from __future__ import annotations

import json
from typing import Any, TextIO

from webhook.report import tool_version
from webhook.report.checking import Located, Report
from webhook.settings import Settings


def finding_dict(finding: Located, report: Report) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rule": finding.rule, "severity": finding.severity, "message": finding.message,
        "file": finding.source, "line": finding.line, "documentLine": finding.document_line,
        "field": finding.field_path,
        "object": {"kind": finding.kind, "name": finding.name, "namespace": finding.namespace},
        "fails": report.fails(finding),
    }
    if finding.exemption_reason:
        out["exemptionReason"] = finding.exemption_reason
    return out


def render(report: Report, out: TextIO, *, settings: Settings, color: bool = False) -> None:
    document = {
        "tool": {"name": "gpushare", "version": tool_version()},
        "summary": {**report.counts(), "skippedKinds": dict(report.skipped_kinds.most_common()),
                    "failOn": report.fail_on, "exitCode": report.exit_code, "config": report.config or None,
                    "notRun": list(report.not_run)},
        "findings": [finding_dict(f, report) for f in report.findings],
        "exempted": [finding_dict(f, report) | {"fails": False} for f in report.exempted],
        "errors": [{"file": p.source, "line": p.line, "message": p.message} for p in report.problems],
    }
    json.dump(document, out, indent=2)
    out.write("\n")
