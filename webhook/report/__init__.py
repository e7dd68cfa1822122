"""Renderers of a check Report: text, json, junit, sarif, github, markdown. Each module has one job.

Importing this package is cheap (the CLI reads FORMATS from it); a renderer is imported when used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from webhook.report.checking import Report
    from webhook.settings import Settings

FORMATS = ("text", "json", "junit", "sarif", "github", "markdown")


def render(report: Report, fmt: str, out: TextIO, *, settings: Settings, color: bool = False) -> None:
    """Write ``report`` to ``out`` in ``fmt``; only the chosen renderer is imported."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    module = importlib.import_module(f"{__name__}.{fmt}_format")
    module.render(report, out, settings=settings, color=color)


def tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpushare-webhook")
    except PackageNotFoundError:
        return "0+unknown"


def summary_line(report: Report) -> str:
    """One line for humans: what was checked, what was found, what was passed over, which config."""
    c = report.counts()

    def n(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 's'}"

    found = [n(c["denials"], "denial"), n(c["warnings"], "warning")]
    if c["exempted"]:
        found.append(f"{c['exempted']} exempted")
    if c["errors"]:
        found.append(n(c["errors"], "input error"))
    where = report.origin or n(c["files"], "file")
    line = f"{', '.join(found)} in {n(c['objects'], 'object')} from {where}"
    passed_over = []
    if c["skipped"]:
        passed_over.append(f"{n(c['skipped'], 'object')} of kinds no rule checks{_skipped_kinds(report)}")
    if c["notKubernetes"]:
        one = c["notKubernetes"] == 1
        passed_over.append(f"{n(c['notKubernetes'], 'document')} that "
                           f"{'is not a Kubernetes object' if one else 'are not Kubernetes objects'}")
    if passed_over:
        line += f" (and {', '.join(passed_over)})"
    if report.config:
        line += f"; config {report.config}"
    return line


def not_run_line(report: Report) -> str:
    """The rules a check without cluster state did not run, or "" (said below the summary)."""
    if not report.not_run:
        return ""
    # GQ005 reads the quotas too (docs/quotas.md: ElasticQuotaTrees and Kueue's queues where installed).
    kinds = "nodes,pods,resourcequotas" if any(r.startswith("GQ") for r in report.not_run) else "nodes,pods"
    return (f"not run: cluster-aware rules {', '.join(report.not_run)} need --snapshot FILE "
            f"(`kubectl get {kinds} -A -o yaml`)")


SKIPPED_SHOWN = 6


def _skipped_kinds(report: Report) -> str:
    """": Service, ConfigMap, MyJob.example.com; ..." with how to have a custom resource checked."""
    from webhook.report.checking import is_custom

    kinds = [kind for kind, _ in report.skipped_kinds.most_common()]
    if not kinds:
        return ""
    more = f" and {len(kinds) - SKIPPED_SHOWN} more" if len(kinds) > SKIPPED_SHOWN else ""
    text = f": {', '.join(kinds[:SKIPPED_SHOWN])}{more}"
    if any(is_custom(kind) for kind in kinds):
        text += ("; a custom resource that holds pod templates is checked once listed under workloads.kinds "
                 "in the config (docs/workloads.md)")
    return text
