"""What every ``gpushare`` command shares: one error style and settings loading.

Every error is one line on stderr, ``gpushare: error: <what>``, and an exit code: 2 for bad
input, a bad config or a usage error; 1 when the cluster refused or could not be reached.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

DEFAULT_CONFIG = ".gpushare.yaml"


def one_line(message: str) -> str:
    """Multi-line messages folded into one line, without pydantic's docs links."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip() and "errors.pydantic.dev" not in ln]
    return " ".join(lines)


class CommandFailure(click.ClickException):
    """One line, ``gpushare: error: ...``, never a traceback."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))

    def show(self, file: Any = None) -> None:
        click.echo(f"gpushare: error: {self.format_message()}", err=True)


class UsageFailure(CommandFailure):
    """Exit 2: unreadable input, a bad config, a usage error."""

    exit_code = 2


class ClusterFailure(CommandFailure):
    """Exit 1: the cluster refused or could not be reached."""


class OneLineUsage(click.Command):
    """Usage errors as one line with exit code 2, instead of the usage block."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            name = f"{parent.info_name} {self.name}" if parent is not None and parent.parent is not None \
                else self.name
            raise UsageFailure(f"{exc.format_message()} (see gpushare {name} --help)") from None


def config_path(config: Path | None) -> Path | None:
    """The config file: --config, else .gpushare.yaml in the working directory when present."""
    if config is None and Path(DEFAULT_CONFIG).is_file():
        return Path(DEFAULT_CONFIG)
    return config


def load_cli_settings(config: Path | None, **server: object) -> Any:
    """Settings from ``config`` (else .gpushare.yaml) and the environment, with ``server`` overrides
    from flags. Returns ``policies.settings.Settings`` (imported late: ``gpushare`` starts fast)."""
    from policies.rule_index import known_rule_ids
    from policies.settings import ConfigFileError, load_settings

    try:
        settings = load_settings(config_path(config), known_rule_ids())
    except ConfigFileError as exc:
        raise UsageFailure(str(exc)) from None
    overrides = {k: v for k, v in server.items() if v is not None}
    if overrides:
        settings = settings.model_copy(update={"server": settings.server.model_copy(update=overrides)})
    return settings
