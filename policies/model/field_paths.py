"""Field path patterns through maps and lists of replicas: ``spec.pytorchReplicaSpecs.*.template``,
``spec.tasks[].template``.

A pattern is a dotted list of field names in which ``*`` stands for every value of a map (a map of
replica specs keyed by role) and a trailing ``[]`` on a field for every item of its list (a list of
worker groups). The same patterns are written in the configuration (``workloads.kinds``), read by
the engine and turned into CEL for the webhooks' matchConditions, so they are parsed in one place.
"""

from __future__ import annotations

import re

EVERY_VALUE = "*"  # every value of a map
EVERY_ITEM = "[]"  # every item of a list

Pattern = tuple[str, ...]
# A field name as CRDs spell them (Go struct tags): letters, digits, "_" and "-"; "." and "/"
# cannot be written in a dotted path.
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class PatternError(ValueError):
    """A path pattern that cannot be read; the message says what is wrong and where."""


def parse_pattern(text: str) -> Pattern:
    """``"spec.tasks[].template"`` -> ``("spec", "tasks", "[]", "template")``."""
    if not isinstance(text, str) or not text.strip():
        raise PatternError("a path is a dotted list of field names, e.g. spec.tasks[].template")
    out: list[str] = []
    for part in text.strip().split("."):
        if part == EVERY_VALUE:
            if not out:
                raise PatternError(f"{text!r}: a path starts with a field name, not {EVERY_VALUE}")
            out.append(EVERY_VALUE)
            continue
        name, brackets = part, 0
        while name.endswith(EVERY_ITEM):
            name, brackets = name[: -len(EVERY_ITEM)], brackets + 1
        if not _FIELD.fullmatch(name):
            shown = part or "(empty)"
            raise PatternError(f"{text!r}: {shown!r} is not a field name (letters, digits, _ and -; {EVERY_VALUE} "
                               f"for every value of a map, a trailing {EVERY_ITEM} for every item of a list)")
        out.append(name)
        out.extend([EVERY_ITEM] * brackets)
    return tuple(out)


def render_pattern(pattern: Pattern) -> str:
    """The inverse of ``parse_pattern``."""
    out = ""
    for part in pattern:
        if part == EVERY_ITEM:
            out += EVERY_ITEM
        else:
            out += f".{part}" if out else part
    return out


def wildcards(pattern: Pattern) -> int:
    """How many maps and lists the pattern goes through."""
    return sum(part in (EVERY_VALUE, EVERY_ITEM) for part in pattern)
