"""``--format github``: GitHub Actions workflow commands, so findings annotate the pull request.

``::error file=F,line=L,title=GS001::message``; warnings as ``::warning``, exemptions as
``::notice``. Values are escaped as the runner expects (``%``, CR, LF, and in properties ``:``
and ``,``).
"""

from __future__ import annotations

from typing import TextIO

from webhook.report import not_run_line, summary_line
from webhook.report.checking import Report
from webhook.settings import Settings


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, file: str, line: int | None, title: str, message: str) -> str:
    props = [f"file={escape_property(file)}"]
    if line:
        props.append(f"line={line}")
    props.append(f"title={escape_property(title)}")
    return f"::{level} {','.join(props)}::{escape_data(message)}"


def render(report: Report, out: TextIO, *, settings: Settings, color: bool = False) -> None:
    for f in report.findings:
        level = "error" if report.fails(f) else "warning"
        out.write(command(level, f.source, f.line, f.rule, f.message) + "\n")
    for f in report.exempted:
        out.write(command("notice", f.source, f.line, f"{f.rule} (exempted)",
                          f"{f.message} (exempted: {f.exemption_reason})") + "\n")
    for p in report.problems:
        out.write(command("error", p.source, p.line, "gpushare check", p.message) + "\n")
    out.write(summary_line(report) + "\n")
    if report.not_run:
        out.write(f"::notice title=gpushare check::{escape_data(not_run_line(report))}\n")
