"""Admission scheduling as WSGI middleware, for stock gunicorn's ``gthread`` worker
(``server.worker: gthread``).

The same ``Scheduler`` decides as in the project's worker (``webhook.server.scheduling``):
reviews and tools take an evaluation slot (``overload.app_concurrency``,
``overload.auxiliary_concurrency``), scrapes a scrape slot, probes none; a review is refused
with a 503 when it could not be answered before the API server's deadline or when
``overload.max_waiting_requests`` are waiting, and a review whose wait for a slot used up its
deadline is refused instead of evaluated. The refusals happen here, in the handler (as
Gatekeeper caps concurrency inside its handler), once gthread has given the request a thread
and parsed it: what the project's worker does in its poller before any of that, this cannot.

Reviews over ``overload.large_body_bytes`` take the large reviews' lane, by their Content-Length,
as in the project's worker. Reviews are never evaluated inline (there is no poller here): ``overload.inline_admission``
does not apply. A body with a Content-Length within ``server.max_body_bytes`` is read into
memory before the request asks for a slot, so a slow sender holds a thread but not a slot.
A review waits for its slot on its gthread thread, never longer than its deadline; while it
waits, that thread serves nothing else: probes and scrapes share ``server.threads`` with the
reviews waiting (docs/operations.md, "The stock worker").
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from webhook.http import deadline
from webhook.http.deadline import timeout_parameter
from webhook.http.errors import error_body
from webhook.http.gunicorn_adapter import MALFORMED_BODY
from webhook.http.routing import RouteTable, Work, route_table
from webhook.server.scheduling import Route, Scheduler
from webhook.server.tallies import attach_tallies
from webhook.settings import OverloadSettings

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
_ENCODE = msgspec.json.Encoder().encode
_STATUS = {400: "400 Bad Request", 503: "503 Service Unavailable"}


class _Ticket:
    """A request waiting on its thread for a slot: granted (``refusal`` None) or refused."""

    __slots__ = ("event", "refusal")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.refusal: str | None = None


class SchedulingMiddleware:
    """See the module doc. ``app`` is the webhook's Flask app (its route table, metrics and
    telemetry are in ``app.extensions``, as the project's worker reads them); ``routes``, when
    given, is the route table of an app built otherwise."""

    def __init__(self, app: Any, limits: OverloadSettings, max_body_bytes: int,
                 routes: RouteTable | None = None) -> None:
        self._app: WsgiApp = app
        self._routes = routes if routes is not None else route_table(app)
        self._limits = limits
        self._max_body_bytes = max_body_bytes
        self._lock = threading.Lock()  # the scheduler is not thread-safe: every call holds this
        self.scheduler: Scheduler[_Ticket] = Scheduler(limits)
        self.counts, self._shedding = attach_tallies(app, self.scheduler, self._routes)

    @property
    def app(self) -> WsgiApp:
        return self._app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        work = self._routes.work_of(environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""))
        if work is Work.PROBE:
            return self._app(environ, start_response)
        length = environ.get("CONTENT_LENGTH") or ""
        work = self.scheduler.lane(work, int(length) if length.isdigit() else None)
        if not _read_body(environ, self._max_body_bytes):
            return _answer(start_response, 400, "malformed request body: it ended before its Content-Length")
        query = environ.get("QUERY_STRING", "")
        timeout = timeout_parameter(query) if query else None
        path = environ.get("PATH_INFO", "")
        ticket = _Ticket()
        with self._lock:
            arrived = time.monotonic()
            why = self.scheduler.refusal(work, timeout, arrived)
            route = self.scheduler.arrive(ticket, work, timeout, arrived, inline=False) if why is None else None
        if why is not None:
            return self._refuse(start_response, path, self.scheduler.reason(why, timeout))
        if route is Route.QUEUED and not self._granted(ticket, work, timeout):
            return self._refuse(start_response, path, ticket.refusal or "")
        started = time.monotonic()
        self.counts.queue_wait(started - arrived)
        try:
            answer = self._app(environ, start_response)
            try:
                return list(answer)  # built within the slot; gthread writes it after
            finally:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
        finally:
            self._finished(work, started)

    def _granted(self, ticket: _Ticket, work: Work, timeout: str | None) -> bool:
        """Wait for a slot; False when refused instead. A review waits at most until its
        deadline; tools and scrapes until their turn (as in the project's worker)."""
        if work is not Work.REVIEW and work is not Work.LARGE_REVIEW:
            ticket.event.wait()
            return True
        budget = deadline.budget_seconds(timeout, self._limits)
        if ticket.event.wait(budget):
            return ticket.refusal is None
        with self._lock:
            withdrawn = self.scheduler.withdraw(ticket)
        if withdrawn:
            ticket.refusal = self.scheduler.late_reason(budget, timeout)
            return False
        ticket.event.wait()  # granted or refused in the meantime: it is set already, or about to be
        return ticket.refusal is None

    def _finished(self, work: Work, started: float) -> None:
        with self._lock:
            now = time.monotonic()
            self.scheduler.finished(work, now - started, now, in_thread=True)
            granted, refused = self.scheduler.grants(now)
        for ticket, _ in granted:
            ticket.event.set()
        for refusal in refused:
            refusal.item.refusal = refusal.reason
            refusal.item.event.set()

    def _refuse(self, start_response: StartResponse, path: str, reason: str) -> list[bytes]:
        with self._lock:
            self._shedding.tally(path)
            self._shedding.flush()
        return _answer(start_response, 503, reason)


def _read_body(environ: dict[str, Any], limit: int) -> bool:
    """Read a Content-Length body within ``limit`` into memory; False when it ends short.
    (Others are the app's: a 413 over the limit, a chunked body read as it comes.)"""
    length = environ.get("CONTENT_LENGTH") or ""
    if not length.isdigit() or not 0 < int(length) <= limit:
        return True
    try:
        body = environ["wsgi.input"].read(int(length))
    except MALFORMED_BODY:
        return False
    environ["wsgi.input"] = io.BytesIO(body)
    return len(body) == int(length)


def _answer(start_response: StartResponse, status: int, reason: str) -> list[bytes]:
    body = _ENCODE(error_body(status, reason))
    start_response(_STATUS[status], [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
