"""Per-object exemptions: ``gpushare.io/exempt: "GS003,GN002"`` with a required reason.

The annotation is read where the objects the webhook will see carry it: on a Pod or Node its
own metadata, on a workload the pod template's metadata (the pods it creates inherit those
annotations and are admitted one by one). An exemption on a workload's own metadata alone is
not honoured, because its pods would then be denied at admission while CI passed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from policies.model.resources import POD_SPEC_PATHS, Path
from policies.model.settings import Names

_SEPARATORS = re.compile(r"[\s,;]+")


@dataclass(frozen=True, slots=True)
class Exemption:
    """What an object's annotations ask to be exempted from, and whether that is honoured."""

    ids: tuple[str, ...]
    reason: str
    path: Path  # where the exempt annotation is written
    misplaced: bool = False  # on a workload's own metadata instead of its pod template
    # Whether an admin allows annotation exemptions in the object's namespace, and on whose
    # word or why not (policies/model/grants.py); secure by default.
    allowed: bool = False
    permission: str = ""

    @property
    def honoured(self) -> bool:
        return bool(self.ids) and bool(self.reason) and not self.misplaced and self.allowed

    @property
    def set_aside(self) -> frozenset[str]:
        """The rule and mutation ids this exemption sets aside: those it names when honoured, else none."""
        return frozenset(self.ids) if self.honoured else frozenset()


def annotations_path(kind: str) -> Path:
    """Where the exemption of ``kind`` is read: the pod template for workloads."""
    spec_path = POD_SPEC_PATHS.get(kind)
    if spec_path is None or kind == "Pod":
        return ("metadata", "annotations")
    return (*spec_path[:-1], "metadata", "annotations")


def _annotations(obj: Any, path: Path) -> dict[str, Any]:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj if isinstance(obj, dict) else {}


def parse_ids(value: Any) -> tuple[str, ...]:
    """Rule ids from an annotation value: comma, semicolon or space separated, any case."""
    if not isinstance(value, str):
        return ()
    return tuple(dict.fromkeys(part.upper() for part in _SEPARATORS.split(value) if part))


def read_exemption(obj: dict[str, Any], kind: str, names: Names) -> Exemption | None:
    """The object's exemption, or None when it asks for none."""
    path = annotations_path(kind)
    annotations = _annotations(obj, path)
    misplaced = False
    if names.exempt_annotation not in annotations and path != ("metadata", "annotations"):
        own = _annotations(obj, ("metadata", "annotations"))
        if names.exempt_annotation in own:
            annotations, path, misplaced = own, ("metadata", "annotations"), True
    if names.exempt_annotation not in annotations:
        return None
    reason = annotations.get(names.exempt_reason_annotation)
    return Exemption(parse_ids(annotations[names.exempt_annotation]),
                     reason.strip() if isinstance(reason, str) else "",
                     (*path, names.exempt_annotation), misplaced)
