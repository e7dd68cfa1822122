"""``gpushare inspect`` and the kubectl plugin ``kubectl inspect gpushare``: GPU allocation per card."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from webhook.cli.cluster_source import cluster_options, read_state
from webhook.cli.common import OneLineUsage, UsageFailure, config_option, load_cli_settings, output_options, output_to


@click.command(cls=OneLineUsage)
@click.argument("nodes", nargs=-1)
@cluster_options
@output_options(("table", "json"), "table", alias=False)
@click.option("-d", "--details", is_flag=True, help="Show every pod and the GiB it holds on each GPU.")
@click.option("--quotas", is_flag=True,
              help="Show each GPU quota (ResourceQuota, ElasticQuotaTree node, ClusterQueue): used, quota, left.")
@config_option("names")
def inspect(nodes: tuple[str, ...], snapshot: Path | None, demo: bool, kubeconfig: Path | None, context: str | None,
            output: str, output_file: Path | None, details: bool, quotas: bool, config: Path | None) -> None:
    """Show allocated/total GPU memory per card, node and cluster (optionally only NODES)."""
    from policies.placement.allocation import cluster_usage
    from webhook.report.inspect_view import as_json, detail_table, summary_table

    names = load_cli_settings(config).names
    state, _source, described = read_state(snapshot, demo, kubeconfig, context, names)
    if quotas:
        _quotas(state, names, described, output, output_file)
        return
    missing = [n for n in nodes if state.get_node(n) is None]
    if missing:
        raise UsageFailure(f"no such node: {', '.join(missing)} (in the {described})")
    click.echo(f"gpushare: cluster state: {described}", err=True)  # stderr: the table stays kubectl's
    usage = cluster_usage(state, names, nodes)
    with output_to(output_file):
        if output == "json":
            click.echo(json.dumps(as_json(usage), indent=2))
        elif not usage.nodes:
            click.echo(f"No node shares GPU memory (no node reports {names.resources.gpu_mem}).")
        else:
            click.echo(detail_table(usage) if details else summary_table(usage), nl=False)


def _quotas(state: Any, names: Any, described: str, output: str, output_file: Path | None) -> None:
    import time

    from policies.model.pod_usage import usage_of
    from policies.quota.quota_usage import quota_shares
    from webhook.report.quota_view import quota_json, quota_table

    click.echo(f"gpushare: cluster state: {described}", err=True)
    shares = quota_shares(state.quota_objects(), usage_of(state.pods()), names, time.time())
    with output_to(output_file):
        if output == "json":
            click.echo(json.dumps(quota_json(shares, names), indent=2))
        elif not shares:
            click.echo("No GPU quota (no ResourceQuota, ElasticQuotaTree or ClusterQueue limits GPU memory or "
                       "compute).")
        else:
            click.echo(quota_table(shares, names), nl=False)
