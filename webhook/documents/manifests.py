"""Manifests from text: multi-document YAML, a JSON object, a ``List``, or an AdmissionReview.

Every object keeps the file and line where its document starts and the line of each field,
so a finding can point at the offending value. The YAML node graph is walked with a budget,
so a document that expands through aliases ("billion laughs") is refused, not expanded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import yaml

from policies.resources import Path

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# A node reached through aliases counts every time it is reached.
MAX_NODES_PER_DOCUMENT = 200_000
MAX_DEPTH = 100


class ManifestError(ValueError):
    """Unreadable input: names the source and line."""

    def __init__(self, source: str, line: int | None, message: str) -> None:
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {message}")
        self.source, self.line, self.reason = source, line, message


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


def _field_lines(node: yaml.Node, source: str) -> dict[Path, int]:
    lines: dict[Path, int] = {}
    budget = MAX_NODES_PER_DOCUMENT
    stack: list[tuple[yaml.Node, Path]] = [(node, ())]
    while stack:
        current, path = stack.pop()
        budget -= 1
        if budget < 0:
            raise ManifestError(source, node.start_mark.line + 1,
                                f"document expands to more than {MAX_NODES_PER_DOCUMENT} nodes "
                                f"(YAML aliases?); refused")
        if len(path) > MAX_DEPTH:
            raise ManifestError(source, current.start_mark.line + 1, f"nested deeper than {MAX_DEPTH} levels")
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


def _flatten(obj: Any, source: str, line: int, lines: dict[Path, int]) -> list[Manifest]:
    """An object, or the items of a List / the object of an AdmissionReview, as manifests."""
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
            out.extend(_flatten(item, source, lines.get(("items", index), line), sub))
        return out
    return [Manifest(obj, source, line, lines)]


def _parse_json(text: str, source: str) -> list[Manifest]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(source, exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise ManifestError(source, 1, "JSON nested too deeply") from None
    return _flatten(obj, source, 1, {})


def parse_manifests(text: str, source: str = "<stdin>") -> list[Manifest]:
    """Every Kubernetes object in ``text``; empty documents are skipped."""
    if text.lstrip().startswith(("{", "[")):
        return _parse_json(text, source)
    loader = _Loader(text)
    out: list[Manifest] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            line = node.start_mark.line + 1
            lines = _field_lines(node, source)
            obj = loader.construct_document(node)
            if obj is None:
                continue
            out.extend(_flatten(obj, source, line, lines))
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, source) from None
    except RecursionError:
        raise ManifestError(source, None, f"YAML nested too deeply (limit {MAX_DEPTH})") from None
    finally:
        loader.dispose()
    return out


def _yaml_error(exc: yaml.YAMLError, text: str, source: str) -> ManifestError:
    """The parser's complaint at its line; a construct left open names the line it opened on."""
    problem_mark = getattr(exc, "problem_mark", None)
    context_mark = getattr(exc, "context_mark", None)
    mark = problem_mark or context_mark
    message = f"invalid YAML: {getattr(exc, 'problem', None) or exc}"
    if mark is None:
        return ManifestError(source, None, message)
    # At end of input the parser points past the last line; point at the last line instead.
    last_line = text.count("\n") + (0 if text.endswith("\n") else 1)
    line = max(1, min(mark.line + 1, last_line))
    context = getattr(exc, "context", None)
    if context and context_mark is not None and context_mark.line + 1 != line:
        message += f" ({context} at line {context_mark.line + 1})"
    return ManifestError(source, line, message)
