"""Reading a JSON request body Kubernetes sent: size limits before reading (``webhook.http.body``),
JSON as Go encoded it (``webhook.documents.strict_json``), and a gate that bounds how many huge
bodies decode at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from werkzeug.exceptions import ServiceUnavailable

from webhook.documents.strict_json import JsonBodyError, decode_kubernetes_json
from webhook.http.body import BodyError, read_body

__all__ = ["BadRequest", "JsonBodyError", "LargeBodyGate", "Overloaded", "decode_kubernetes_json", "read_json_body"]


class BadRequest(ValueError):
    """Input the server refuses with a 400 and a JSON reason."""


class Overloaded(ServiceUnavailable):
    """Refused without evaluation because the server is at capacity (HTTP 503)."""


class LargeBodyGate:
    """At most ``concurrency`` bodies over ``threshold`` bytes are decoded at a time.

    A decoded JSON body can be twenty times its size in Python objects; without the gate a
    burst of 4 MiB bodies would multiply that by the thread count.
    """

    def __init__(self, threshold: int, concurrency: int, wait_seconds: float) -> None:
        self.threshold = threshold
        self._slots = threading.BoundedSemaphore(concurrency)
        self._wait = wait_seconds

    @contextmanager
    def admit(self, size: int) -> Iterator[None]:
        if size <= self.threshold:
            yield
            return
        if not self._slots.acquire(timeout=self._wait):
            raise Overloaded(f"gpushare-webhook is busy decoding other large bodies: a {size}-byte body waited "
                             f"{self._wait:g} s for a slot; retry, or send a body under {self.threshold} bytes")
        try:
            yield
        finally:
            self._slots.release()


def read_json_body(environ: dict[str, Any], max_bytes: int, gate: LargeBodyGate | None = None) -> Any:
    """The body of the request in ``environ`` (an AdmissionReview from the API server, extender arguments from
    kube-scheduler) decoded as JSON Go encoded (``decode_kubernetes_json``: no duplicate-key
    check, else strict), or BadRequest / RequestEntityTooLarge (or 503 from ``gate`` when too
    many large bodies are being decoded already). Chunked bodies are bounded too
    (``webhook.http.body.read_body``)."""
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
