"""Reading a request body: size limits before reading, strict JSON, large bodies through a gate."""

from __future__ import annotations

from typing import Any

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge

from webhook.server.jsonbody import JsonBodyError, LargeBodyGate, decode_json


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
