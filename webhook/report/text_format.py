"""The default output: one ``file:line: severity message`` line per finding, then a summary.

Plain text unless colour was asked for (a terminal without NO_COLOR); only then is rich
imported, so CI logs and pipes pay nothing for it.
"""

from __future__ import annotations

from typing import TextIO

from webhook.report import not_run_line, summary_line
from webhook.report.checking import Located, Report
from webhook.settings import Settings

STYLES = {"deny": "bold red", "warn": "yellow", "exempt": "dim"}


def _parts(finding: Located, exempt: bool) -> list[tuple[str, str]]:
    """(text, style) pieces of one line, shared by the plain and the coloured output."""
    label = "exempt" if exempt else finding.severity
    # A cluster object (``audit``) has no line: its source alone says where it is.
    where = f"{finding.source}:{finding.line}:" if finding.line else f"{finding.source}:"
    parts = [(where, "cyan"), (" ", ""), (label, STYLES[label]), (" ", ""),
             (finding.message, "dim" if exempt else "")]
    # Where the object starts helps only when it does not start the file.
    if finding.line != finding.document_line and finding.document_line > 1:
        parts.append((f" (document at line {finding.document_line})", "dim"))
    if exempt:
        parts.append((f" (exempted: {finding.exemption_reason})", "dim"))
    return parts


def render(report: Report, out: TextIO, *, settings: Settings, color: bool = False) -> None:
    ordered = sorted([(f, False) for f in report.findings] + [(f, True) for f in report.exempted],
                     key=lambda pair: (pair[0].source, pair[0].line or 0))  # by file, then line
    lines = [_parts(f, exempt) for f, exempt in ordered]
    failed = report.exit_code != 0
    # The same words with and without colour: colour only styles them.
    lines.append([("FAIL:" if failed else "ok:", "bold red" if failed else "bold green"), (" ", ""),
                  (summary_line(report), "")])
    not_run = not_run_line(report)
    if not_run:
        lines.append([(not_run, "yellow")])
    if not color:
        for parts in lines:
            out.write("".join(text for text, _ in parts) + "\n")
        return
    from rich.console import Console
    from rich.text import Text

    console = Console(file=out, force_terminal=True, highlight=False, soft_wrap=True, emoji=False)
    for parts in lines:
        console.print(Text.assemble(*parts))
