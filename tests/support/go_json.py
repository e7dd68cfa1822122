"""JSON as Go's encoding/json writes it: the bytes kube-apiserver sends a webhook.

The API server encodes an AdmissionReview with ``json.NewEncoder(w).Encode`` (k8s.io/apimachinery,
pkg/runtime/serializer/json/json.go, ``doEncode``): compact, HTML escaping on, a newline at the
end. What Go does with each value (golang/go, src/encoding/json/encode.go: ``appendString``,
``floatEncoder``; stream.go: ``NewEncoder``, ``Encode``):

- strings: ``"`` and ``\\`` escaped; ``\\n``, ``\\r``, ``\\t`` by name, other bytes under 0x20 as
  ``\\u00XX`` (lower-case hex; Go 1.22 and later write ``\\b`` and ``\\f`` by name too); with HTML
  escaping ``<``, ``>``, ``&`` as ``\\u003c``, ``\\u003e``, ``\\u0026``; U+2028 and U+2029 as
  ``\\u2028``, ``\\u2029`` always; every other character as its UTF-8 bytes;
- floats: the shortest digits that read back the same, without an exponent unless the value
  is under 1e-6 or at least 1e21 (then ``1e+21``, ``1e-7``: a leading zero of a negative
  exponent dropped); ``1.0`` is written ``1``; NaN and infinities are an error;
- objects: a struct's fields in declaration order, a map's keys sorted (``sort_keys``).

tests/server/test_go_json.py holds this to bytes a real Go encoder wrote (tests/data/go-json/).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

_NAMED = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HTML = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _escapes(named_b_f: bool) -> dict[int, str]:
    table = {c: f"\\u{c:04x}" for c in range(0x20)}
    table.update({ord(k): v for k, v in (_NAMED | _HTML).items()})
    if named_b_f:
        table.update({0x08: "\\b", 0x0C: "\\f"})
    return table


_GO_1_22 = _escapes(named_b_f=True)
_GO_BEFORE_1_22 = _escapes(named_b_f=False)


def go_float(value: float) -> str:
    """``value`` as Go's float64 encoder spells it."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"json: unsupported value: {value}")
    digits = Decimal(repr(value)).normalize()  # repr: the shortest digits that read back the same
    if value == 0 or 1e-6 <= abs(value) < 1e21:
        return format(digits, "f")
    sign, figures, exponent = digits.as_tuple()
    assert isinstance(exponent, int)
    mantissa = str(figures[0]) + ("." + "".join(map(str, figures[1:])) if len(figures) > 1 else "")
    power = exponent + len(figures) - 1
    spelled = f"{'-' if sign else ''}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"
    return spelled.replace("e-0", "e-") if abs(power) < 10 else spelled


def go_json(value: Any, *, sort_keys: bool = False, go_1_22: bool = True) -> bytes:
    """``value`` as ``json.Marshal`` writes it (no trailing newline)."""
    escapes = _GO_1_22 if go_1_22 else _GO_BEFORE_1_22
    out: list[str] = []

    def write(item: Any) -> None:
        if item is None:
            out.append("null")
        elif item is True:
            out.append("true")
        elif item is False:
            out.append("false")
        elif isinstance(item, str):
            out.append('"' + item.translate(escapes) + '"')
        elif isinstance(item, int):
            out.append(str(item))
        elif isinstance(item, float):
            out.append(go_float(item))
        elif isinstance(item, dict):
            out.append("{")
            for n, key in enumerate(sorted(item) if sort_keys else item):
                out.append("," if n else "")
                write(key)
                out.append(":")
                write(item[key])
            out.append("}")
        elif isinstance(item, (list, tuple)):
            out.append("[")
            for n, element in enumerate(item):
                out.append("," if n else "")
                write(element)
            out.append("]")
        else:
            raise TypeError(f"json: unsupported type: {type(item).__name__}")

    write(value)
    return "".join(out).encode("utf-8")


def api_server_json(value: Any, **options: Any) -> bytes:
    """``value`` as the API server sends it: ``json.NewEncoder(w).Encode``, a newline at the end."""
    return go_json(value, **options) + b"\n"
