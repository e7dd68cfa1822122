"""``gpushare rules``: every rule and mutation with id, severity, source and a one-line explanation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from webhook.cli.common import OneLineUsage, config_option, load_cli_settings, output_options, output_to

if TYPE_CHECKING:
    from policies.rules.rule_index import RuleEntry


@click.command(cls=OneLineUsage)
@output_options(("text", "json", "markdown"), "text")
@config_option("shows severities as configured")
@click.option("--only", metavar="PREFIXES", default="",
              help="Only ids starting with one of these comma-separated prefixes, e.g. GS,GC,GM.")
@click.option("--judged", is_flag=True,
              help="Instead: per kind, what an UPDATE must change to be judged (markdown: docs/design.md's table).")
def rules(output: str, output_file: Path | None, config: Path | None, only: str, judged: bool) -> None:
    """List every rule with its severity, its source and what it checks (markdown: the table the README
    and docs/design.md carry)."""
    settings = load_cli_settings(config)
    prefixes = tuple(p.strip().upper() for p in only.split(",") if p.strip())
    with output_to(output_file):
        if judged:
            _print_judged(settings, output)
        else:
            _print(settings, output, prefixes)


def _print_judged(settings: Any, output: str) -> None:
    from policies.admission.engine import Engine
    from policies.rules.judged import UPDATED_KINDS

    if output == "json":
        engine = Engine(settings)
        click.echo(json.dumps({kind: engine.judged(kind).describe() for kind in UPDATED_KINDS}, indent=2))
        return
    click.echo(judged_markdown(settings), nl=False)


def judged_markdown(settings: Any) -> str:
    """Per kind, what an UPDATE must change to be judged: docs/design.md's table."""
    from policies.admission.engine import Engine
    from policies.rules.judged import markdown

    return markdown(Engine(settings).judged) + "\n"


def rules_markdown(settings: Any, prefixes: tuple[str, ...] = ()) -> str:
    """The rules whose ids start with one of ``prefixes`` (all without any): the README's and docs' tables."""
    from policies.rules.rule_index import rule_entries

    rows = ["| id | severity | checks | source |", "|---|---|---|---|"]
    for e in rule_entries(settings):
        if not prefixes or e.id.startswith(prefixes):
            checks = e.title + (" (with cluster state)" if e.stateful else "")
            rows.append(f"| {e.id} | {_severity(e)} | {checks} | {'; '.join(e.sources)} |")
    return "\n".join(rows) + "\n"


def _print(settings: Any, output: str, prefixes: tuple[str, ...]) -> None:
    from policies.rules.rule_index import rule_entries

    if output == "markdown":
        click.echo(rules_markdown(settings, prefixes), nl=False)
        return
    entries = [e for e in rule_entries(settings) if not prefixes or e.id.startswith(prefixes)]
    if output == "json":
        click.echo(json.dumps([e.as_dict() for e in entries], indent=2))
        return
    # Sources are long titles: the table numbers them and lists them once below it.
    notes: dict[str, int] = {}
    rows = [("ID", "SEVERITY", "SOURCE", "CHECKS")]
    for e in entries:
        severity = _severity(e)
        if e.enabled and e.severity != e.default_severity:
            severity += f" (default {e.default_severity})"
        numbers = sorted(notes.setdefault(source, len(notes) + 1) for source in e.sources)
        marks = ",".join(f"[{number}]" for number in numbers)
        rows.append((e.id, severity, marks, e.title + (" [needs --snapshot]" if e.stateful else "")))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3])
    click.echo("\nSources:")
    for source, number in notes.items():
        click.echo(f"  [{number}] {source}")


def _severity(entry: RuleEntry) -> str:
    """How a table shows what a rule does: its severity, "off", or "mutates"."""
    return "off" if not entry.enabled else (entry.severity or "mutates")
