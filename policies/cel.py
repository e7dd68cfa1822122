"""Small pieces of CEL text shared by the generated backstop policy and webhook matchConditions."""

from __future__ import annotations

from collections.abc import Iterable


def quote(text: str) -> str:
    """A CEL string literal (single-quoted, backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def string_list(items: Iterable[str]) -> str:
    """A CEL list literal of strings, in sorted order (the generated text is stable)."""
    return "[" + ", ".join(quote(item) for item in sorted(items)) + "]"


def guarded(path: str) -> str:
    """``has()`` for every optional level of a dotted path below its root (``object.spec.template``:
    ``has(object.spec) && has(object.spec.template)``)."""
    parts = path.split(".")
    return " && ".join(f"has({'.'.join(parts[:i])})" for i in range(2, len(parts) + 1))
