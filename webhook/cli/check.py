"""``gpushare check``: the webhook's rules on manifest files, offline, for CI.

Exit codes: 0 nothing fails, 1 a finding fails the run (a denial; a warning too with
``--fail-on warn``), 2 unreadable input, invalid YAML, a templated value, no Kubernetes object
at all (unless ``--allow-empty``), a bad config or a usage error (one line on stderr naming the
file and line), 3 an internal error. Heavy modules are imported inside the command so that
``gpushare`` itself starts fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

import click

from webhook.cli.common import (
    DEFAULT_CONFIG,
    OneLineUsage,
    UsageFailure,
    config_option,
    config_path,
    load_cli_settings,
    one_line,
    output_options,
    output_to,
)
from webhook.report import FORMATS

# The one error style lives in common.py; these names stay importable from here.
InputFailure = UsageFailure
load_config = load_cli_settings
__all__ = ["DEFAULT_CONFIG", "FORMATS", "InputFailure", "OneLineUsage", "check", "load_config", "wants_color"]


def wants_color(choice: str, stream: TextIO) -> bool:
    """auto: a terminal, unless NO_COLOR is set (no-color.org) or TERM is dumb."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return stream.isatty() and os.environ.get("TERM") != "dumb"


def _note(message: str) -> None:
    click.echo(f"gpushare: {message}", err=True)


@click.command(cls=OneLineUsage)
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@output_options(FORMATS, "text")
@click.option("--fail-on", type=click.Choice(("deny", "warn")),
              help="Lowest severity that fails the run (default from config: deny).")
@config_option()
@click.option("--snapshot", type=click.Path(dir_okay=False, path_type=Path),
              help="Cluster state (`kubectl get nodes,pods -A -o yaml`): also run placement and node rules.")
@click.option("--namespace-labels", type=click.Path(dir_okay=False, path_type=Path),
              help="Namespace labels, to judge exemptions as the webhook does: `kubectl get namespaces -o yaml`"
                   " or a mapping {namespace: {label: value}} (a --snapshot's Namespaces are read too).")
@click.option("-n", "--namespace", default="default", show_default=True,
              help="Namespace of namespaced objects that name none, as kubectl apply would use.")
@click.option("--exclude", multiple=True, metavar="GLOB",
              help="Skip paths matching GLOB (repeatable; added to check.exclude from config).")
@click.option("--stdin-filename", default="<stdin>", show_default=True,
              help="Name reported for input read from `-`.")
@click.option("--color", type=click.Choice(("auto", "always", "never")), default="auto", show_default=True,
              help="Colour the text output (auto: on a terminal, unless NO_COLOR is set).")
@click.option("--also-output", "also", multiple=True, metavar="FORMAT:FILE", callback=lambda _c, _p, v: _also(v),
              help="Also write the report in FORMAT to FILE, from the same run (repeatable), e.g. "
                   "`-o github --also-output sarif:gpushare.sarif`.")
@click.option("--allow-empty", is_flag=True,
              help="Exit 0 when the paths hold no Kubernetes object (e.g. a commit touching only CI files).")
def check(paths: tuple[str, ...], output: str, output_file: Path | None, fail_on: str | None, config: Path | None,
          snapshot: Path | None, namespace_labels: Path | None, namespace: str, exclude: tuple[str, ...],
          stdin_filename: str, color: str, also: tuple[tuple[str, Path], ...], allow_empty: bool) -> None:
    """Check Kubernetes manifests against the webhook's rules, offline.

    PATH is a file, a directory (searched recursively for *.yaml, *.yml, *.json) or `-` for
    standard input, e.g. `helm template ./chart | gpushare check -`. A directory holding a
    kustomization.yaml is checked as `kubectl kustomize` renders it.
    """
    try:
        with output_to(output_file):
            code = _run(paths, output, fail_on, config, snapshot, namespace, exclude, stdin_filename, color,
                        namespace_labels, allow_empty, also)
    except click.ClickException:
        raise
    except BrokenPipeError:  # `gpushare check ... | head`: the reader left, nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:
        if os.environ.get("GPUSHARE_DEBUG"):
            raise
        _note(f"internal error: {type(exc).__name__}: {one_line(str(exc))} (set GPUSHARE_DEBUG=1 for details)")
        code = 3
    sys.exit(code)


