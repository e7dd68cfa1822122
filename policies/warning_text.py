"""Admission warnings the API server passes on whole.

The AdmissionResponse contract (k8s.io/api admission/v1, ``AdmissionResponse.Warnings``): "Limit
warnings to 120 characters if possible. Warnings over 256 characters and large numbers of
warnings may be truncated." Rule messages put the decisive part first (rule id, object, what does
not fit, what would be accepted), so a message over the limit keeps its beginning: names longer
than a reader needs (object names may have 253 characters) are shortened in their middle, then
the end is cut at a word, marked "…". The full text stays where there is room: ``/dry-run``,
``gpushare check``/``explain`` and the review's audit annotations.
"""

from __future__ import annotations

import re

WARNING_LIMIT = 256
# A name is shortened past this length, to its first and last characters around "…".
NAME_LIMIT = 40
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{{NAME_LIMIT},}}")
_HEAD, _TAIL = 22, 14


def _shorten_name(match: re.Match[str]) -> str:
    name = match.group(0)
    return f"{name[:_HEAD]}…{name[-_TAIL:]}"


def brief(message: str, limit: int = WARNING_LIMIT) -> str:
    """``message`` in at most ``limit`` characters, its beginning kept."""
    if len(message) <= limit:
        return message
    text = _NAME.sub(_shorten_name, message)
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ;:,") + "…"
