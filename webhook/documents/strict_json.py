"""Strict JSON: what request bodies, ``/dry-run`` documents and snapshot files are read with.

Two readers, for two kinds of author.

``decode_json`` reads what people type (``/dry-run`` bodies, ``gpushare check`` files,
snapshots): no duplicate keys, no NaN/Infinity, numbers of sane length, refused with a reason
before they reach a model or a rule. Its fast path decodes with msgspec and accepts the result
only if encoding it again reproduces the body byte for byte (identical bytes parse identically,
and an encoding of a dict never repeats a key, so the body had none either); anything else
(pretty-printed, escaped differently, invalid) goes through the strict decoder, which finds
duplicates and words the error.

``decode_kubernetes_json`` reads what Kubernetes itself encodes: the API server's
AdmissionReviews and kube-scheduler's extender calls. It skips the duplicate-key check and
nothing else (see its docstring), so every body the API server sends is one msgspec decode.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import msgspec


class JsonBodyError(ValueError):
    """The body is not strict UTF-8 JSON; the message says why (an HTTP 400)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


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
    return _decode_strict(raw)


def decode_kubernetes_json(raw: bytes) -> Any:
    """``raw``, a body a Kubernetes component encoded, decoded, or JsonBodyError.

    The API server encodes an AdmissionReview with apimachinery's JSON serializer, whose
    ``doEncode`` is ``json.NewEncoder(w).Encode(obj)`` (k8s.io/apimachinery
    pkg/runtime/serializer/json/json.go; the webhook client sends ``application/json``:
    k8s.io/apiserver pkg/util/webhook/client.go), and kube-scheduler its extender arguments
    with ``json.Marshal`` (pkg/scheduler/extender.go, ``send``). Go's encoding/json
    (src/encoding/json/encode.go, ``appendString``; stream.go, ``NewEncoder``) escapes ``&``,
    ``<``, ``>`` as ``\\u0026``, ``\\u003c``, ``\\u003e`` (HTML escaping is on for
    ``NewEncoder`` and ``Marshal``), always escapes U+2028 and U+2029, writes ``\\b``/``\\f``
    or ``\\u0008``/``\\u000c`` depending on the Go release, spells floats its own way
    (``1e+21``) and ``Encode`` ends the document with a newline. So a pod whose command holds
    ``&&`` or ``>`` is never byte-identical to msgspec's encoding of its value, and
    ``decode_json``'s fast path would send it to the slow, duplicate-checking one.

    The duplicate-key check buys nothing here. Go encodes from Go values: a struct's fields
    have distinct names and a map's keys are distinct, so an encoding of them cannot repeat a
    key; objects of custom kinds are ``map[string]interface{}`` in the API server, the same.
    A hand-crafted body (any pod can reach the Service) may repeat one: it is read as the last
    value wins, as Go's own decoder and msgspec both read it, so whatever it gets (its answer,
    what the webhook records of an admitted review) the same body without the earlier copies
    gets too: a repeated key buys its sender nothing.
    Everything else is as strict as ``decode_json``: msgspec refuses invalid UTF-8, NaN and
    Infinity, lone UTF-16 surrogate escapes, integers over 4300 digits, nesting past Python's
    recursion limit, and floats past a double's range (``1e400``, which ``decode_json`` reads
    as infinity: Go cannot encode one, nor the API server decode one). A refused body goes
    through the strict decoder, which words the reason as it does for ``/dry-run``.
    """
    try:
        return _FAST_DECODER.decode(raw)
    except (msgspec.MsgspecError, RecursionError, ValueError) as exc:  # ValueError: bad UTF-8
        refused = str(exc).split(" - at `", 1)[0]  # msgspec's path ("$[...]") tells a user nothing
    _decode_strict(raw)  # raises with the reason in the words /dry-run uses
    raise JsonBodyError(f"invalid JSON: {refused}")


def _decode_strict(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonBodyError(f"body is not UTF-8 (byte {exc.start})") from None
    try:
        value = _DECODER.decode(text)
    except _DuplicateKey as exc:
        key = json.dumps(exc.key[:80])
        raise JsonBodyError(f"duplicate key {key} in a JSON object; each key may appear once") from None
    except json.JSONDecodeError as exc:
        raise JsonBodyError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", exc.lineno) from None
    except RecursionError:
        raise JsonBodyError("JSON nested too deeply") from None
    except JsonBodyError:
        raise
    except ValueError:  # int() refuses numbers longer than sys.get_int_max_str_digits()
        raise JsonBodyError(f"a number in the body has more than {sys.get_int_max_str_digits()} digits") from None
    if _SURROGATE_ESCAPE.search(raw):
        _refuse_lone_surrogates(value)
    return value


# A \uD800-\uDFFF escape: half of a UTF-16 pair. json.loads keeps a lone one as a code point no
# UTF-8 text can hold (msgspec refuses such bodies, so only this path can see one).
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")


def _refuse_lone_surrogates(value: Any) -> None:
    try:
        _FAST_ENCODER.encode(value)
    except UnicodeEncodeError:
        raise JsonBodyError("a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff without its pair); "
                            "send valid Unicode") from None
