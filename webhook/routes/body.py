"""Reading a request body Kubernetes sent: size limits before reading, JSON, large bodies through a gate."""

from __future__ import annotations

from typing import Any

from webhook.server.body import BodyError, read_body
from webhook.server.jsonbody import JsonBodyError, LargeBodyGate, decode_kubernetes_json


class BadRequest(ValueError):
    """Input the server refuses with a 400 and a JSON reason."""


def read_json_body(environ: dict[str, Any], max_bytes: int, gate: LargeBodyGate | None = None) -> Any:
    """The body of the request in ``environ`` (an AdmissionReview from the API server, extender arguments from
    kube-scheduler) decoded as JSON Go encoded (``decode_kubernetes_json``: no duplicate-key
    check, else strict), or BadRequest / RequestEntityTooLarge (or 503 from ``gate`` when too
    many large bodies are being decoded already). Chunked bodies are bounded too
    (``webhook.server.body.read_body``)."""
    try:
        raw = read_body(environ, max_bytes)
    except BodyError as exc:
        raise BadRequest(str(exc)) from None
    if not raw:
        raise BadRequest("empty body; send an AdmissionReview as JSON")
    try:
        if gate is None or len(raw) <= gate.threshold:
            return decode_kubernetes_json(raw)
        with gate.admit(len(raw)):
            return decode_kubernetes_json(raw)
    except JsonBodyError as exc:
        raise BadRequest(str(exc)) from None
