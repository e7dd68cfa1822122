"""A gate that bounds how many huge bodies decode at once; the decoders themselves are
``webhook.documents.strict_json`` (re-exported here for the routes)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from werkzeug.exceptions import ServiceUnavailable

from webhook.documents.strict_json import JsonBodyError, decode_kubernetes_json

__all__ = ["JsonBodyError", "LargeBodyGate", "Overloaded", "decode_kubernetes_json"]


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
