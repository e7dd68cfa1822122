"""``--format sarif``: SARIF 2.1.0 for code scanning (GitHub, GitLab, Azure DevOps).

One reportingDescriptor per rule with its built-in default level; severities and switches
from the config file are recorded as ruleConfigurationOverrides of the invocation, and each
result carries the level it was judged with. Exempted findings are results with an
``inSource`` suppression whose justification is the exempt reason.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from policies.rules.rule_index import RuleEntry, rule_entries
from webhook.report import tool_version
from webhook.report.checking import Located, Problem, Report
from webhook.settings import Settings

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"
LEVELS = {"deny": "error", "warn": "warning"}


def artifact_location(source: str) -> dict[str, str]:
    """A relative path against %SRCROOT% (the working directory), an absolute one as a file URI."""
    path = Path(source)
    if path.is_absolute():
        return {"uri": path.as_uri()}
    return {"uri": quote(path.as_posix()), "uriBaseId": SRCROOT}


def _location(source: str, line: int | None) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": artifact_location(source)}
    if line:
        physical["region"] = {"startLine": line}
    return {"physicalLocation": physical}


def descriptor(entry: RuleEntry) -> dict[str, Any]:
    level = LEVELS[entry.default_severity or "warn"]
    source = "; ".join(entry.sources)
    return {
        "id": entry.id,
        "shortDescription": {"text": entry.title},
        "fullDescription": {"text": entry.doc},
        "help": {"text": f"{entry.doc} (Source: {source}.) To exempt one object, annotate it with "
                         f"gpushare.io/exempt: {entry.id} and a gpushare.io/exempt-reason."},
        "defaultConfiguration": {"level": level},
        "properties": {"sources": list(entry.sources), "kinds": list(entry.kinds), "stateful": entry.stateful,
                       "tags": ["kubernetes", "gpu-sharing"], "problem.severity": level},
    }


def _fingerprint(f: Located) -> str:
    """Stable across line shifts: the rule, the object and the field."""
    key = "\0".join((f.rule, f.kind, f.namespace, f.name, f.field_path))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _result(f: Located, index: dict[str, int], report: Report) -> dict[str, Any]:
    location = _location(f.source, f.line)
    location["logicalLocations"] = [{"name": f.name, "fullyQualifiedName": f.object_label, "kind": "object"}]
    result: dict[str, Any] = {
        "ruleId": f.rule,
        "level": "error" if report.fails(f) else "warning",
        "message": {"text": f.message},
        "locations": [location],
        "partialFingerprints": {"gpushareObjectField/v1": _fingerprint(f)},
        "properties": {"documentLine": f.document_line, "field": f.field_path},
    }
    if f.rule in index:
        result["ruleIndex"] = index[f.rule]
    return result


def _notification(problem: Problem) -> dict[str, Any]:
    return {"level": "error", "message": {"text": problem.message},
            "locations": [_location(problem.source, problem.line)]}


def _overrides(entries: list[RuleEntry]) -> list[dict[str, Any]]:
    out = []
    for i, e in enumerate(entries):
        if e.enabled and e.severity == e.default_severity:
            continue
        configuration: dict[str, Any] = {"enabled": e.enabled}
        if e.severity:
            configuration["level"] = LEVELS[e.severity]
        out.append({"descriptor": {"id": e.id, "index": i}, "configuration": configuration})
    return out


def sarif_log(report: Report, settings: Settings) -> dict[str, Any]:
    entries = [e for e in rule_entries(settings) if e.category == "rule"]
    index = {e.id: i for i, e in enumerate(entries)}
    results = [_result(f, index, report) for f in report.findings]
    for f in report.exempted:
        suppressed = _result(f, index, report)
        suppressed["suppressions"] = [{"kind": "inSource", "status": "accepted",
                                       "justification": f.exemption_reason}]
        results.append(suppressed)
    invocation: dict[str, Any] = {"executionSuccessful": not report.problems, "exitCode": report.exit_code}
    if report.problems:
        invocation["toolExecutionNotifications"] = [_notification(p) for p in report.problems]
    overrides = _overrides(entries)
    if overrides:
        invocation["ruleConfigurationOverrides"] = overrides
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "gpushare", "version": tool_version(),
                                "rules": [descriptor(e) for e in entries]}},
            "originalUriBaseIds": {SRCROOT: {"uri": Path.cwd().as_uri().rstrip("/") + "/"}},
            "invocations": [invocation],
            "results": results,
        }],
    }


def render(report: Report, out: TextIO, *, settings: Settings, color: bool = False) -> None:
    json.dump(sarif_log(report, settings), out, indent=2)
    out.write("\n")
