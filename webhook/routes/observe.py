"""One place that turns an answered (or refused) request into metrics and one log line.

Rule ids come from the response's auditAnnotations, so audit, metrics and logs cannot
disagree. Object bodies are never logged. A request thread only picks out the few fields
it needs; counting and formatting run in the telemetry thread (webhook.http.telemetry).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flask import Response

from webhook.http.errors import error_response, json_response
from webhook.http.logs import RequestLog
from webhook.http.metrics import Metrics, outcome_for_status
from webhook.http.telemetry import Telemetry
from webhook.routes.review import AdmissionReview

MAX_REASON = 300


def _ids(notes: dict[str, str], key: str) -> list[str]:
    value = notes.get(key, "")
    return value.split(",") if value else []


def _object_name(review: AdmissionReview) -> str:
    request = review.request
    meta = (request.object or request.old_object or {}).get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name") or request.name
    if not name and isinstance(meta.get("generateName"), str):
        name = meta["generateName"] + "*"
    name = name if isinstance(name, str) else ""
    return f"{request.namespace}/{name}" if request.namespace else name


def _review_fields(review: AdmissionReview | None) -> dict[str, Any]:
    if review is None:
        return {}
    request = review.request
    return {"uid": request.uid, "kind": request.kind.kind, "namespace": request.namespace,
            "object": _object_name(review), "operation": request.operation,
            "user": request.user_info.username, "dry_run": request.dry_run}


class Observer:
    def __init__(self, metrics: Metrics, request_log: RequestLog | None, telemetry: Telemetry) -> None:
        self.metrics = metrics
        self.request_log = request_log
        self.telemetry = telemetry

    def answered(self, endpoint: str, review: AdmissionReview, body: dict[str, Any], seconds: float) -> None:
        """An AdmissionReview answer was sent."""
        response = body["response"]
        self.telemetry.call(self._answered, endpoint, _review_fields(review), response["allowed"],
                            response.get("auditAnnotations", {}), seconds, time.time())

    def _answered(self, endpoint: str, fields: dict[str, Any], allowed: bool, notes: dict[str, str],
                  seconds: float, when: float) -> None:
        denied, warned, patched = _ids(notes, "denied"), _ids(notes, "warned"), _ids(notes, "patched")
        exempted = _ids(notes, "exempted")
        decision = "allowed" if allowed else "denied"
        self.metrics.count_request(endpoint, fields["kind"], fields["operation"], decision, seconds)
        self.metrics.count_rules(denied, warned, patched)
        if exempted:
            self.metrics.count_exemptions(exempted, fields["namespace"])
        if self.request_log is not None and self.request_log.enabled():
            line = {"message": "admission", "endpoint": endpoint, **fields,
                    "decision": decision, "rules": _ids(notes, "rules"), "denied": denied,
                    "warned": warned, "patched": patched, "status": 200,
                    "duration_ms": round(seconds * 1000, 3)}
            if exempted:  # every honoured exemption is visible: ids, on whose word, the reason
                line.update(exempted=exempted, exempted_by=_ids(notes, "exempted_by"),
                            exemption_reason=notes.get("exemption_reason", "")[:MAX_REASON])
            self.request_log.write(line, when)

    def served(self, endpoint: str, seconds: float) -> None:
        """/dry-run or a scheduler extender call was answered (outcome ``ok``)."""
        self.telemetry.call(self._served, endpoint, seconds, time.time())

    def _served(self, endpoint: str, seconds: float, when: float) -> None:
        self.metrics.count_request(endpoint, "", "", "ok", seconds)
        if self.request_log is not None and self.request_log.enabled():
            self.request_log.write({"message": "request", "endpoint": endpoint, "decision": "ok", "status": 200,
                                    "duration_ms": round(seconds * 1000, 3)}, when)

    def refused(self, endpoint: str, status: int, reason: str, seconds: float | None = None,
                review: AdmissionReview | None = None) -> None:
        """The request got an HTTP error instead of an answer."""
        self.telemetry.call(self._refused, endpoint, status, reason[:MAX_REASON], seconds, _review_fields(review),
                            time.time())

    def _refused(self, endpoint: str, status: int, reason: str, seconds: float | None, fields: dict[str, Any],
                 when: float) -> None:
        outcome = outcome_for_status(status)
        self.metrics.count_request(endpoint, fields.get("kind", ""), fields.get("operation", ""), outcome, seconds)
        if self.request_log is not None and self.request_log.enabled():
            line: dict[str, Any] = {"message": "admission", "endpoint": endpoint, **fields,
                                    "decision": outcome, "status": status, "reason": reason}
            if seconds is not None:
                line["duration_ms"] = round(seconds * 1000, 3)
            self.request_log.write(line, when)


class Refusal(Exception):
    """A route's answer is an HTTP error with a JSON reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def observed(observer: Observer, endpoint: str, route: Callable[[], Any]) -> Callable[[], Response]:
    """A view for a route without an allow/deny decision (/dry-run, the scheduler extender):
    ``route`` returns a JSON-able answer or raises Refusal; either way it is counted and logged."""

    def view() -> Response:
        started = time.perf_counter()
        try:
            body = route()
        except Refusal as refusal:
            observer.refused(endpoint, refusal.status, refusal.reason, time.perf_counter() - started)
            return error_response(refusal.status, refusal.reason)
        observer.served(endpoint, time.perf_counter() - started)
        return json_response(body)

    return view


def admission_kinds() -> frozenset[str]:
    """Kinds worth their own metric label: those the rules and mutations look at."""
    from policies.model.resources import POD_SPEC_PATHS
    from policies.model.workloads import BUILT_IN
    from policies.rules.base import REGISTRY

    return (frozenset(POD_SPEC_PATHS) | {k for r in REGISTRY.values() for k in r.kinds} | {"Node", "Binding"}
            | {k.kind for k in BUILT_IN})
