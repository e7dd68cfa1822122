"""The ``gpushare`` command group: one module per subcommand in this package, imported only when
its command runs (``gpushare check`` pays for no other command's imports)."""

from __future__ import annotations

import gc
import importlib
import sys
from pathlib import Path

import click

from webhook.cli.common import OneLineGroup

# name -> module in webhook.cli holding a click command of that name, in the order help lists them.
COMMANDS = {"serve": "serve", "check": "check", "rules": "rules", "score": "score", "certs": "certs",
            "inspect": "inspect", "audit": "audit", "explain": "explain", "dashboard": "dashboard",
            "policy": "policy", "generate": "generate"}


class LazyGroup(OneLineGroup):
    """Commands are looked up by name and imported on use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        command: click.Command = getattr(importlib.import_module(f"webhook.cli.{module}"), cmd_name)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpushare-webhook", prog_name="gpushare", message="%(prog)s %(version)s")
def main() -> None:
    """Admission webhook, policy checks and node scoring for shared-GPU Kubernetes clusters.

    Shell completion: eval "$(_GPUSHARE_COMPLETE=bash_source gpushare)" in ~/.bashrc
    (zsh_source, fish_source for zsh and fish).
    """


def run() -> None:
    """Entry point of the ``gpushare`` executable: ``main`` in a process of its own."""
    try:
        main()
    finally:
        _leave_to_the_system()


def inspect_plugin_main() -> None:
    """Entry point for the kubectl plugins ``kubectl inspect gpushare`` and ``kubectl inspect cgpu``
    (the command the ACK documents name): both are ``gpushare inspect``."""
    from webhook.cli.inspect import inspect

    plugin = Path(sys.argv[0]).name.removeprefix("kubectl-").replace("-", " ")
    try:
        inspect.main(sys.argv[1:], prog_name=f"kubectl {plugin}")
    finally:
        _leave_to_the_system()


def _leave_to_the_system() -> None:
    """The command is done and the process ends: Python's last collections need not walk every
    object it loaded or made (a twentieth of ``gpushare check`` on one small file). Frozen (gc.freeze),
    they are freed with the process, as the rest of its memory is; output is flushed and files
    closed before this (and Python flushes the standard streams at exit). Never called where
    ``main`` runs inside another process (tests, click's CliRunner)."""
    gc.freeze()


if __name__ == "__main__":
    run()
