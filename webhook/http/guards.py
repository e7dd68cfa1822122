"""The guards every request to the webhook runs, in one order, on both of its pipelines: the Flask
app's (``install``: a before-request hook and the error handlers) and the plain-WSGI review
endpoints' (``webhook.routes.admission``, which call ``before`` and ``error`` themselves).

``GUARD_ORDER`` is the order, and the chain ``create_app`` builds (``guard_chain``) holds one guard
of each in it:

1. listener split: a path asked for on the listener that does not serve it is a 404, before
   anything else (not a 401: the client is at the wrong port, not unknown);
2. auth: the configured client-certificate and bearer-token guards, by path;
3. body limit: a body over ``server.max_body_bytes`` is a 413 that names the limit (the body
   readers raise it: ``webhook.http.body``, ``webhook.http.jsonbody``);
4. metrics: every refusal the chain answers is counted and logged (the endpoint's own label from
   the route table, else "other");
5. errors: any other exception is a JSON answer, never an HTML page or a traceback (an HTTP
   error with its own words; anything else a logged 500).

A guard refuses in ``before`` (a Response) or answers an exception in ``error``; ``refused``
hears every refusal the chain answers. ``tests/server/test_guards.py`` proves both pipelines run this
chain's steps in this order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from webhook.http.auth import Guards, denial
from webhook.http.errors import error_response
from webhook.http.listeners import listener_denial
from webhook.http.routing import RouteTable
from webhook.settings import ServerSettings

log = logging.getLogger("gpushare.webhook")
Environ = dict[str, Any]
GUARD_ORDER = ("listener split", "auth", "body limit", "metrics", "errors")


class Guard:
    """One step of the chain; by default it lets everything through and answers nothing."""

    name = ""

    @property
    def active(self) -> bool:
        """Whether ``before`` can refuse anything (an inactive guard costs a request nothing)."""
        return type(self).before is not Guard.before

    def before(self, path: str, environ: Environ) -> Response | None:
        """A refusal of the request, or None to let it go on."""
        return None

    def error(self, path: str, environ: Environ, exc: Exception, log: logging.Logger) -> Response | None:
        """The answer to ``exc`` raised while serving the request, or None to leave it to the next
        (``log``: the pipeline's logger)."""
        return None

    def refused(self, path: str, status: int, reason: str) -> None:
        """The chain answered the request with an error."""


class ListenerSplit(Guard):
    name = "listener split"

    def __init__(self, server: ServerSettings) -> None:
        self._server = server

    @property
    def active(self) -> bool:
        return self._server.ops_port is not None

    def before(self, path: str, environ: Environ) -> Response | None:
        return listener_denial(self._server, path, environ)


class Authentication(Guard):
    name = "auth"

    def __init__(self, guards: Guards) -> None:
        self._guards = guards

    @property
    def active(self) -> bool:
        return bool(self._guards)

    def before(self, path: str, environ: Environ) -> Response | None:
        return denial(self._guards, path, environ)


class BodyLimit(Guard):
    name = "body limit"

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def error(self, path: str, environ: Environ, exc: Exception, log: logging.Logger) -> Response | None:
        if isinstance(exc, RequestEntityTooLarge):
            return error_response(413, f"body larger than {self.max_bytes} bytes")
        return None


class RefusalMetrics(Guard):
    """Counts and logs each refusal under its endpoint's label (``count``: label, status, reason)."""

    name = "metrics"

    def __init__(self, table: RouteTable, count: Callable[[str, int, str], None]) -> None:
        self._table = table
        self._count = count

    def refused(self, path: str, status: int, reason: str) -> None:
        self._count(self._table.endpoint_label(path), status, reason)


class JsonErrors(Guard):
    name = "errors"

    def error(self, path: str, environ: Environ, exc: Exception, log: logging.Logger) -> Response | None:
        if isinstance(exc, HTTPException):
            return error_response(exc.code or 500, exc.description or exc.name)
        log.exception("unhandled error on %s %s", environ.get("REQUEST_METHOD"), path)
        return error_response(500, f"internal error: {type(exc).__name__}")


class GuardChain:
    """The guards, in order; what both pipelines run."""

    def __init__(self, guards: tuple[Guard, ...]) -> None:
        self.guards = guards
        self._befores = tuple(g for g in guards if g.active)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.guards)

    def before(self, path: str, environ: Environ) -> Response | None:
        """The first refusal of the guards, in order (counted by every guard), or None."""
        for guard in self._befores:
            refusal = guard.before(path, environ)
            if refusal is not None:
                self.refused(path, refusal.status_code, refusal.get_json()["error"]["reason"])
                return refusal
        return None

    def error(self, path: str, environ: Environ, exc: Exception, log: logging.Logger = log) -> Response:
        """The first guard's answer to ``exc`` (the errors guard answers every one), counted; ``log``
        is where an error of ours is logged (the review endpoints log on gpushare.admission)."""
        for guard in self.guards:
            answer = guard.error(path, environ, exc, log)
            if answer is not None:
                self.refused(path, answer.status_code, answer.get_json()["error"]["reason"])
                return answer
        raise exc

    def refused(self, path: str, status: int, reason: str) -> None:
        """Tell every guard of a refusal (an endpoint's own, such as a 405, included)."""
        for guard in self.guards:
            guard.refused(path, status, reason)


def guard_chain(server: ServerSettings, guards: Guards, table: RouteTable,
                count: Callable[[str, int, str], None]) -> GuardChain:
    """The chain, in ``GUARD_ORDER``."""
    return GuardChain((ListenerSplit(server), Authentication(guards), BodyLimit(server.max_body_bytes),
                       RefusalMetrics(table, count), JsonErrors()))


def install(app: Flask, chain: GuardChain) -> None:
    """Run ``chain`` on every request the Flask app serves: its before steps first, its error
    steps for whatever a view raises (Flask's routing 404 and 405 included)."""

    def before() -> Response | None:
        return chain.before(request.path, request.environ)

    def error(exc: Exception) -> Response:
        return chain.error(request.path, request.environ, exc)

    app.before_request(before)
    app.register_error_handler(HTTPException, error)
    app.register_error_handler(Exception, error)
