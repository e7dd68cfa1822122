"""Flask app factory: routes, body limits and JSON errors. Policy lives in ``policies``."""

from __future__ import annotations

import logging
import time
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from webhook.routes.admission import Mode, answer_review
from webhook.routes.observe import Observer, admission_kinds
from webhook.routes.ops import register_ops_routes
from webhook.routes.review import AdmissionReview, ReviewError, parse_review
from webhook.routes.scoring import register_scoring_routes
from webhook.routes.services import Services
from webhook.server.auth import install_auth
from webhook.server.deadline import budget_seconds
from webhook.server.http_errors import error_response
from webhook.server.http_errors import json_response as _json
from webhook.server.jsonbody import JsonBodyError, LargeBodyGate, decode_json
from webhook.server.logs import RequestLog
from webhook.server.metrics import Metrics, endpoint_label
from webhook.server.telemetry import Telemetry

log = logging.getLogger("gpushare.webhook")


class BadRequest(ValueError):
    """Input the server refuses with a 400 and a JSON reason."""


def _drain(limit: int) -> None:
    """Read and drop a refused body (up to ``limit`` bytes) so the client can read our 413
    instead of a reset; past the limit gunicorn simply closes the connection."""
    stream = request.environ.get("wsgi.input")
    length = request.content_length or 0
    if stream is None or length > limit:
        return
    while length > 0:
        chunk = stream.read(min(length, 65536))
        if not chunk:
            return
        length -= len(chunk)


def read_json_body(max_bytes: int, gate: LargeBodyGate | None = None) -> Any:
    """The request body decoded as strict JSON, or BadRequest / RequestEntityTooLarge (or 503 from
    ``gate`` when too many large bodies are being decoded already)."""
    length = request.content_length
    if length is not None and length > max_bytes:
        _drain(4 * max_bytes)
        raise RequestEntityTooLarge()
    if length is not None:
        # The hot path: read exactly Content-Length bytes from the server's stream.
        raw = request.environ["wsgi.input"].read(length)
    else:
        raw = request.get_data(cache=False)  # chunked: werkzeug enforces MAX_CONTENT_LENGTH
        if len(raw) > max_bytes:
            raise RequestEntityTooLarge()
    if not raw:
        raise BadRequest("empty body; send an AdmissionReview as JSON")
    try:
        if gate is None or len(raw) <= gate.threshold:
            return decode_json(raw)
        with gate.admit(len(raw)):
            return decode_json(raw)
    except JsonBodyError as exc:
        raise BadRequest(str(exc)) from None


def create_app(services: Services) -> Flask:
    """The webhook WSGI app over the given services."""
    app = Flask("gpushare-webhook")
    app.config["MAX_CONTENT_LENGTH"] = services.settings.server.max_body_bytes
    app.extensions["gpushare"] = services
    settings = services.settings
    max_bytes = settings.server.max_body_bytes
    metrics = Metrics(admission_kinds(), lambda: services.state_status)
    telemetry = Telemetry()
    metrics.before_scrape(telemetry.flush)
    # The worker counts what it refuses before the app runs through these too (webhook.server.worker).
    app.extensions["gpushare.metrics"] = metrics
    app.extensions["gpushare.telemetry"] = telemetry
    observer = Observer(metrics, RequestLog(settings.logging) if settings.logging.requests else None, telemetry)
    gate = LargeBodyGate(settings.overload.large_body_bytes, settings.overload.large_body_concurrency,
                         budget_seconds(None, settings.overload))
    install_auth(app, settings.auth, lambda status, reason: observer.refused(endpoint_label(request.path),
                                                                             status, reason))
    register_ops_routes(app, metrics)

    def review_route(mode: Mode) -> Response:
        started = time.perf_counter()
        review: AdmissionReview | None = None
        try:
            review = parse_review(read_json_body(max_bytes, gate))
            body = answer_review(review, services.engine, services.state, mode, services.ledger)
        except (BadRequest, ReviewError) as exc:
            observer.refused(mode, 400, str(exc), time.perf_counter() - started, review)
            return error_response(400, str(exc))
        observer.answered(mode, review, body, time.perf_counter() - started)
        return _json(body)

    app.add_url_rule("/mutate", "mutate", lambda: review_route("mutate"), methods=["POST"])
    app.add_url_rule("/validate", "validate", lambda: review_route("validate"), methods=["POST"])
    register_scoring_routes(app, services, lambda: read_json_body(max_bytes, gate), observer)

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        ready = services.ready()
        return _json({"ready": ready, "state": services.state_source}, 200 if ready else 503)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        reason = exc.description or exc.name
        if isinstance(exc, RequestEntityTooLarge):
            reason = f"body larger than {max_bytes} bytes"
        observer.refused(endpoint_label(request.path), exc.code or 500, reason)
        return error_response(exc.code or 500, reason)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        reason = f"internal error: {type(exc).__name__}"
        observer.refused(endpoint_label(request.path), 500, reason)
        return error_response(500, reason)

    return app
