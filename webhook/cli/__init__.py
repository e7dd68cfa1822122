"""The ``gpushare`` command line: one module per command."""

from webhook.cli.commands import inspect_plugin_main, main, run

__all__ = ["inspect_plugin_main", "main", "run"]
