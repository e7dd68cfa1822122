"""``gpushare generate``: rewrite every file of a source checkout that is generated from the code, or
with ``--check`` list the stale ones (exit 1). The one command a change to the rules, the resource
names, the workload table or the webhook registrations needs (CONTRIBUTING.md, docs/internals.md):

- the webhooks' matchConditions: deploy/kustomize/match-conditions.yaml, the chart's
  files/match-conditions.yaml and the custom-workloads component's webhook.yaml
  (``gpushare policy export --webhooks kustomize|helm|custom-workloads``);
- the backstop policy in the chart and the backstop component (``gpushare policy export``);
- every table between ``<!-- generated ... -->`` and ``<!-- end of generated table -->`` in README.md
  and docs/*.md: the rule tables (the ``gpushare rules`` command the marker names), the custom
  workload kinds (docs/workloads.md) and what an outage blocks (docs/operations.md, from the
  registrations ``kubectl kustomize`` renders with the new files in place).

Everything is generated for the default configuration (no config file, no environment): the files
ship with the project. A config of one's own gets its files from ``gpushare policy export``."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from webhook.cli.common import OneLineUsage, UsageFailure

CHART_FILES = Path("deploy/helm/gpushare-webhook/files")
KUSTOMIZE = Path("deploy/kustomize")
COMPONENTS = KUSTOMIZE / "components"
# The documents whose generated tables are rewritten.
DOCUMENT_GLOBS = ("README.md", "docs/*.md")
# A generated block: its marker line, the table, and the end marker.
BLOCK = re.compile(r"^(?P<marker><!-- generated (?P<how>[^\n]*?)-->)\n(?P<table>.*?)^<!-- end of generated table -->$",
                   re.S | re.M)
RULES_MARKER = re.compile(r"by `gpushare (?P<command>rules [^`]+)`")
KINDS_MARKER = "from policies/model/workloads.py"
OUTAGE_MARKER = "from the rendered webhook registrations"
COMMAND = "gpushare generate"
# The generated files of deploy/: the webhooks' matchConditions (kustomize, Helm, the custom-workloads
# component) and the backstop (Helm, the backstop component), in that order.
DEPLOY_FILES = (KUSTOMIZE / "match-conditions.yaml", CHART_FILES / "match-conditions.yaml",
                COMPONENTS / "custom-workloads" / "webhook.yaml", CHART_FILES / "backstop.yaml",
                COMPONENTS / "backstop" / "backstop.yaml")


@dataclass(frozen=True)
class Generated:
    """One generated file: its path in the checkout and its text as it should be."""

    path: Path
    text: str


@click.command(cls=OneLineUsage)
@click.option("--check", is_flag=True,
              help="Write nothing: list each stale file and exit 1 if there is one (0 when all are fresh).")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The source checkout (default: the one this gpushare runs from).")
def generate(check: bool, root: Path | None) -> None:
    """Rewrite every generated file of the checkout: the webhooks' matchConditions, the backstop policy,
    and the rule, workload-kind and outage tables of README.md and docs/."""
    root = checkout(root)
    stale = stale_files(root, regenerate(root))
    if check:
        for item in stale:
            click.echo(item.path)
        if stale:
            click.echo(f"{len(stale)} generated file(s) stale: run `{COMMAND}`", err=True)
            sys.exit(1)
        return
    for item in stale:
        (root / item.path).write_text(item.text)
        click.echo(f"rewrote {item.path}")
    if not stale:
        click.echo("every generated file is fresh")


def checkout(root: Path | None) -> Path:
    """The source checkout: ``root``, else the directory holding the running code's packages."""
    found = root if root is not None else Path(__file__).resolve().parents[2]
    if not (found / KUSTOMIZE / "kustomization.yaml").is_file() or not (found / "README.md").is_file():
        where = f"{found}" if root is not None else f"{found} (the code's own directory)"
        raise UsageFailure(f"{where} is not a gpushare-webhook source checkout (no {KUSTOMIZE}/kustomization.yaml "
                           f"or README.md); pass --root")
    return found


def stale_files(root: Path, generated: list[Generated]) -> list[Generated]:
    """The generated files whose checked-in text differs from what they should be."""
    return [g for g in generated if not (root / g.path).is_file() or (root / g.path).read_text() != g.text]


def regenerate(root: Path) -> list[Generated]:
    """Every generated file of the checkout at ``root``, as it should be now (nothing is written)."""
    from webhook.settings import Settings

    settings = Settings()  # the defaults: the shipped files are the default configuration's
    files = deploy_files(settings)
    installs: dict[str, Any] | None = None

    def outage() -> str:
        nonlocal installs
        if installs is None:
            installs = rendered_installs(root, files)
        from policies.generate.doc_tables import outage_table

        return outage_table(installs, settings)

    for path in documents(root):
        files.append(Generated(path.relative_to(root),
                               _rewrite_blocks(path.relative_to(root), path.read_text(), settings, outage)))
    return files