def _run(paths: tuple[str, ...], fmt: str, fail_on: str | None, config: Path | None, snapshot: Path | None,
         namespace: str, exclude: tuple[str, ...], stdin_filename: str, color: str,
         namespace_labels: Path | None = None, allow_empty: bool = False,
         also: tuple[tuple[str, Path], ...] = ()) -> int:
    from policies.admission.engine import Engine
    from webhook.documents.manifests import ManifestError
    from webhook.documents.sources import STDIN, select_files
    from webhook.report import render
    from webhook.report.checking import Checker, Problem, Report

    settings = load_config(config)
    used = config_path(config)
    try:
        engine = Engine(settings)
    except ValueError as exc:  # the config names rules that do not exist
        raise InputFailure(f"{used}: {exc}") from None
    state, known_nodes = _load_snapshot(snapshot, settings) if snapshot is not None else (None, {})
    namespaces = _load_namespace_labels(namespace_labels) if namespace_labels is not None else None
    if state is not None:
        from webhook.state.snapshot import describe_snapshot

        _note(f"cluster state: {describe_snapshot(state, snapshot)}")
    checker = Checker(engine, state, known_nodes, namespace, namespaces)
    try:
        selection = select_files(paths, (*settings.check.exclude, *exclude))
    except ManifestError as exc:
        raise InputFailure(str(exc)) from None
    for note in selection.notes:
        _note(f"note: {note}")
    report = Report(fail_on=fail_on or settings.check.fail_on,  # type: ignore[arg-type]
                    config=os.path.relpath(used) if used is not None else "")
    for result in checker.check_paths([(p, stdin_filename if p == STDIN else p) for p in selection.files]):
        report.add(result)
    if not report.objects and not report.skipped and not report.problems and not allow_empty:
        where = ", ".join(stdin_filename if p == STDIN else p for p in paths)
        found = (f"{report.not_kubernetes} document{'s' * (report.not_kubernetes != 1)}, none a Kubernetes object"
                 if report.not_kubernetes else
                 "passed over, as the note above says" if selection.passed_over
                 and not selection.files else
                 "no *.yaml, *.yml or *.json file" if not selection.files else "no document")
        report.problems.append(Problem(where, None, f"nothing to check: {found} (--allow-empty accepts that)"))
    if state is None and report.objects:
        report.not_run = _stateful_rules(settings)
    render(report, fmt, sys.stdout, settings=settings, color=fmt == "text" and wants_color(color, sys.stdout))
    sys.stdout.flush()
    for other, path in also:
        with output_to(path):
            render(report, other, sys.stdout, settings=settings)
    for problem in report.problems:
        _note(f"error: {problem.text}")
    return report.exit_code


def _also(values: tuple[str, ...]) -> tuple[tuple[str, Path], ...]:
    """--also-output FORMAT:FILE, each checked before anything runs."""
    parsed = []
    for value in values:
        fmt, sep, path = value.partition(":")
        if not sep or not path or fmt not in FORMATS:
            raise click.BadParameter(f"{value!r} is not FORMAT:FILE with FORMAT one of {', '.join(FORMATS)}",
                                     param_hint="'--also-output'")
        parsed.append((fmt, Path(path)))
    return tuple(parsed)


def _stateful_rules(settings: Any) -> tuple[str, ...]:
    """The enabled rules that need the cluster's state, runs of ids folded: GB001-GB005, GC001."""
    from policies.model.warning_text import fold_ids
    from policies.rules.rule_index import rule_entries

    return tuple(fold_ids([e.id for e in rule_entries(settings) if e.stateful and e.enabled]))


def _load_snapshot(path: Path, settings: Any) -> tuple[Any, dict[str, dict[str, Any]]]:
    """The snapshot as cluster state, and its raw Node objects by name."""
    from webhook.state.snapshot import (
        SnapshotError,
        require_nodes,
        require_quantities,
        snapshot_from_objects,
        snapshot_objects,
    )

    try:
        text = path.read_text(encoding="utf-8")
        items = snapshot_objects(text, str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFailure(f"{path}: cannot read snapshot: {_why(exc)}") from None
    except SnapshotError as exc:
        raise InputFailure(str(exc)) from None
    try:
        require_nodes(items, str(path))
        require_quantities(items, settings.names, str(path))
    except SnapshotError as exc:
        raise InputFailure(str(exc)) from None
    nodes = {item["metadata"]["name"]: item for item in items
             if item.get("kind") == "Node" and isinstance(item.get("metadata"), dict)
             and isinstance(item["metadata"].get("name"), str)}
    return snapshot_from_objects(items, settings.names), nodes


def _load_namespace_labels(path: Path) -> Any:
    """Namespace labels from Namespace objects or a {namespace: {label: value}} mapping."""
    from policies.model.grants import StaticNamespaces
    from webhook.state.snapshot import SnapshotError, snapshot_objects

    try:
        items = snapshot_objects(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFailure(f"{path}: cannot read namespace labels: {_why(exc)}") from None
    except SnapshotError as exc:
        raise InputFailure(str(exc)) from None
    if not items:
        raise InputFailure(f"{path}: holds no Namespace objects and no mapping of namespace to labels")
    labels: dict[str, dict[str, str]] = {}
    for item in items:
        if item.get("kind") == "Namespace":
            meta = item.get("metadata")
            if not isinstance(meta, dict):
                meta = {}
            found = meta.get("labels") or {}
            if isinstance(meta.get("name"), str) and isinstance(found, dict):
                labels[meta["name"]] = {str(k): str(v) for k, v in found.items()}
                continue
        elif "kind" not in item and all(isinstance(v, dict) or v is None for v in item.values()):
            labels.update({str(ns): {str(k): str(v) for k, v in (found or {}).items()} for ns, found in item.items()})
            continue
        raise InputFailure(f"{path}: expected Namespace objects or a mapping of namespace to labels, got "
                           f"{item.get('kind') or type(item).__name__}")
    return StaticNamespaces(labels)


def _why(exc: OSError | UnicodeDecodeError) -> str:
    """The reason a file cannot be read, in the words ``check`` uses for its inputs."""
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return (exc.strerror or str(exc)).lower()
