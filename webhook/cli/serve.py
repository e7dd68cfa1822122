"""``gpushare serve``: run the admission webhook (the wiring is in ``webhook.serving``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from webhook.cli.common import OneLineUsage, UsageFailure, load_cli_settings


@click.command(cls=OneLineUsage)
@click.option("--host", help="Address to listen on (default from config: 0.0.0.0).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port to listen on (default 8443).")
@click.option("--cert-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Directory with tls.crt/tls.key; a CA and certificate are generated when missing.")
@click.option("--snapshot", type=click.Path(dir_okay=False, path_type=Path),
              help="Cluster state from a `kubectl get nodes,pods -A -o yaml` file.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path),
              help="Watch the cluster of this kubeconfig (default: in-cluster when running in a pod, "
                   "else the embedded demo snapshot).")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path),
              help="YAML config file (default .gpushare.yaml when present).")
def serve(host: str | None, port: int | None, cert_dir: Path | None, snapshot: Path | None,
          kubeconfig: Path | None, config: Path | None) -> None:
    """Run the admission webhook over TLS under gunicorn."""
    from policies.model.catalog import CatalogError
    from webhook.http.auth import AuthConfigError
    from webhook.http.logs import configure_logging
    from webhook.serving import ServeError, run_server
    from webhook.state.live import StateSourceError
    from webhook.state.snapshot import SnapshotError

    if snapshot is not None and kubeconfig is not None:
        raise UsageFailure("give --snapshot or --kubeconfig, not both")

    settings = load_cli_settings(config, host=host, port=port, cert_dir=cert_dir)
    _require_scheduler_choice(settings, snapshot, kubeconfig)
    server = settings.server
    listeners = [(n, p) for n, p in (("server.port", server.port), ("server.ops_port", server.ops_port),
                                      ("server.probe_port", server.probe_port)) if p]
    for i, (name, port) in enumerate(listeners):
        for other, same in listeners[:i]:
            if same == port:
                raise UsageFailure(f"{name} {port} is {other} too; give each listener a port of its own")
    configure_logging(settings.logging)
    try:
        run_server(settings, settings.server.cert_dir, snapshot, kubeconfig)
    except (SnapshotError, AuthConfigError, StateSourceError, CatalogError, ServeError) as exc:
        raise UsageFailure(str(exc)) from None


def _require_scheduler_choice(settings: Any, snapshot: Path | None, kubeconfig: Path | None) -> None:
    """In a cluster, GM001's scheduler is a choice the installer makes, as Helm's ``required`` makes
    it: the default (ack-co-scheduler) leaves every GPU pod Pending on ACK Pro, where nothing answers
    to that name. On a snapshot or the demo cluster the default serves."""
    from webhook.state.kube_client import KubeConfigError, in_cluster, require_file

    try:
        require_file(kubeconfig)  # a missing file is the first thing to say
    except KubeConfigError as exc:
        raise UsageFailure(str(exc)) from None
    live = snapshot is None and (kubeconfig is not None or in_cluster())
    if not live or "scheduler_name" in settings.names.model_fields_set:
        return
    raise UsageFailure(
        "names.scheduler_name is not set: choose the scheduler GM001 gives shared-GPU pods before serving a "
        "cluster: ack-co-scheduler on registered clusters (ACK's ack-co-scheduler add-on places shared GPUs), "
        "none on ACK Pro clusters (their own kube-scheduler does; a pod sent to ack-co-scheduler there stays "
        "Pending); set it in the config file (names: {scheduler_name: ...}) or GPUSHARE_NAMES__SCHEDULER_NAME "
        "(docs/install.md)")
