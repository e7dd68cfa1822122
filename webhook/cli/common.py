"""What every ``gpushare`` command shares: the one-line usage error and settings loading."""

from __future__ import annotations

from pathlib import Path

import click

from policies.settings import ConfigFileError, Settings, load_settings


class UsageFailure(click.ClickException):
    """A clear one-line error with exit code 2 (bad input or usage), never a traceback."""

    exit_code = 2


def load_cli_settings(config: Path | None, **server: object) -> Settings:
    """Settings from ``config`` (and the environment), with ``server`` overrides from flags."""
    try:
        settings = load_settings(config)
    except ConfigFileError as exc:
        raise UsageFailure(str(exc)) from None
    overrides = {k: v for k, v in server.items() if v is not None}
    if overrides:
        settings = settings.model_copy(update={"server": settings.server.model_copy(update=overrides)})
    return settings
