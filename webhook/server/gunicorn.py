"""Run a WSGI app under gunicorn, embedded (no gunicorn command line, no config file)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from webhook.http.gunicorn_adapter import BaseApplication

# Settings newer gunicorn releases have and older ones do not; where missing, the old default
# is what we ask for (control_socket_disable: 27 added a control socket, on by default).
OPTIONAL_SETTINGS = frozenset({"control_socket_disable"})


class EmbeddedGunicorn(BaseApplication):  # type: ignore[misc]
    """Gunicorn's arbiter and workers around an app built by ``factory`` in each worker."""

    def __init__(self, factory: Callable[[], Any], options: dict[str, Any]) -> None:
        self._factory = factory
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            if key in OPTIONAL_SETTINGS and key not in self.cfg.settings:
                continue
            if value is not None or key in ("accesslog",):
                self.cfg.set(key, value)

    def load(self) -> Any:
        return self._factory()


def run_gunicorn(factory: Callable[[], Any], options: dict[str, Any]) -> None:
    EmbeddedGunicorn(factory, options).run()
