"""Template placeholders (``{{ .Values.gpuMem }}``) where a rule reads a value.

A manifest taken from a Helm chart or a Go template before rendering carries placeholders. One
quoted in a field a rule reads would be judged as a value ("{{ .Values.gpuMem }} is not a
quantity"): a wrong verdict about text nobody will apply. Such an object is not judged; the user
is told to render it. Placeholders elsewhere (Argo's ``{{inputs.parameters.x}}`` in a container's
args, alert text) are ordinary strings to Kubernetes and to the rules, and change nothing.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from typing import Any

from policies.model.resources import CONTAINER_GROUPS, POD_SPEC_PATHS, Path, render_path

from .manifests import RENDER_HINT

OPEN = "{{"

# What the rules read of a pod spec: resources, where it may run, its scheduler and priority.
POD_SPEC_FIELDS = ("nodeSelector", "affinity", "tolerations", "schedulerName", "priorityClassName", "nodeName")
# Of a Node: its labels, annotations, spec (provider ID, taints) and capacity.
NODE_FIELDS: tuple[Path, ...] = (("metadata", "labels"), ("metadata", "annotations"), ("spec",),
                                 ("status", "capacity"), ("status", "allocatable"))


def _get(obj: Any, path: Path) -> Any:
    for part in path:
        if isinstance(part, int):
            obj = obj[part] if isinstance(obj, list) and 0 <= part < len(obj) else None
        else:
            obj = obj.get(part) if isinstance(obj, dict) else None
        if obj is None:
            return None
    return obj


def _strings(value: Any, path: Path) -> Iterator[tuple[Path, str]]:
    """Every (path, text) of a placeholder under ``value``: keys and values, iteratively."""
    stack = [(value, path)]
    while stack:
        current, where = stack.pop()
        if isinstance(current, str):
            if OPEN in current:
                yield where, current
        elif isinstance(current, dict):
            for key, child in current.items():
                if isinstance(key, str) and OPEN in key:
                    yield (*where, key), key
                stack.append((child, (*where, key)))
        elif isinstance(current, list):
            stack.extend((child, (*where, i)) for i, child in enumerate(current))


def _read_fields(obj: dict[str, Any], kind: str, annotations: Collection[str]) -> Iterator[Path]:
    if kind == "Node":
        yield from NODE_FIELDS
        return
    spec_path = POD_SPEC_PATHS.get(kind)
    if spec_path is None:
        return
    meta_path = (*spec_path[:-1], "metadata") if kind != "Pod" else ("metadata",)
    # Of a pod's annotations, the ones rules read (exemptions, card assignments); others are the
    # tools' own (Argo writes "{{workflow.name}}" there).
    yield from ((*meta_path, "annotations", key) for key in annotations)
    yield from ((*spec_path, name) for name in POD_SPEC_FIELDS)
    spec = _get(obj, spec_path)
    for group in CONTAINER_GROUPS:
        containers = spec.get(group) if isinstance(spec, dict) else None
        if isinstance(containers, list):
            yield from ((*spec_path, group, i, "resources") for i in range(len(containers)))


def placeholders(obj: dict[str, Any], kind: str, annotations: Collection[str] = ()) -> list[tuple[Path, str]]:
    """The placeholders in fields the rules read of ``obj`` (of a pod's annotations, ``annotations``)."""
    found = []
    for path in _read_fields(obj, kind, annotations):
        value = _get(obj, path)
        if value is not None:
            found.extend(sorted(_strings(value, path), key=lambda pair: str(pair[0])))
    return found


def templated(obj: dict[str, Any], kind: str, annotations: Collection[str] = ()) -> tuple[Path, str] | None:
    """The first placeholder a rule would read and what to say about it, or None."""
    found = placeholders(obj, kind, annotations)
    if not found:
        return None
    path, text = found[0]
    return path, (f"{render_path(path)}: {json.dumps(text)[:120]} is a template placeholder, not a value; the "
                  f"object was not judged: render the template first ({RENDER_HINT})")


def read_annotations(names: Any) -> frozenset[str]:
    """The pod annotations rules read, from ``policies.model.settings.Names``."""
    cards = names.card_annotations
    pairs = [key for pair in names.assignment.pairs for key in pair]
    return frozenset({names.exempt_annotation, names.exempt_reason_annotation, names.allocation_annotation,
                      names.card_index_annotation, cards.core_allocation, cards.topology_visible, *pairs})
