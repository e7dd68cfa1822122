"""What the server counts and logs outside the app: refusals under overload, slow clients,
evicted connections, queue waits. Every update runs in the telemetry thread
(``webhook.http.telemetry``), never on the path of a request."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from webhook.http.errors import error_body
from webhook.http.metrics import Metrics
from webhook.http.routing import RouteTable
from webhook.http.telemetry import Telemetry
from webhook.server.connection import http_json

log = logging.getLogger("gpushare.worker")


class Counts:
    """Metrics updates, deferred to the telemetry thread; nothing without the app's metrics."""

    def __init__(self, metrics: Metrics | None, telemetry: Telemetry | None, routes: RouteTable | None = None) -> None:
        self.metrics = metrics
        self.routes = routes if routes is not None else RouteTable()  # the endpoints' metrics labels
        self._telemetry = telemetry

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        if self._telemetry is not None:
            self._telemetry.call(fn, *args)

    def client_timeout(self, stage: str) -> None:
        if self.metrics is not None:
            self._call(self.metrics.client_timeouts.labels(stage).inc)

    def evicted(self, kind: str) -> None:
        if self.metrics is not None:
            self._call(self.metrics.evicted.labels(kind).inc)

    def refused(self, path: str, outcome: str) -> None:
        """A request answered before the app saw it (``invalid``, ``too_large``, ``error``)."""
        if self.metrics is not None:
            self._call(self.metrics.count_request, self.routes.endpoint_label(path), "", "", outcome, None)

    def queue_wait(self, seconds: float) -> None:
        if self.metrics is not None:
            self._call(self.metrics.queue_wait.observe, seconds)

    def overloaded(self, by_endpoint: dict[str, int]) -> None:
        if self.metrics is not None:
            self._call(self.metrics.count_overloaded, by_endpoint)


class Shedding:
    """Refusals under overload: their prepared answers, counted in bulk, logged once per 5 s.

    Counted in /metrics once per ``flush`` (the poller flushes once per turn), not once each:
    under sustained overload a telemetry call per refusal was a tenth of a refusal's cost. A
    log line per refusal would add to the overload: one warning per 5 s says how many."""

    LOG_EVERY_SECONDS = 5.0

    def __init__(self, counts: Counts, reason: Callable[[str, str | None], str]) -> None:
        self._counts = counts
        self._reason = reason  # the words of a refusal, from why and the API server's ?timeout=
        self._answers: dict[tuple[str, str | None, bool], bytes] = {}
        self._by_path: dict[str, int] = {}
        self._since_log = 0
        self._logged_at = 0.0

    def answer(self, why: str, timeout: str | None, *, close: bool) -> bytes:
        """The prepared 503 for a refusal; one per reason, deadline and Connection header."""
        key = (why, timeout, close)
        answer = self._answers.get(key)
        if answer is None:
            answer = http_json(503, error_body(503, self._reason(why, timeout)), close=close)
            if len(self._answers) < 512:
                self._answers[key] = answer
        return answer

    def tally(self, path: str) -> None:
        self._by_path[path] = self._by_path.get(path, 0) + 1

    def pending(self) -> bool:
        return bool(self._by_path)

    def flush(self) -> None:
        refusals, self._by_path = self._by_path, {}
        by_endpoint: dict[str, int] = {}
        for path, count in refusals.items():
            label = self._counts.routes.endpoint_label(path)
            by_endpoint[label] = by_endpoint.get(label, 0) + count
        if by_endpoint:
            self._counts.overloaded(by_endpoint)
        self._since_log += sum(refusals.values())
        now = time.monotonic()
        if self._since_log and now - self._logged_at >= self.LOG_EVERY_SECONDS:
            log.warning("overloaded: refused %d requests that could not be answered before their deadline "
                        "or found the waiting room full", self._since_log)
            self._since_log, self._logged_at = 0, now


def attach_tallies(app: Any, scheduler: Any, routes: RouteTable) -> tuple[Counts, Shedding]:
    """The counts and shedding of a worker (ours or gthread's middleware) serving ``app`` (whose
    endpoints are ``routes``), and the scheduler's gauges (waiting, evaluating, the review-time
    estimate) read by the app's metrics."""
    extensions = getattr(app, "extensions", {})
    metrics = extensions.get("gpushare.metrics")
    counts = Counts(metrics, extensions.get("gpushare.telemetry"), routes)
    if metrics is not None:
        metrics.waiting.set_function(scheduler.waiting)
        metrics.in_flight.set_function(lambda: scheduler.evaluating)
        metrics.review_estimate.set_function(lambda: scheduler.estimate.seconds(time.monotonic()))
    return counts, Shedding(counts, scheduler.reason)
