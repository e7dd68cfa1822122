"""``gpushare explain POD``: why a GPU pod is Pending, node by node and card by card; or, given a
Deployment, ReplicaSet or Job, whether quota refused or holds back its pods (``policies.scoring.workload_explain``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from webhook.cli.cluster_source import client_for, cluster_options, read_state, unreachable
from webhook.cli.common import (
    ClusterFailure,
    OneLineUsage,
    UsageFailure,
    config_option,
    load_cli_settings,
    output_options,
    output_to,
)


@click.command(cls=OneLineUsage)
@click.argument("pod")
@click.option("-n", "--namespace", default="default", show_default=True,
              help="The pod's or workload's namespace (or NS/NAME).")
@cluster_options
@output_options(("text", "json"), "text", alias=False)
@config_option("names")
def explain(pod: str, namespace: str, snapshot: Path | None, demo: bool, kubeconfig: Path | None,
            context: str | None, output: str, output_file: Path | None, config: Path | None) -> None:
    """Why POD is Pending: every node with the reason it does not fit, the closest node and what
    would have to change there (the same ranking and words as /dry-run). Given a Deployment,
    ReplicaSet or Job name instead: whether quota refused its pods or holds them back."""
    from policies.scoring.explain import explain_pod
    from policies.scoring.scoring import Scorer
    from policies.scoring.workload_explain import explain_workload

    if "/" in pod:
        namespace, _, pod = pod.partition("/")
    settings = load_cli_settings(config)
    state, source, _described = read_state(snapshot, demo, kubeconfig, context, settings.names)
    found = state.get_pod(namespace, pod)
    if found is None and not state.has_pod(namespace, pod):
        view = _workload(snapshot, demo, kubeconfig, context, namespace, pod)
        if view is not None:
            _say_workload(explain_workload(view, state, settings.names), output, output_file)
            return
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


def _workload(snapshot: Path | None, demo: bool, kubeconfig: Path | None, context: str | None,
              namespace: str, name: str) -> Any:
    """The Deployment, ReplicaSet or Job of that name, from the snapshot file or the live cluster (the demo
    cluster has none)."""
    from webhook.cli.workload_source import live_view, snapshot_view

    if demo:
        return None
    if snapshot is not None:
        from webhook.state.snapshot import SnapshotError, snapshot_objects

        try:
            items = snapshot_objects(snapshot.read_text(encoding="utf-8"), str(snapshot))
        except (OSError, UnicodeDecodeError, SnapshotError) as exc:
            raise UsageFailure(str(exc)) from None
        return snapshot_view(items, namespace, name)
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    client = client_for(kubeconfig, context)
    host = client.configuration.host
    try:
        return live_view(client, namespace, name)
    except ApiException as exc:
        raise ClusterFailure(f"the API server {host} refused to read {namespace}/{name} and its events: "
                             f"HTTP {exc.status} {exc.reason}") from None
    except HTTPError as exc:
        raise unreachable(exc, host) from None


def _say_workload(explanation: Any, output: str, output_file: Path | None) -> None:
    with output_to(output_file):
        if output == "json":
            click.echo(json.dumps(explanation.as_dict(), indent=2))
            return
        lines = [explanation.headline] + [f"  - {item}" for item in (*explanation.refused, *explanation.waiting)]
        sys.stdout.write("\n".join(lines) + "\n")
