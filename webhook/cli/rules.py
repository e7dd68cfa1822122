"""``gpushare rules``: every rule and mutation with id, severity, source and a one-line explanation."""

from __future__ import annotations

import json
from pathlib import Path

import click

from webhook.cli.common import OneLineUsage, config_option, load_cli_settings, output_options, output_to


@click.command(cls=OneLineUsage)
@output_options(("text", "json"), "text")
@config_option("shows severities as configured")
def rules(output: str, output_file: Path | None, config: Path | None) -> None:
    """List every rule with its severity, its source and what it checks."""
    settings = load_cli_settings(config)
    with output_to(output_file):
        _print(settings, output)


def _print(settings: object, output: str) -> None:
    from policies.rule_index import rule_entries

    entries = rule_entries(settings)  # type: ignore[arg-type]
    if output == "json":
        click.echo(json.dumps([e.as_dict() for e in entries], indent=2))
        return
    # Sources are long titles: the table numbers them and lists them once below it.
    notes: dict[str, int] = {}
    rows = [("ID", "SEVERITY", "SOURCE", "CHECKS")]
    for e in entries:
        severity = "off" if not e.enabled else (e.severity or "mutates")
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
