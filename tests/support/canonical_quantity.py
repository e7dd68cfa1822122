"""The string the API server sends for a quantity a user wrote: Go's ``Quantity.String()``.

The API server decodes a Pod and encodes it again before admission webhooks see it, so a
webhook never receives what the user wrote but its canonical form (k8s.io/apimachinery,
pkg/api/resource/quantity.go: ``ParseQuantity`` keeps the value and a format chosen by the
suffix, rounds up to nano units; ``CanonicalizeBytes`` prints it). Written here from that
source's documented behaviour, for tests only:

- the format follows the suffix: ``Ki``..``Ei`` BinarySI, ``e``/``E`` DecimalExponent, else DecimalSI;
- DecimalSI and DecimalExponent print an integer mantissa and a base-10 exponent that is a
  multiple of 3 (trailing zeros moved into the exponent): ``2000m`` -> ``2``, ``1000`` -> ``1k``,
  ``1500`` -> ``1500``, ``0.5`` -> ``500m``, ``1e3`` -> ``1e3``;
- BinarySI prints powers of 1024 (``2048Mi`` -> ``2Gi``), except a value under 1024 in size or
  not a whole number, which it prints as DecimalSI (``0.5Ki`` -> ``512``).
"""

from __future__ import annotations

import re
from decimal import ROUND_UP, Decimal, localcontext

_PATTERN = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|m|k|M|G|T|P|E)?$")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_SI_SUFFIX = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIX = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


def canonical(written: str) -> str:
    """What the API server sends for ``written`` (a valid quantity string)."""
    match = _PATTERN.match(written.strip())
    if match is None:
        raise ValueError(f"not a quantity: {written!r}")
    number, suffix = match.group(1), match.group(2) or ""
    with localcontext() as ctx:
        ctx.prec = 200
        value = Decimal(number)
        if suffix in _BINARY:
            fmt = "BinarySI"
            value *= Decimal(1024) ** _BINARY[suffix]
        elif len(suffix) > 1 and suffix[0] in "eE":
            fmt = "DecimalExponent"
            value = value.scaleb(int(suffix[1:]))
        else:
            fmt = "DecimalSI"
            value = value.scaleb(_DECIMAL[suffix])
        value = value.quantize(Decimal("1e-9"), rounding=ROUND_UP)  # nano units, away from zero
        if value == 0:
            return "0"
        if fmt == "BinarySI" and (abs(value) < 1024 or value != value.to_integral_value()):
            fmt = "DecimalSI"
        if fmt == "BinarySI":
            return _binary(int(value))
        return _decimal(value, fmt)


def _decimal(value: Decimal, fmt: str) -> str:
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)))
    while mantissa and mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    while exponent % 3:
        mantissa *= 10
        exponent -= 1
    text = ("-" if sign else "") + str(mantissa)
    if fmt == "DecimalExponent":
        return text + (f"e{exponent}" if exponent else "")
    return text + _SI_SUFFIX.get(exponent, f"e{exponent}")


def _binary(value: int) -> str:
    magnitude, power = abs(value), 0
    while power < len(_BINARY_SUFFIX) - 1 and magnitude % 1024 == 0:
        magnitude //= 1024
        power += 1
    return ("-" if value < 0 else "") + str(magnitude) + _BINARY_SUFFIX[power]
