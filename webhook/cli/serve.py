"""``gpushare serve``: run the admission webhook (the wiring is in ``webhook.serving``)."""

from __future__ import annotations

from pathlib import Path

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
    from policies.catalog import CatalogError
    from webhook.server.auth import AuthConfigError
    from webhook.server.logs import configure_logging
    from webhook.serving import ServeError, run_server
    from webhook.state.live import StateSourceError
    from webhook.state.snapshot import SnapshotError

    if snapshot is not None and kubeconfig is not None:
        raise UsageFailure("give --snapshot or --kubeconfig, not both")

    settings = load_cli_settings(config, host=host, port=port, cert_dir=cert_dir)
    configure_logging(settings.logging)
    try:
        run_server(settings, settings.server.cert_dir, snapshot, kubeconfig)
    except (SnapshotError, AuthConfigError, StateSourceError, CatalogError, ServeError) as exc:
        raise UsageFailure(str(exc)) from None
