"""``gpushare dashboard``: the read-only web page, on 127.0.0.1 only (nothing new is exposed in
the cluster; like ``polaris dashboard``, reach it through an SSH tunnel if need be)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from webhook.cli.common import OneLineUsage, UsageFailure, load_cli_settings

HOST = "127.0.0.1"


@click.command(cls=OneLineUsage)
@click.option("--snapshot", type=click.Path(dir_okay=False, path_type=Path),
              help="Show `kubectl get nodes,pods -A -o yaml|json` output instead of the live cluster.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path),
              help="Kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config).")
@click.option("--context", help="Kubeconfig context.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port on 127.0.0.1 (0 picks a free one).")
@click.option("--refresh", type=click.IntRange(2, 3600), default=10, show_default=True,
              help="Seconds between the page's self-refreshes.")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="YAML config file.")
def dashboard(snapshot: Path | None, kubeconfig: Path | None, context: str | None, port: int, refresh: int,
              config: Path | None) -> None:
    """Serve a read-only web page of the cluster on 127.0.0.1: GPU memory per card, findings,
    Pending GPU pods with their explanation, and a dry-run form."""
    import logging

    from werkzeug.serving import make_server

    from webhook.dashboard.app import DashboardConfig, create_dashboard

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    settings = load_cli_settings(config)
    state, source = _state(snapshot, kubeconfig, settings)
    try:
        server = make_server(HOST, port, None, threaded=True)  # type: ignore[arg-type]
    except OSError as exc:
        raise UsageFailure(f"cannot listen on {HOST}:{port}: {exc.strerror}") from None
    bound = server.server_port
    hosts = (f"{HOST}:{bound}", f"localhost:{bound}")
    server.app = create_dashboard(settings, state, DashboardConfig(source, refresh), hosts)
    click.echo(f"gpushare dashboard: serving http://{HOST}:{bound}/ ({source}); Ctrl-C stops it", err=True)
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _state(snapshot: Path | None, kubeconfig: Path | None, settings):  # type: ignore[no-untyped-def]
    """A snapshot, or the live list + watch state kept current (the page refreshes from it)."""
    if snapshot is not None:
        from webhook.cli.inspect import _snapshot_state

        return _snapshot_state(snapshot, settings.names), str(snapshot)
    from webhook.state.live import LiveClusterState, StateSourceError, core_api

    try:
        api, host = core_api(kubeconfig)
    except StateSourceError as exc:
        raise UsageFailure(str(exc)) from None
    live = LiveClusterState(api, settings.names, settings.state)
    live.start()
    if not live.wait_synced(settings.state.connect_timeout_seconds * 3):
        raise click.ClickException(f"the cluster state did not sync from {host}: {live.availability().reason}")
    return live, f"live:{kubeconfig}" if kubeconfig is not None else "live:in-cluster"
