"""Strict JSON for request bodies, and a gate that bounds how many huge bodies decode at once.

Kubernetes sends UTF-8 JSON that Go encoded: no duplicate keys, no NaN/Infinity, numbers of
sane length. Anything else is refused with a reason, before it reaches a model or a rule.

Two paths give the same answer. The fast one decodes with msgspec and accepts the result only
if encoding it again reproduces the body byte for byte: identical bytes parse identically, and
an encoding of a dict never repeats a key, so the body had none either. Compact bodies (what
the API server sends) take it; anything else (pretty-printed, escaped differently, invalid)
goes through the strict decoder, which finds duplicates and words the error.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
from werkzeug.exceptions import ServiceUnavailable


class JsonBodyError(ValueError):
    """The body is not strict UTF-8 JSON; the message says why (an HTTP 400)."""


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _no_constant(name: str) -> Any:
    raise JsonBodyError(f"{name} is not a JSON value")


# One decoder for all requests: building one per call costs more than the duplicate-key check.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_no_constant)


_FAST_DECODER = msgspec.json.Decoder()
_FAST_ENCODER = msgspec.json.Encoder()
_UNSURE = object()
_TRAILING_WHITESPACE = b" \t\r\n"


def _decode_canonical(raw: bytes) -> Any:
    """``raw`` decoded if it is exactly the compact encoding of its value, else ``_UNSURE``."""
    try:
        value = _FAST_DECODER.decode(raw)
        encoded = _FAST_ENCODER.encode(value)
    except (msgspec.MsgspecError, RecursionError, ValueError):
        return _UNSURE
    # Go's json.Encoder ends the document with a newline.
    if raw.startswith(encoded) and not raw[len(encoded):].strip(_TRAILING_WHITESPACE):
        return value
    return _UNSURE


def decode_json(raw: bytes) -> Any:
    """``raw`` decoded as strict JSON, or JsonBodyError."""
    value = _decode_canonical(raw)
    if value is not _UNSURE:
        return value
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonBodyError(f"body is not UTF-8 (byte {exc.start})") from None
    try:
        return _DECODER.decode(text)
    except _DuplicateKey as exc:
        key = json.dumps(exc.key[:80])
        raise JsonBodyError(f"duplicate key {key} in a JSON object; each key may appear once") from None
    except json.JSONDecodeError as exc:
        raise JsonBodyError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise JsonBodyError("JSON nested too deeply") from None
    except JsonBodyError:
        raise
    except ValueError:  # int() refuses numbers longer than sys.get_int_max_str_digits()
        raise JsonBodyError(f"a number in the body has more than {sys.get_int_max_str_digits()} digits") from None


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
