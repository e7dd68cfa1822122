"""``gpushare score FILE``: where each pod (or workload template) in FILE could go, as a table.

The same ranking as ``POST /dry-run``, over a snapshot file (``--snapshot``, what
``kubectl get nodes,pods -A -o yaml`` prints) or the embedded demo cluster. Exit codes as
``check``'s: 0 no object is denied (one that fits no node now is a warning, as the scheduler
leaves it Pending rather than refusing it); 1 some object is denied (with ``--fail-on warn``, also
one with a warning or that fits no node); 2 unreadable input, invalid YAML, no Kubernetes object
at all (unless ``--allow-empty``) or a bad config (one line naming the file and line). Heavy
modules are imported inside the command so ``gpushare`` starts fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from webhook.cli.common import (
    OneLineUsage,
    UsageFailure,
    config_option,
    load_cli_settings,
    output_options,
    output_to,
)

if TYPE_CHECKING:
    from rich.console import Console

    from policies.admission.dryrun import ObjectReport
    from webhook.documents.manifests import Manifest


def _read(file: Path) -> tuple[str, str]:
    """The file (or stdin), in the words ``check`` uses for what cannot be read."""
    from webhook.documents.sources import STDIN, read_text, select_files

    path = str(file)
    source = "<stdin>" if path == STDIN else path
    try:
        if path != STDIN and not select_files([path]).files:
            raise UsageFailure(f"{path}: skipped Helm chart template; render it with helm template")
        return read_text(path, source), source
    except ValueError as exc:  # ManifestError
        raise UsageFailure(str(exc)) from None


def _json_result(report: ObjectReport, manifest: Manifest) -> dict[str, Any]:
    """One object as ``score -o json`` prints it: the verdict's findings and the ranking /dry-run shows."""
    from policies.scoring.scoring import ranking_entry

    verdict = report.verdict
    ranking = None
    if report.ranking is not None and report.request is not None:
        ranking = [ranking_entry(score, report.request.demand) for score in report.ranking]
    return {"kind": verdict.kind, "name": verdict.name, "namespace": verdict.namespace, "file": manifest.source,
            "line": manifest.line, "allowed": verdict.allowed,
            "findings": [{"rule": f.rule, "severity": f.severity, "message": f.message} for f in verdict.findings],
            "node": report.judged_node or None, "ranking": ranking}


def _cards_cell(entry: dict[str, Any]) -> str:
    """GPU0 15/15 per container (memory after placing), or the whole-GPU set."""
    parts = []
    for card in entry["cards"]:
        gpus = ",".join(str(g) for g in card["gpus"])
        parts.append(f"GPU{gpus} {card['gpu_mem_after']}" if "gpu_mem_after" in card else f"GPUs {gpus}")
    return "\n".join(parts)


def _render(console: Console, report: ObjectReport, manifest: Manifest, limit: int | None) -> None:
    from rich.table import Table

    from policies.scoring.scoring import ranking_entry

    verdict = report.verdict
    where = f"{manifest.source}:{manifest.line}"
    title = f"{verdict.kind} {verdict.namespace}/{verdict.name}  ({where})"
    for finding in verdict.findings:
        style = "red" if finding.severity == "deny" else "yellow"
        console.print(f"[{style}]{finding.severity}[/{style}] {finding.message}", highlight=False)
    if report.ranking is None or report.request is None:
        console.print(f"{title}: no pod spec to rank" if report.request is None else f"{title}: no cluster state")
        return
    table = Table(title=title, title_justify="left", show_lines=False)
    for column, justify in (("node", "left"), ("fits", "center"), ("score", "right"), ("cards", "left"),
                            ("why", "left")):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    shown = report.ranking if limit is None else report.ranking[:limit]
    for score in shown:
        entry = ranking_entry(score, report.request.demand)
        mark = "[green]yes[/green]" if score.fits else "[red]no[/red]"
        node = f"{score.node} *" if score.node == report.judged_node else score.node
        # A node that does not fit scores 0, as /dry-run and the dashboard show it.
        table.add_row(node, mark, str(score.score), _cards_cell(entry),
                      "\n".join(entry["reasons"]))
    console.print(table)
    hidden = len(report.ranking) - len(shown)
    if hidden:
        console.print(f"... and {hidden} more nodes (--top 0 shows all)")


