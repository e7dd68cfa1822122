"""Kubernetes resource quantities, parsed by the grammar of k8s.io/apimachinery.

    quantity  ::= signedNumber suffix
    suffix    ::= binarySI | decimalExponent | decimalSI
    binarySI  ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI ::= m | "" | k | M | G | T | P | E
    decimalExponent ::= ("e" | "E") signedNumber

Values are exact ``Decimal``s, so "2500m" is 2.5 and never a float rounding error.
"""

from __future__ import annotations

import re
from decimal import Context, Decimal

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": Decimal("0.001"), "": Decimal(1), "k": Decimal(10**3), "M": Decimal(10**6),
            "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18)}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|m|k|M|G|T|P|E)?$"
)
# Quantities longer than this are not something a person wrote; refuse before Decimal work.
_MAX_LEN = 64
# Parsed strings: a cluster writes few distinct values ("1", "4", "30"), on every admitted pod.
# Decimals are immutable, so sharing one is safe; the cache is emptied when it fills.
_PARSED: dict[str, Decimal] = {}
_PARSED_MAX = 4096
# Enough digits for the longest accepted number times the largest scale (64 digits x 2**60 or 1e30),
# so scaling never rounds (the default context keeps 28 digits).
_EXACT = Context(prec=_MAX_LEN + 32)


class QuantityError(ValueError):
    """The value is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """Parse an int, a float or a quantity string ("5", "2500m", "2Gi", "1e3") into a Decimal."""
    if isinstance(value, str):
        parsed = _PARSED.get(value)
        if parsed is None:
            parsed = _parse_text(value)  # raises QuantityError, which is not cached
            if len(value) <= _MAX_LEN:  # a padded value is parsed every time, never kept
                if len(_PARSED) >= _PARSED_MAX:
                    _PARSED.clear()
                _PARSED[value] = parsed
        return parsed
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is a boolean, not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a finite number")
        return Decimal(repr(value))
    raise QuantityError(f"{type(value).__name__} is not a quantity")


def _parse_text(value: str) -> Decimal:
    if value.isascii() and value.isdigit() and len(value) <= _MAX_LEN:
        return Decimal(value)  # the common case, "4", without the regex
    text = value.strip()
    if len(text) > _MAX_LEN:
        raise QuantityError(f"quantity is longer than {_MAX_LEN} characters")
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity")
    number = Decimal(match["number"])  # the regex admits only valid decimals
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return _EXACT.multiply(number, _BINARY[suffix])
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{value!r}: exponent out of range")
        return number.scaleb(exponent, _EXACT)
    return _EXACT.multiply(number, _DECIMAL[suffix])

