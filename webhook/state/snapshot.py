"""Cluster state sources for the server: a snapshot file, or the embedded demo snapshot."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from policies.model.cluster_manifests import node_from_manifest, node_resource_names, pod_from_manifest
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.model.quantity import QuantityError, parse_quantity
from policies.model.settings import Names
from policies.quota.quota_objects import STATE_KINDS, group_matches
from webhook.documents.reader import DocumentError, looks_like_json, read_json, read_yaml

DEMO_SNAPSHOT = "demo-snapshot.yaml"


class SnapshotError(ValueError):
    """A snapshot file cannot be read or holds no Kubernetes objects."""


def _documents(text: str, source: str) -> list[Any]:
    # The same bounded reader as manifests (webhook.documents): a snapshot file is input too.
    try:
        if looks_like_json(text):
            return [read_json(text, source)]
        return read_yaml(text, source)
    except DocumentError as exc:
        raise SnapshotError(str(exc)) from None


def _flatten(docs: list[Any], source: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for doc in docs:
        if isinstance(doc, list):
            items.extend(_flatten(doc, source))
        elif isinstance(doc, dict) and isinstance(doc.get("items"), list):
            items.extend(_flatten(doc["items"], source))
        elif isinstance(doc, dict):
            items.append(doc)
        else:  # text or a number where Kubernetes objects belong: not kubectl output at all
            raise SnapshotError(f"{source}: not a cluster snapshot: found {type(doc).__name__} "
                                f"{json.dumps(doc, default=str)[:40]} where Kubernetes objects belong "
                                "(expected `kubectl get nodes,pods -A -o yaml` output)")
    return items


def snapshot_objects(text: str, source: str = "<snapshot>") -> list[dict[str, Any]]:
    """Every object of `kubectl get ... -o yaml|json` output, Lists flattened."""
    return _flatten(_documents(text, source), source)


def snapshot_from_objects(items: list[dict[str, Any]], names: Names) -> ClusterSnapshot:
    """A ClusterSnapshot of the nodes and GPU-using pods among ``items``."""
    snapshot = ClusterSnapshot()
    for item in items:
        kind = item.get("kind")
        if kind == "Node":
            snapshot.upsert_node(node_from_manifest(item, names))
        elif kind == "Pod":
            snapshot.record_pod(pod_from_manifest(item, names))
        elif kind in STATE_KINDS and group_matches(kind, item):
            snapshot.upsert_quota(kind, item)
        elif kind == "Namespace":  # who allows annotation exemptions (a namespace label)
            meta = item.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            labels = meta.get("labels")
            if isinstance(meta.get("name"), str):
                snapshot.upsert_namespace(meta["name"], {k: str(v) for k, v in labels.items()}
                                          if isinstance(labels, dict) else {})
    return snapshot


def require_nodes(items: list[dict[str, Any]], source: str) -> None:
    """A cluster has nodes: a file without any is a manifest or nothing, not a cluster (judging
    against it would pass every placement as "0 nodes")."""
    if any(item.get("kind") == "Node" for item in items):
        return
    kinds = sorted({str(item.get("kind")) for item in items if item.get("kind")})
    found = f"it holds {', '.join(kinds[:4])}{', ...' if len(kinds) > 4 else ''}" if kinds else "it is empty"
    raise SnapshotError(f"{source}: not a cluster snapshot: no Node objects ({found}); save the cluster with "
                        "`kubectl get nodes,pods -A -o yaml > cluster.yaml`")


def require_quantities(items: list[dict[str, Any]], names: Names, source: str) -> None:
    """A Node's GPU capacity and allocatable are quantities: the API server stores them as
    resource.Quantity and refuses anything else, so a snapshot holding "abc" was edited by hand.
    Ignoring the value would drop the node's GPUs in silence (inspect without the node, audit "ok")."""
    watched = node_resource_names(names)
    for item in items:
        if item.get("kind") != "Node":
            continue
        meta = item.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        status = item.get("status")
        status = status if isinstance(status, dict) else {}
        for block in ("capacity", "allocatable"):
            values = status.get(block)
            if not isinstance(values, dict):
                continue
            for name in watched:
                if name not in values:
                    continue
                try:
                    parse_quantity(values[name])
                except QuantityError:
                    raise SnapshotError(
                        f"{source}: Node {meta.get('name')}: status.{block}[{name}] {json.dumps(values[name])} is "
                        "not a quantity (the API server refuses such a node; save the cluster again with `kubectl "
                        "get nodes,pods -A -o yaml`)") from None


def snapshot_from_text(text: str, names: Names, source: str = "<snapshot>") -> ClusterSnapshot:
    """Build a ClusterSnapshot from `kubectl get nodes,pods -A -o yaml|json` output; SnapshotError
    when it holds no Node, or a Node whose GPU capacity is not a quantity."""
    items = snapshot_objects(text, source)
    require_nodes(items, source)
    require_quantities(items, names, source)
    return snapshot_from_objects(items, names)


def load_snapshot(path: str | Path, names: Names) -> ClusterSnapshot:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SnapshotError(f"{path}: cannot read snapshot: not UTF-8 text") from None
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read snapshot: {(exc.strerror or str(exc)).lower()}") from None
    return snapshot_from_text(text, names, str(path))


def demo_snapshot_text() -> str:
    return resources.files("webhook.data").joinpath(DEMO_SNAPSHOT).read_text(encoding="utf-8")


def load_demo_snapshot(names: Names) -> ClusterSnapshot:
    return snapshot_from_text(demo_snapshot_text(), names, f"<embedded {DEMO_SNAPSHOT}>")


def describe_snapshot(state: ClusterSnapshot, snapshot: str | Path | None) -> str:
    """Which cluster a command judged against, for people: "snapshot file X: 3 nodes, 1 GPU pod"."""
    nodes, pods = state.counts()
    what = f"snapshot file {snapshot}" if snapshot is not None else "demo snapshot"
    return f"{what}: {nodes} node{'s' * (nodes != 1)}, {pods} GPU pod{'s' * (pods != 1)}"