@click.command("score", cls=OneLineUsage)
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option("--snapshot", type=click.Path(dir_okay=False, path_type=Path),
              help="Cluster state from a `kubectl get nodes,pods -A -o yaml` file (default: the demo cluster).")
@config_option()
@click.option("--node", default="", help="Judge the placement on this node (as POST /dry-run?node=).")
@click.option("--top", type=click.IntRange(0), default=20, show_default=True,
              help="Nodes shown per object, best first; 0 shows all.")
@output_options(("text", "json"), "text", alias=False)
@click.option("--fail-on", type=click.Choice(("deny", "warn")), default="deny", show_default=True,
              help="Lowest severity that fails the run; warn also fails an object that fits no node.")
@click.option("--allow-empty", is_flag=True, help="Exit 0 when FILE holds no Kubernetes object.")
def score(file: Path, snapshot: Path | None, config: Path | None, node: str, top: int, output: str,
          output_file: Path | None, fail_on: str, allow_empty: bool) -> None:
    """Rank the nodes for every pod and workload template in FILE ('-' reads stdin).

    \b
    Exit codes:
      0  no object is denied (one that fits no node now is a warning)
      1  an object is denied (--fail-on warn: or warned about, or fits no node)
      2  unreadable input, invalid YAML, a malformed object, an unknown --node, a bad config
    """
    from policies.admission.dryrun import DryRun
    from policies.admission.engine import Engine
    from policies.model.resources import ShapeError
    from policies.scoring.scoring import Scorer
    from webhook.documents.manifests import ManifestError, read_manifest_file
    from webhook.documents.templates import read_annotations, templated
    from webhook.state.snapshot import SnapshotError, describe_snapshot, load_demo_snapshot, load_snapshot

    settings = load_cli_settings(config)
    text, source = _read(file)
    try:
        read = read_manifest_file(text, source)
        state = load_snapshot(snapshot, settings.names) if snapshot else load_demo_snapshot(settings.names)
    except (ManifestError, SnapshotError) as exc:
        raise UsageFailure(str(exc)) from None
    if not read.manifests and not allow_empty:
        raise UsageFailure(f"nothing to score in {source}: no Kubernetes object"
                           f"{_not_kubernetes(read.not_kubernetes)} (--allow-empty accepts that)")
    if node and state.get_node(node) is None:
        raise UsageFailure(f"--node {node}: no such node in the cluster state")
    dry_run = DryRun(Engine(settings), Scorer(settings.names))
    described = describe_snapshot(state, snapshot)
    failed = unreadable = False
    results: list[dict[str, Any]] = []
    with output_to(output_file):
        console = _console() if output == "text" else None
        if console is not None:
            console.print(f"cluster state: {described}", highlight=False)
        for manifest in read.manifests:
            meta = manifest.obj.get("metadata")
            namespace = str(meta.get("namespace") or "default") if isinstance(meta, dict) else "default"
            placeholder = templated(manifest.obj, manifest.kind, read_annotations(settings.names))
            if placeholder is not None:
                click.echo(f"gpushare: error: {source}:{manifest.line_of(placeholder[0])}: {manifest.kind}: "
                           f"{placeholder[1]}", err=True)
                unreadable = True
                continue
            try:
                report = dry_run.report(manifest.kind, manifest.obj, state, namespace=namespace, node=node)
            except ShapeError as exc:  # this object cannot be ranked; the others still are
                click.echo(f"gpushare: error: {source}:{manifest.line_of(exc.path)}: {manifest.kind}: {exc}",
                           err=True)
                unreadable = True
                continue
            if console is not None:
                _render(console, report, manifest, top or None)
            else:
                results.append(_json_result(report, manifest))
            fits_somewhere = report.ranking is None or any(s.fits for s in report.ranking)
            warned = not fits_somewhere or any(f.severity == "warn" for f in report.verdict.findings)
            failed = failed or not report.verdict.allowed or (fail_on == "warn" and warned)
        if console is None:
            click.echo(json.dumps({"cluster": described, "results": results}, indent=2))
    sys.exit(2 if unreadable else 1 if failed else 0)


def _console() -> Console:
    from rich.console import Console

    return Console(width=max(Console().width, 140))


def _not_kubernetes(count: int) -> str:
    return f" ({count} document{'s' * (count != 1)} that {'are' if count != 1 else 'is'} not Kubernetes objects)" \
        if count else ""
