"""The ``gpushare`` command. Subcommands import their heavy modules lazily so that
``gpushare check`` starts fast."""

from __future__ import annotations

import sys
from pathlib import Path

import click


class UsageFailure(click.ClickException):
    """A clear one-line error with exit code 2 (bad input or usage), never a traceback."""

    exit_code = 2


def _settings(config: Path | None, **server: object):  # type: ignore[no-untyped-def]
    from policies.settings import ConfigFileError, load_settings

    try:
        settings = load_settings(config)
    except ConfigFileError as exc:
        raise UsageFailure(str(exc)) from None
    overrides = {k: v for k, v in server.items() if v is not None}
    if overrides:
        settings = settings.model_copy(update={"server": settings.server.model_copy(update=overrides)})
    return settings


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpushare-webhook")
def main() -> None:
    """Admission webhook, policy checks and node scoring for shared-GPU Kubernetes clusters."""


@main.command()
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
    from webhook.auth import AuthConfigError
    from webhook.live_state import StateSourceError
    from webhook.logs import configure_logging
    from webhook.runtime import serve as run
    from webhook.state import SnapshotError

    if snapshot is not None and kubeconfig is not None:
        raise UsageFailure("give --snapshot or --kubeconfig, not both")

    if config is None and Path(".gpushare.yaml").is_file():
        config = Path(".gpushare.yaml")
    settings = _settings(config, host=host, port=port, cert_dir=cert_dir)
    configure_logging(settings.logging)
    try:
        run(settings, settings.server.cert_dir, snapshot, kubeconfig)
    except (SnapshotError, AuthConfigError, StateSourceError, CatalogError) as exc:
        raise UsageFailure(str(exc)) from None


from webhook.cli_check import check  # noqa: E402  (subcommands register after the group)
from webhook.cli_rules import rules  # noqa: E402
from webhook.cli_score import score  # noqa: E402

main.add_command(check)
main.add_command(rules)
main.add_command(score)


def inspect_plugin_main() -> None:
    """Entry point for the kubectl plugin ``kubectl inspect gpushare``."""
    main(["inspect", *sys.argv[1:]])


from webhook.cli_certs import certs  # noqa: E402
from webhook.cli_inspect import inspect  # noqa: E402

main.add_command(certs)
main.add_command(inspect)


if __name__ == "__main__":
    main()
