"""The ``gpushare`` command group: one module per subcommand in this package. Subcommands
import their heavy modules lazily so that ``gpushare check`` starts fast."""

from __future__ import annotations

import sys

import click

from webhook.cli.audit import audit
from webhook.cli.certs import certs
from webhook.cli.check import check
from webhook.cli.dashboard import dashboard
from webhook.cli.explain import explain
from webhook.cli.inspect import inspect
from webhook.cli.rules import rules
from webhook.cli.score import score
from webhook.cli.serve import serve


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpushare-webhook")
def main() -> None:
    """Admission webhook, policy checks and node scoring for shared-GPU Kubernetes clusters."""


for command in (serve, check, rules, score, certs, inspect, audit, explain, dashboard):
    main.add_command(command)


def inspect_plugin_main() -> None:
    """Entry point for the kubectl plugin ``kubectl inspect gpushare``."""
    main(["inspect", *sys.argv[1:]])


if __name__ == "__main__":
    main()
