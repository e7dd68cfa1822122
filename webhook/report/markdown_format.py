"""``--format markdown``: a short report for people, as a GitHub job summary
(``$GITHUB_STEP_SUMMARY``) or a pull-request comment: the counts, the findings per rule, and
the first findings with where they are."""

from __future__ import annotations

from collections import Counter
from typing import TextIO

from webhook.report import not_run_line, summary_line
from webhook.report.checking import Located, Report
from webhook.settings import Settings

FIRST_SHOWN = 20  # a summary, not the log: the rest are in the annotations and the SARIF file


def cell(text: str) -> str:
    """Text in a table cell or list item: no line breaks, no column separators, no markup."""
    return " ".join(text.split()).replace("|", "\\|").replace("`", "'").replace("<", "&lt;")


def _where(finding: Located) -> str:
    return f"{finding.source}:{finding.line}" if finding.line else finding.source


def render(report: Report, out: TextIO, *, settings: Settings, color: bool = False) -> None:
    failed = report.exit_code != 0
    out.write(f"### gpushare check: {'failed' if failed else 'passed'}\n\n{cell(summary_line(report))}\n\n")
    findings = report.findings
    if findings:
        by_rule = Counter((f.rule, f.severity) for f in findings)
        out.write("| rule | severity | findings |\n|---|---|---:|\n")
        for (rule, severity), count in sorted(by_rule.items()):
            out.write(f"| {rule} | {severity} | {count} |\n")
        out.write("\n")
        for finding in findings[:FIRST_SHOWN]:
            out.write(f"- `{cell(_where(finding))}` **{finding.severity}** {cell(finding.message)}\n")
        if len(findings) > FIRST_SHOWN:
            out.write(f"- ... and {len(findings) - FIRST_SHOWN} more (the annotations and the SARIF file hold "
                      "them all)\n")
        out.write("\n")
    if report.problems:
        out.write("Input errors:\n\n")
        for problem in report.problems[:FIRST_SHOWN]:
            out.write(f"- {cell(problem.text)}\n")
        out.write("\n")
    if report.exempted:
        out.write(f"{len(report.exempted)} exempted (not failing the run).\n\n")
    if report.not_run:
        out.write(f"{cell(not_run_line(report))}\n")
