"""Renderers of a check Report: text, json, junit, sarif, github. Each module has one job.

Importing this package is cheap (the CLI reads FORMATS from it); a renderer is imported when used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from policies.settings import Settings
    from webhook.report.checking import Report

FORMATS = ("text", "json", "junit", "sarif", "github")


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
    """One line for humans: what was checked and what was found."""
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
    if c["skipped"]:
        line += f" (and {n(c['skipped'], 'object')} of kinds no rule checks)"
    return line
