"""Cluster state sources for the server: a snapshot file, or the embedded demo snapshot."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from policies.cluster import ClusterSnapshot, node_from_manifest, pod_from_manifest
from policies.settings import Names

DEMO_SNAPSHOT = "demo-snapshot.yaml"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SnapshotError(ValueError):
    """A snapshot file cannot be read or holds no Kubernetes objects."""


def _documents(text: str, source: str) -> list[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as exc:
            raise SnapshotError(f"{source}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    try:
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise SnapshotError(f"{source}{line}: invalid YAML: {getattr(exc, 'problem', exc)}") from None


def _flatten(docs: list[Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for doc in docs:
        if isinstance(doc, list):
            items.extend(_flatten(doc))
        elif isinstance(doc, dict) and isinstance(doc.get("items"), list):
            items.extend(_flatten(doc["items"]))
        elif isinstance(doc, dict):
            items.append(doc)
    return items


def snapshot_objects(text: str, source: str = "<snapshot>") -> list[dict[str, Any]]:
    """Every object of `kubectl get ... -o yaml|json` output, Lists flattened."""
    return _flatten(_documents(text, source))


def snapshot_from_objects(items: list[dict[str, Any]], names: Names) -> ClusterSnapshot:
    """A ClusterSnapshot of the nodes and GPU-using pods among ``items``."""
    snapshot = ClusterSnapshot()
    for item in items:
        kind = item.get("kind")
        if kind == "Node":
            snapshot.upsert_node(node_from_manifest(item, names))
        elif kind == "Pod":
            snapshot.record_pod(pod_from_manifest(item, names))
    return snapshot


def snapshot_from_text(text: str, names: Names, source: str = "<snapshot>") -> ClusterSnapshot:
    """Build a ClusterSnapshot from `kubectl get nodes,pods -A -o yaml|json` output."""
    return snapshot_from_objects(snapshot_objects(text, source), names)


def load_snapshot(path: str | Path, names: Names) -> ClusterSnapshot:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{path}: cannot read snapshot: {exc}") from None
    return snapshot_from_text(text, names, str(path))


def demo_snapshot_text() -> str:
    return resources.files("webhook.data").joinpath(DEMO_SNAPSHOT).read_text(encoding="utf-8")


def load_demo_snapshot(names: Names) -> ClusterSnapshot:
    return snapshot_from_text(demo_snapshot_text(), names, f"<embedded {DEMO_SNAPSHOT}>")
