"""Flask app factory: routes, body limits and JSON errors. Policy lives in ``policies``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from policies.assume import PlacementLedger
from policies.cluster import ClusterState
from policies.engine import Engine
from policies.settings import Settings

from .admission import Mode, answer_review
from .review import ReviewError, parse_review

log = logging.getLogger("gpushare.webhook")


class BadRequest(ValueError):
    """Input the server refuses with a 400 and a JSON reason."""


@dataclass
class Services:
    """What the routes need, built once per process."""

    settings: Settings
    engine: Engine
    state: ClusterState | None
    ready: Callable[[], bool] = field(default=lambda: True)
    state_source: str = "none"
    # Admission side effects (the assume-cache); None where nothing may be recorded.
    ledger: PlacementLedger | None = None
    # Run in the serving process before it answers (threads do not survive gunicorn's fork).
    start: Callable[[], None] = field(default=lambda: None)


def _json(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload, separators=(",", ":")), status=status, mimetype="application/json")


def error_response(status: int, reason: str) -> Response:
    return _json({"error": {"code": status, "reason": reason}}, status)


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


def read_json_body(max_bytes: int) -> Any:
    """The request body decoded as JSON, or BadRequest / RequestEntityTooLarge."""
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
        return json.loads(raw)
    except UnicodeDecodeError as exc:
        raise BadRequest(f"body is not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise BadRequest(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise BadRequest("JSON nested too deeply") from None


def create_app(services: Services) -> Flask:
    """The webhook WSGI app over the given services."""
    app = Flask("gpushare-webhook")
    app.config["MAX_CONTENT_LENGTH"] = services.settings.server.max_body_bytes
    app.extensions["gpushare"] = services
    max_bytes = services.settings.server.max_body_bytes

    def review_route(mode: Mode) -> Response:
        try:
            review = parse_review(read_json_body(max_bytes))
            return _json(answer_review(review, services.engine, services.state, mode, services.ledger))
        except (BadRequest, ReviewError) as exc:
            return error_response(400, str(exc))

    app.add_url_rule("/mutate", "mutate", lambda: review_route("mutate"), methods=["POST"])
    app.add_url_rule("/validate", "validate", lambda: review_route("validate"), methods=["POST"])

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
        return error_response(exc.code or 500, reason)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, f"internal error: {type(exc).__name__}")

    return app
