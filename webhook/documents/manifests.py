"""Manifests from text: multi-document YAML, a JSON object, a ``List``, or an AdmissionReview.

Every object keeps the file and line where its document starts and the line of each field,
so a finding can point at the offending value. Reading is ``webhook.documents``: bounded depth,
bounded alias expansion ("billion laughs" is refused, not expanded), strict JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from policies.model.resources import Path
from webhook.settings import InputSettings

from .reader import (
    DEFAULT_LIMITS,
    DocumentError,
    TooManyDocuments,
    construct,
    looks_like_json,
    read_json,
    yaml_nodes,
)

# An unreadable input: names the source and line (one error type for every reader).
ManifestError = DocumentError


@dataclass
class Manifest:
    obj: dict[str, Any]
    source: str
    line: int
    field_lines: dict[Path, int] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        kind = self.obj.get("kind")
        return kind if isinstance(kind, str) else ""

    def line_of(self, path: Path) -> int:
        """The line of the deepest field of ``path`` the source shows; else the document's line."""
        for end in range(len(path), 0, -1):
            found = self.field_lines.get(tuple(path[:end]))
            if found is not None:
                return found
        return self.line


def _field_lines(node: yaml.Node) -> dict[Path, int]:
    """The line of every field; aliases are walked where they are used (``check_yaml`` bounded
    how much they add and how deep they go)."""
    lines: dict[Path, int] = {}
    stack: list[tuple[yaml.Node, Path]] = [(node, ())]
    while stack:
        current, path = stack.pop()
        if isinstance(current, yaml.MappingNode):
            for key_node, value_node in current.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
                child = (*path, key)
                lines[child] = key_node.start_mark.line + 1
                stack.append((value_node, child))
        elif isinstance(current, yaml.SequenceNode):
            for index, item in enumerate(current.value):
                child = (*path, index)
                lines[child] = item.start_mark.line + 1
                stack.append((item, child))
    return lines


def is_kubernetes_object(value: Any) -> bool:
    """A mapping with a ``kind``: what Kubernetes reads. A top-level list (Ansible), a compose file
    or a Helm values file is not one."""
    return isinstance(value, dict) and isinstance(value.get("kind"), str) and bool(value["kind"])


def _flatten(obj: Any, source: str, line: int, lines: dict[Path, int], foreign: list[int] | None) -> list[Manifest]:
    """An object, or the items of a List / the object of an AdmissionReview, as manifests. With
    ``foreign``, documents that are not Kubernetes objects are counted there instead of refused."""
    if not is_kubernetes_object(obj):
        if foreign is not None:
            foreign[0] += 1
            return []
        if not isinstance(obj, dict):
            raise ManifestError(source, line, f"expected a Kubernetes object (a mapping), got {type(obj).__name__}")
    if obj.get("kind") == "AdmissionReview" and isinstance(obj.get("request"), dict):
        inner = obj["request"].get("object")
        if not isinstance(inner, dict):
            raise ManifestError(source, line, "AdmissionReview has no request.object")
        sub = {p[2:]: n for p, n in lines.items() if p[:2] == ("request", "object")}
        return [Manifest(inner, source, line, sub)]
    items = obj.get("items")
    if isinstance(obj.get("kind"), str) and obj["kind"].endswith("List") and isinstance(items, list):
        out: list[Manifest] = []
        for index, item in enumerate(items):
            sub = {p[2:]: n for p, n in lines.items() if p[:2] == ("items", index)}
            out.extend(_flatten(item, source, lines.get(("items", index), line), sub, foreign))
        return out
    return [Manifest(obj, source, line, lines)]


def parse_manifests(text: str, source: str = "<stdin>", limits: InputSettings = DEFAULT_LIMITS,
                    max_objects: int | None = None) -> list[Manifest]:
    """Every Kubernetes object in ``text``; empty documents are skipped. ManifestError names the
    line of anything unreadable or past ``limits`` (webhook.documents); TooManyDocuments past
    ``max_objects``, found before more of the text is read into objects than that."""
    return _read(text, source, limits, None, own_files=False, max_objects=max_objects)


@dataclass
class ManifestFile:
    """What a file of manifests holds: its Kubernetes objects, and how many documents were not
    Kubernetes objects (an Ansible list, a compose file, Helm values), which are skipped."""

    manifests: list[Manifest]
    not_kubernetes: int = 0


def read_manifest_file(text: str, source: str, limits: InputSettings = DEFAULT_LIMITS) -> ManifestFile:
    """As ``parse_manifests``, for the user's own files (``check``, ``score``): documents that are not
    Kubernetes objects are counted, not refused; YAML that does not parse and holds ``{{`` is named a
    template; text without anchors is read without the event pass (``yaml_nodes``)."""
    foreign = [0]
    try:
        manifests = _read(text, source, limits, foreign, own_files=True)
    except ManifestError as exc:
        if "{{" not in text or not exc.reason.startswith("invalid YAML"):
            raise
        raise ManifestError(source, exc.line, f"{exc.reason}; the file holds {{{{ ... }}}} placeholders: it looks "
                            f"like a Helm or Go template, render it first ({RENDER_HINT})") from None
    return ManifestFile(manifests, foreign[0])


# How a user turns a template into manifests `gpushare check` can read.
RENDER_HINT = "helm template CHART | gpushare check -"


def _read(text: str, source: str, limits: InputSettings, foreign: list[int] | None, *,
          own_files: bool, max_objects: int | None = None) -> list[Manifest]:
    if looks_like_json(text):
        out = _flatten(read_json(text, source, limits), source, 1, {}, foreign)
        if max_objects is not None and len(out) > max_objects:
            raise TooManyDocuments(source, None, max_objects)
        return out
    out = []
    for node, loader in yaml_nodes(text, source, limits, own_files=own_files, max_documents=max_objects):
        line = node.start_mark.line + 1
        lines = _field_lines(node)
        obj = construct(loader, node, text, source)
        if obj is None:
            continue
        out.extend(_flatten(obj, source, line, lines, foreign))
        if max_objects is not None and len(out) > max_objects:
            raise TooManyDocuments(source, line, max_objects)
    return out
