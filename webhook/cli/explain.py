"""``gpushare explain POD``: why a GPU pod is Pending, node by node and card by card."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from webhook.cli.common import OneLineUsage, UsageFailure, load_cli_settings


@click.command(cls=OneLineUsage)
@click.argument("pod")
@click.option("-n", "--namespace", default="default", show_default=True, help="The pod's namespace (or NS/NAME).")
@click.option("--snapshot", type=click.Path(dir_okay=False, path_type=Path),
              help="Read `kubectl get nodes,pods -A -o yaml|json` output instead of the live cluster.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path),
              help="Kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config).")
@click.option("--context", help="Kubeconfig context.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="YAML config file.")
def explain(pod: str, namespace: str, snapshot: Path | None, kubeconfig: Path | None, context: str | None,
            output: str, config: Path | None) -> None:
    """Why POD is Pending: every node with the reason it does not fit, the closest node and what
    would have to change there (the same ranking and words as /dry-run)."""
    from policies.explain import explain_pod
    from policies.scoring import Scorer
    from webhook.cli.cluster_source import read_state

    if "/" in pod:
        namespace, _, pod = pod.partition("/")
    settings = load_cli_settings(config)
    state, source = read_state(snapshot, kubeconfig, context, settings.names)
    found = state.get_pod(namespace, pod)
    if found is None:
        why = "it asks for no GPU" if state.has_pod(namespace, pod) else "no such pod"
        raise UsageFailure(f"pod {namespace}/{pod} in {source}: {why}")
    explanation = explain_pod(found, state, Scorer(settings.names))
    if output == "json":
        click.echo(json.dumps(explanation.as_dict(), indent=2))
        return
    out = [explanation.summary]
    if explanation.changes:
        out.append(f"To fit on {explanation.closest}:")
        out += [f"  - {change}" for change in explanation.changes]
    if explanation.ranking:
        out.append("Nodes:")
        for entry in explanation.ranking:
            verdict = f"fits, score {entry['score']}" if entry["fits"] else "does not fit"
            out.append(f"  {entry['node']}: {verdict}")
            out += [f"    {reason}" for reason in entry["reasons"]]
    sys.stdout.write("\n".join(out) + "\n")
