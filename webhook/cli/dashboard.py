"""``gpushare dashboard``: the read-only web page, on 127.0.0.1 only (nothing new is exposed in
the cluster; like ``polaris dashboard``, reach it through an SSH tunnel if need be)."""

from __future__ import annotations

import errno
import socket
import sys
from pathlib import Path
from typing import Any

import click

from webhook.cli.cluster_source import cluster_options, read_state
from webhook.cli.common import OneLineUsage, UsageFailure, config_option, load_cli_settings

HOST = "127.0.0.1"


@click.command(cls=OneLineUsage)
@cluster_options
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port on 127.0.0.1 (0 picks a free one).")
@click.option("--refresh", type=click.IntRange(2, 3600), default=10, show_default=True,
              help="Seconds between the page's self-refreshes.")
@config_option()
def dashboard(snapshot: Path | None, demo: bool, kubeconfig: Path | None, context: str | None, port: int,
              refresh: int, config: Path | None) -> None:
    """Serve a read-only web page of the cluster on 127.0.0.1: GPU memory per card, findings,
    Pending GPU pods with their explanation, and a dry-run form."""
    import logging

    from werkzeug.serving import make_server

    from webhook.dashboard.app import DashboardConfig, create_dashboard

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    settings = load_cli_settings(config)
    listener = _listen(port)  # before reading the cluster: a busy port is said at once
    state, source = _state(snapshot, demo, kubeconfig, context, settings)
    # werkzeug binds its own socket and, on a busy port, prints two lines and exits 1; given ours, it cannot fail.
    server = make_server(HOST, port, None, threaded=True, fd=listener.fileno())  # type: ignore[arg-type]
    bound = listener.getsockname()[1]
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
        listener.close()


def _listen(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((HOST, port))
        listener.listen(128)
    except OSError as exc:
        listener.close()
        in_use = exc.errno == errno.EADDRINUSE
        why = "the port is in use (another server? choose one with --port)" if in_use else exc.strerror
        raise UsageFailure(f"cannot listen on {HOST}:{port}: {why}") from None
    return listener


def _state(snapshot: Path | None, demo: bool, kubeconfig: Path | None, context: str | None,
           settings: Any) -> tuple[Any, str]:
    """A snapshot, the demo, or the live list + watch state kept current (the page refreshes from it)."""
    if snapshot is not None or demo:
        state, source, _described = read_state(snapshot, demo, kubeconfig, context, settings.names)
        return state, source
    from kubernetes import client as k8s

    from webhook.cli.cluster_source import client_for
    from webhook.state.live import LiveClusterState

    api = client_for(kubeconfig, context)
    _reachable(api)
    live = LiveClusterState(k8s.CoreV1Api(api), settings.names, settings.state, quotas=True)
    live.start()
    if not live.wait_synced(settings.state.connect_timeout_seconds * 3):
        live.stop()
        raise UsageFailure(f"cannot read the cluster from the API server {api.configuration.host}: "
                           f"{live.availability().reason}")
    return live, f"live:{kubeconfig}" if kubeconfig is not None else "live:in-cluster"


def _reachable(api: Any) -> None:
    """One small read first: an API server that is not there is said at once, in one line,
    instead of the watch retrying (and logging) until the sync deadline."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from webhook.cli.cluster_source import unreachable

    try:
        k8s.CoreV1Api(api).list_node(limit=1, _request_timeout=10)
    except HTTPError as exc:
        raise unreachable(exc, api.configuration.host) from None
    except ApiException as exc:
        raise UsageFailure(f"the API server {api.configuration.host} refused to list nodes: HTTP {exc.status} "
                           f"{exc.reason}") from None
