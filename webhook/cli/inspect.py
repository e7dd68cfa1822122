"""``gpushare inspect`` and the kubectl plugin ``kubectl inspect gpushare``: GPU allocation per card."""

from __future__ import annotations

import json
from pathlib import Path

import click

from webhook.cli.common import ClusterFailure, OneLineUsage, UsageFailure, load_cli_settings


@click.command(cls=OneLineUsage)
@click.argument("nodes", nargs=-1)
@click.option("--snapshot", type=click.Path(dir_okay=False, path_type=Path),
              help="Read `kubectl get nodes,pods -A -o yaml|json` output instead of the live cluster.")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("-d", "--details", is_flag=True, help="Show every pod and the GiB it holds on each GPU.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path),
              help="Kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config).")
@click.option("--context", help="Kubeconfig context.")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="YAML config file (names).")
def inspect(nodes: tuple[str, ...], snapshot: Path | None, output: str, details: bool, kubeconfig: Path | None,
            context: str | None, config: Path | None) -> None:
    """Show allocated/total GPU memory per card, node and cluster (optionally only NODES)."""
    from policies.allocation import cluster_usage
    from webhook.report.inspect_view import as_json, detail_table, summary_table

    names = load_cli_settings(config).names
    if snapshot is not None:
        from webhook.state.snapshot import describe_snapshot

        state = _snapshot_state(snapshot, names)
        described = describe_snapshot(state, snapshot)
    else:
        state, described = _live_state(kubeconfig, context, names)
    missing = [n for n in nodes if state.get_node(n) is None]
    if missing:
        raise UsageFailure(f"no such node: {', '.join(missing)} (in the {described})")
    click.echo(f"gpushare: cluster state: {described}", err=True)  # stderr: the table stays kubectl's
    usage = cluster_usage(state, names, nodes)
    if output == "json":
        click.echo(json.dumps(as_json(usage), indent=2))
    elif not usage.nodes:
        click.echo("No node shares GPU memory (no node reports aliyun.com/gpu-mem).")
    else:
        click.echo(detail_table(usage) if details else summary_table(usage), nl=False)


def _snapshot_state(path: Path, names):  # type: ignore[no-untyped-def]
    from webhook.state.snapshot import SnapshotError, load_snapshot

    try:
        return load_snapshot(path, names)
    except SnapshotError as exc:
        raise UsageFailure(str(exc)) from None


def _live_state(kubeconfig: Path | None, context: str | None, names):  # type: ignore[no-untyped-def]
    """The cluster read once, and which cluster it was, in words."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from webhook.state.cluster_read import read_cluster
    from webhook.state.kube_client import KubeConfigError, api_client

    try:
        client = api_client(kubeconfig, context)
        host = client.configuration.host
        state = read_cluster(client, names)
    except KubeConfigError as exc:
        raise UsageFailure(f"{str(exc).rstrip('.')}; to read a saved cluster instead, pass --snapshot FILE "
                           "(from `kubectl get nodes,pods -A -o yaml`)") from None
    except ApiException as exc:
        raise ClusterFailure(f"the API server refused to list nodes and pods: HTTP {exc.status} "
                                   f"{exc.reason}") from None
    except HTTPError as exc:
        raise ClusterFailure(f"cannot reach the API server: {exc}") from None
    where = f"kubeconfig {kubeconfig}" if kubeconfig is not None else "the default kubeconfig or in-cluster account"
    nodes, pods = state.counts()
    return state, f"cluster from {where} (API server {host}): {nodes} nodes, {pods} GPU pods"