def documents(root: Path) -> list[Path]:
    """The documents of the checkout that carry generated tables."""
    found = {p for pattern in DOCUMENT_GLOBS for p in root.glob(pattern)}
    return sorted(p for p in found if BLOCK.search(p.read_text()))


def generated_paths(root: Path) -> list[Path]:
    """Every file ``gpushare generate`` may rewrite, relative to the checkout."""
    return [*DEPLOY_FILES, *(p.relative_to(root) for p in documents(root))]


def deploy_files(settings: Any) -> list[Generated]:
    """The matchConditions and backstop files of deploy/, as they should be."""
    from webhook.cli.policy import backstop_text, webhook_conditions_text

    backstop = backstop_text(settings)
    texts = (webhook_conditions_text(settings, "kustomize", "yaml"), webhook_conditions_text(settings, "helm", "yaml"),
             webhook_conditions_text(settings, "custom-workloads", "yaml"), backstop, backstop)
    return [Generated(path, text) for path, text in zip(DEPLOY_FILES, texts, strict=True)]


def _rewrite_blocks(where: Path, text: str, settings: Any, outage: Callable[[], str]) -> str:
    def table(match: re.Match[str]) -> str:
        line = text.count("\n", 0, match.start()) + 1
        return f"{match['marker']}\n{_table_for(match['how'], f'{where}:{line}', settings, outage)}" \
               f"<!-- end of generated table -->"

    return BLOCK.sub(table, text)


def _table_for(how: str, where: str, settings: Any, outage: Callable[[], str]) -> str:
    """The table a block's marker names: a ``gpushare rules`` command's, the kinds' or the outage's."""
    from policies.generate.doc_tables import kinds_table
    from webhook.cli.rules import judged_markdown, rules_markdown

    rules = RULES_MARKER.search(how)
    if rules is not None:
        return _rules_table(shlex.split(rules["command"])[1:], where, settings, rules_markdown, judged_markdown)
    if KINDS_MARKER in how:
        return kinds_table()
    if OUTAGE_MARKER in how:
        return outage()
    raise UsageFailure(f"{where}: a generated block whose marker names no generator ({how.strip()!r}); "
                       f"name `gpushare rules ...`, {KINDS_MARKER!r} or {OUTAGE_MARKER!r}")


def _rules_table(args: list[str], where: str, settings: Any, rules_markdown: Callable[..., str],
                 judged_markdown: Callable[[Any], str]) -> str:
    """What ``gpushare rules ARGS`` prints, for the arguments a table's marker may give."""
    words = iter(args)
    prefixes: tuple[str, ...] = ()
    judged = False
    for word in words:
        if word in ("-o", "-f", "--output", "--format"):
            if next(words, None) != "markdown":
                raise UsageFailure(f"{where}: a generated table is markdown (`-o markdown`)")
        elif word == "--only":
            prefixes = tuple(p.strip().upper() for p in next(words, "").split(",") if p.strip())
        elif word == "--judged":
            judged = True
        else:
            raise UsageFailure(f"{where}: `gpushare rules` in a marker takes -o markdown, --only and --judged, "
                               f"not {word!r}")
    return judged_markdown(settings) if judged else rules_markdown(settings, prefixes)


def rendered_installs(root: Path, files: list[Generated]) -> dict[str, Any]:
    """The webhook registrations of each install: the kustomize base, then the base with each
    component that touches a webhook configuration (by name), rendered by ``kubectl kustomize`` from a
    copy of deploy/kustomize holding ``files``."""
    import yaml

    from policies.generate.doc_tables import registrations

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise UsageFailure("kubectl (1.14 or later, with kustomize built in) renders docs/operations.md's outage "
                           "table; install it (https://kubernetes.io/docs/tasks/tools/)")
    with tempfile.TemporaryDirectory(prefix="gpushare-generate-") as scratch:
        base = Path(scratch) / "kustomize"
        shutil.copytree(root / KUSTOMIZE, base)
        for item in files:
            if item.path.is_relative_to(KUSTOMIZE):
                (base / item.path.relative_to(KUSTOMIZE)).write_text(item.text)

        def render(directory: Path) -> list[tuple[str, Any]]:
            done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True,
                                  timeout=120, check=False)
            if done.returncode != 0:
                raise UsageFailure(f"kubectl kustomize {directory.relative_to(scratch)}: {done.stderr.strip()}")
            return registrations([d for d in yaml.safe_load_all(done.stdout) if d])

        installs = {"base": render(base)}
        for component in _webhook_components(base / "components"):
            overlay = Path(scratch) / f"with-{component.name}"
            overlay.mkdir()
            (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
                "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "resources": ["../kustomize"], "components": [f"../kustomize/components/{component.name}"]}))
            installs[component.name] = render(overlay)
        return installs


def _webhook_components(components: Path) -> Iterator[Path]:
    """The components that add or patch a webhook configuration, by name."""
    for component in sorted(p for p in components.iterdir() if p.is_dir()):
        if any("WebhookConfiguration" in f.read_text() for f in component.glob("*.yaml")):
            yield component
