"""What every ``gpushare`` command shares: one error style, one output flag, settings loading.

Every error a user can cause is one line on stderr, ``gpushare: error: <what> <where>: <why>``,
and exit code 2 (bad input, a bad config, a cluster that cannot be reached, a usage error); 1
when the cluster refused what it was asked.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

DEFAULT_CONFIG = ".gpushare.yaml"
# What `pip install` adds for the commands that serve or talk to a cluster (pyproject.toml).
SERVER_EXTRA = "pip install 'gpushare-webhook[server]'"
# Modules of the [server] extra: a command that finds one missing says how to install it.
SERVER_MODULES = frozenset({"flask", "werkzeug", "gunicorn", "kubernetes", "urllib3", "cryptography",
                            "prometheus_client", "pythonjsonlogger"})
F = TypeVar("F", bound=Callable[..., Any])


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
    """Exit 2: unreadable input, a bad config, a cluster that cannot be reached, a usage error."""

    exit_code = 2


class ClusterFailure(CommandFailure):
    """Exit 1: the cluster refused what it was asked."""


class _OneLineErrors(click.Command):
    """Usage errors as one line with exit code 2, instead of the usage block; ``-h`` is help, also
    when the command runs alone (``kubectl inspect cgpu -h``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", {}).setdefault("help_option_names", ["-h", "--help"])
        super().__init__(*args, **kwargs)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise usage_failure(exc, _command_path(self, parent, info_name)) from None


class OneLineUsage(_OneLineErrors):
    """A command with one-line usage errors; a module of the [server] extra that is not installed is
    named with the command that installs it."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] not in SERVER_MODULES:
                raise
            raise UsageFailure(f"{ctx.command_path} needs the server extra ({exc.name} is not installed): "
                               f"{SERVER_EXTRA}") from None


class OneLineGroup(_OneLineErrors, click.Group):
    """A group of commands with the commands' error style: a misspelt command gets the closest
    one ("did you mean"), a usage error is one line naming the help to read, exit code 2."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                               list[str]]:
        name = click.utils.make_str(args[0])
        if self.get_command(ctx, name) is None and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise UsageFailure(f"No such command '{name}'.{hint} (see {ctx.command_path} --help)")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # a subcommand of its own class, not OneLineUsage
            raise usage_failure(exc, exc.ctx.command_path if exc.ctx else ctx.command_path) from None


def usage_failure(exc: click.UsageError, command_path: str) -> click.ClickException:
    """Click's usage error in the one style: ``gpushare: error: WHAT (see COMMAND --help)``; a group
    run without a command still prints its help (click signals that as a usage error)."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2
        return exc
    return UsageFailure(f"{exc.format_message()} (see {command_path} --help)")


def _command_path(command: click.Command, parent: click.Context | None, info_name: str | None = None) -> str:
    if parent is None:  # the command run alone: the name it was run by (kubectl inspect cgpu)
        return info_name or command.name or "gpushare"
    return f"{parent.command_path} {command.name}"


def find_config() -> Path | None:
    """``.gpushare.yaml`` in the working directory or the nearest parent, up to the repository
    root (the first directory holding ``.git``), as ruff and kube-linter find theirs."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        candidate = folder / DEFAULT_CONFIG
        if candidate.is_file():
            return Path(os.path.relpath(candidate))  # named as the user would type it
        if (folder / ".git").exists():
            return None
    return None


def config_path(config: Path | None) -> Path | None:
    """The config file: --config, else the nearest .gpushare.yaml (``find_config``), else none."""
    return config if config is not None else find_config()


def config_option(what: str = "rules, severities, names") -> Callable[[F], F]:
    return click.option("--config", type=click.Path(dir_okay=False, path_type=Path),
                        help=f"YAML config file (default: {DEFAULT_CONFIG} in this directory or the nearest "
                             f"parent up to the repository root): {what}.")


def kubeconfig_options() -> list[Callable[[F], F]]:
    """--kubeconfig and --context, as every command that talks to a cluster spells them."""
    return [click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path),
                         help="Kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)."),
            click.option("--context", help="Kubeconfig context.")]


def with_options(func: F, options: list[Callable[[F], F]]) -> F:
    """``options`` applied so that help lists them in the order given."""
    for option in reversed(options):
        func = option(func)
    return func


def load_cli_settings(config: Path | None, **server: object) -> Any:
    """Settings from ``config`` (else the nearest .gpushare.yaml) and the environment, with ``server``
    overrides from flags. Returns ``webhook.settings.Settings`` (imported late: ``gpushare`` starts fast)."""
    from policies.rules.rule_index import known_rule_ids
    from webhook.settings import ConfigFileError, load_settings

    path = config_path(config)
    if config is not None and not config.is_file():
        why = "is a directory" if config.is_dir() else "no such file"
        raise UsageFailure(f"cannot read config {config}: {why}")
    try:
        settings = load_settings(path, known_rule_ids())
    except ConfigFileError as exc:
        raise UsageFailure(str(exc)) from None
    overrides = {k: v for k, v in server.items() if v is not None}
    if overrides:
        settings = settings.model_copy(update={"server": settings.server.model_copy(update=overrides)})
    return settings


# -- one output flag


def output_options(formats: tuple[str, ...], default: str, *, alias: bool = True) -> Callable[[F], F]:
    """``-o/--output FORMAT`` (kubectl's, kube-linter's and kubeconform's flag; ``-f/--format``, the
    older spelling, still works where it did) and ``--output-file FILE``."""
    names = ("-o", "--output", "-f", "--format") if alias else ("-o", "--output")

    def decorate(func: F) -> F:
        func = click.option("--output-file", type=click.Path(dir_okay=False, path_type=Path),
                            help="Write the output to FILE instead of standard output.")(func)
        return click.option(*names, "output", type=click.Choice(formats), default=default, show_default=True,
                            help="Output format.")(func)
    return decorate


@contextlib.contextmanager
def output_to(path: Path | None) -> Iterator[None]:
    """Standard output goes to ``path`` (when given) inside the block."""
    if path is None:
        yield
        return
    try:
        stream = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed below, after the block)
    except OSError as exc:
        raise UsageFailure(f"cannot write output file {path}: {exc.strerror or exc}") from None
    try:
        with contextlib.redirect_stdout(stream):
            yield
    finally:
        stream.close()

