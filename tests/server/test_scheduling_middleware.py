"""Admission scheduling as WSGI middleware (server.worker: gthread), without sockets: requests on
threads of their own, as gthread runs them, against an app that holds its slot until told."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pytest

from tests.support.helpers import wait_until
from webhook.http.routing import RouteTable, Work
from webhook.server.scheduling_middleware import SchedulingMiddleware
from webhook.settings import OverloadSettings

ROUTES = RouteTable()  # the held app's route table (create_app builds the webhook's)
REVIEW = ROUTES.declare("/test-middleware/review", Work.REVIEW, ["POST"])
TOOL = ROUTES.declare("/test-middleware/tool", Work.TOOL, ["POST"])


class HeldApp:
    """A WSGI app whose answers wait for ``release``: it says what it evaluated, and the body it read."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[str] = []
        self.bodies: list[bytes] = []

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        self.started.append(environ["QUERY_STRING"])
        self.bodies.append(environ["wsgi.input"].read())
        if environ["PATH_INFO"] != "/healthz":
            assert self.release.wait(30)
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b"{}"]


def _environ(path: str, query: str = "", body: bytes = b"{}", length: int | None = None) -> dict[str, Any]:
    return {"REQUEST_METHOD": "POST" if path != "/healthz" else "GET", "PATH_INFO": path, "QUERY_STRING": query,
            "CONTENT_LENGTH": str(len(body) if length is None else length), "wsgi.input": io.BytesIO(body)}


def _call(middleware: SchedulingMiddleware, environ: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    status: list[str] = []
    body = b"".join(middleware(environ, lambda s, headers: status.append(s)))
    return status[0], json.loads(body) if body else None


@pytest.fixture
def one_slot():
    """One review slot, one tool slot; a review without ?timeout= may wait 1 - 0.5 - 0.25 = 0.25 s."""
    app = HeldApp()
    limits = OverloadSettings(app_concurrency=1, auxiliary_concurrency=1, default_timeout_seconds=1)
    middleware = SchedulingMiddleware(app, limits, max_body_bytes=1024 * 1024, routes=ROUTES)
    with ThreadPoolExecutor(8) as pool:
        yield app, middleware, pool
        app.release.set()


def _send(pool: ThreadPoolExecutor, middleware: SchedulingMiddleware, environ: dict[str, Any]) -> Future:
    return pool.submit(_call, middleware, environ)


def test_a_review_waits_for_the_slot_and_gets_it_when_the_one_ahead_ends(one_slot):
    app, middleware, pool = one_slot
    first = _send(pool, middleware, _environ(REVIEW, "timeout=30s&n=1"))
    wait_until(lambda: app.started == ["timeout=30s&n=1"], what="the first review evaluating")
    second = _send(pool, middleware, _environ(REVIEW, "timeout=30s&n=2", body=b'{"second": 1}'))
    wait_until(lambda: middleware.scheduler.waiting() == 1, what="the second review waiting")
    assert _call(middleware, _environ("/healthz"))[0] == "200 OK"  # a probe takes no slot
    assert app.started == ["timeout=30s&n=1", ""]
    app.release.set()
    assert first.result(30)[0] == second.result(30)[0] == "200 OK"
    assert app.bodies[-1] == b'{"second": 1}'  # read before its wait, handed to the app whole
    assert middleware.scheduler.evaluating == 0 and middleware.scheduler.waiting() == 0


def test_a_review_whose_deadline_passes_while_it_waits_is_refused_and_never_evaluated(one_slot):
    app, middleware, pool = one_slot
    holder = _send(pool, middleware, _environ(REVIEW, "timeout=60s"))
    wait_until(lambda: app.started, what="the slot taken")
    status, body = _call(middleware, _environ(REVIEW, "timeout=1s"))  # waits 0.25 s at most
    assert status == "503 Service Unavailable"
    assert body is not None and "this review waited 0.25 s" in body["error"]["reason"]
    assert middleware.scheduler.waiting() == 0  # withdrawn: no slot will be given to it later
    app.release.set()
    assert holder.result(30)[0] == "200 OK"
    assert app.started == ["timeout=60s"]


def test_a_review_that_cannot_meet_its_deadline_is_refused_at_once(one_slot):
    app, middleware, pool = one_slot
    _send(pool, middleware, _environ(REVIEW, "timeout=60s"))
    wait_until(lambda: app.started, what="the slot taken")
    _send(pool, middleware, _environ(REVIEW, "timeout=60s&queued"))
    wait_until(lambda: middleware.scheduler.waiting() == 1, what="a review waiting")
    wait_until(lambda: _call(middleware, _environ(REVIEW, "timeout=1s"))[0] == "503 Service Unavailable",
               what="the oldest waiting review past what timeout=1s allows")
    assert middleware.scheduler.waiting() == 1  # refused at the door: it never waited


def test_a_tool_waits_for_its_turn_past_any_review_deadline(one_slot):
    """Tools (dry runs, the extender) are not API server calls: no deadline ends their wait."""
    app, middleware, pool = one_slot
    _send(pool, middleware, _environ(TOOL, "first"))
    wait_until(lambda: app.started == ["first"], what="the tool slot taken")
    waiting = _send(pool, middleware, _environ(TOOL, "second"))
    wait_until(lambda: middleware.scheduler.waiting() == 1, what="the second tool waiting")
    with pytest.raises(FutureTimeout):  # four times what a review without ?timeout= may wait
        waiting.result(1.0)
    app.release.set()
    assert waiting.result(30)[0] == "200 OK" and app.started == ["first", "second"]


def test_a_body_shorter_than_its_length_is_a_400_without_a_slot(one_slot):
    app, middleware, _ = one_slot
    status, body = _call(middleware, _environ(REVIEW, body=b'{"a":', length=100))
    assert status == "400 Bad Request" and body is not None and "before its Content-Length" in body["error"]["reason"]
    assert app.started == [] and middleware.scheduler.evaluating == 0
