"""How long a review may wait before it is no use: the API server's deadline for the call.

kube-apiserver tells the webhook its deadline in the query string. In
k8s.io/apiserver/pkg/admission/plugin/webhook/{validating,mutating}/dispatcher.go (callHook),
the call's context gets the webhook's ``timeoutSeconds``, so the deadline is the smaller of
that and what is left of the API request's own deadline; the time left is "rounded up to the
nearest second" and set with ``Request.Timeout``, which k8s.io/client-go/rest/request.go
(``URL``) writes as ``?timeout=`` + Go's ``time.Duration.String()`` ("5s", "1m0s").
So ``timeout=5s`` means more than 4 s and at most 5 s are left, and never less than ``1s``
is sent. A call without the parameter gets ``overload.default_timeout_seconds``, the
``timeoutSeconds`` of the deployed webhook configurations.
"""

from __future__ import annotations

import re
from functools import lru_cache

from webhook.settings import OverloadSettings

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|μs|ns|m|s)")


def parse_go_duration(text: str) -> float | None:
    """Seconds in a Go duration string ("5s", "1m0s", "1.5s"); None if it is not one or not positive."""
    if not text or len(text) > 40:
        return None
    total, pos = 0.0, 0
    for match in _PART.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and total > 0 else None


def timeout_parameter(query: str) -> str | None:
    """The value of ``timeout`` in a raw query string, if present."""
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name == "timeout":
            return value
    return None


@lru_cache(maxsize=256)
def budget_seconds(timeout: str | None, limits: OverloadSettings) -> float:
    """How long after its arrival a review may still start waiting-plus-evaluating and be
    answered in time: the deadline, less the rounding (up to 1 s, at most half of a short
    deadline) and ``overload.answer_margin_seconds`` (network, writing the answer)."""
    seconds = parse_go_duration(timeout) if timeout is not None else None
    if seconds is None:
        seconds = limits.default_timeout_seconds
    rounding = min(1.0, seconds / 2)
    return max(seconds - rounding - limits.answer_margin_seconds, 0.0)


def describe(timeout: str | None, limits: OverloadSettings) -> str:
    """The deadline in words, for a refusal's reason."""
    if timeout is not None and parse_go_duration(timeout) is not None:
        source = f"the API server's timeout={timeout}"
    else:
        source = f"overload.default_timeout_seconds={limits.default_timeout_seconds:g}"
    return (f"{source}, less the rounding and overload.answer_margin_seconds="
            f"{limits.answer_margin_seconds:g}, leaves {budget_seconds(timeout, limits):.2f} s")
