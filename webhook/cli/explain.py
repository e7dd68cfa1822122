"""``gpushare explain POD``: why a GPU pod is Pending, node by node and card by card."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from webhook.cli.cluster_source import cluster_options, read_state
from webhook.cli.common import OneLineUsage, UsageFailure, config_option, load_cli_settings, output_options, output_to


@click.command(cls=OneLineUsage)
@click.argument("pod")
@click.option("-n", "--namespace", default="default", show_default=True, help="The pod's namespace (or NS/NAME).")
@cluster_options
@output_options(("text", "json"), "text", alias=False)
@config_option("names")
def explain(pod: str, namespace: str, snapshot: Path | None, demo: bool, kubeconfig: Path | None,
            context: str | None, output: str, output_file: Path | None, config: Path | None) -> None:
    """Why POD is Pending: every node with the reason it does not fit, the closest node and what
    would have to change there (the same ranking and words as /dry-run)."""
    from policies.explain import explain_pod
    from policies.scoring import Scorer

    if "/" in pod:
        namespace, _, pod = pod.partition("/")
    settings = load_cli_settings(config)
    state, source, _described = read_state(snapshot, demo, kubeconfig, context, settings.names)
    found = state.get_pod(namespace, pod)
    if found is None:
        why = "it asks for no GPU" if state.has_pod(namespace, pod) else f"no such pod{_elsewhere(state, pod)}"
        raise UsageFailure(f"pod {namespace}/{pod} in {source}: {why}")
    explanation = explain_pod(found, state, Scorer(settings.names))
    with output_to(output_file):
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


def _elsewhere(state: object, pod: str) -> str:
    """Where a pod of that name is, when it is in another namespace, or how to name one."""
    keys: set[str] = getattr(state, "pod_keys", set)()
    namespaces = sorted(key.partition("/")[0] for key in keys if key.partition("/")[2] == pod)
    if namespaces:
        shown = ", ".join(namespaces[:5]) + (", ..." if len(namespaces) > 5 else "")
        return f" in that namespace; one of that name is in {shown}: pass -n {namespaces[0]} (or {namespaces[0]}/{pod})"
    return "; name its namespace with -n NAMESPACE (or NAMESPACE/POD)"
