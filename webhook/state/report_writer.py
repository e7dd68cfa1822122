"""Write the audit's report objects (``webhook.report.policy_reports``) to the cluster.

Each object is created, or replaced when it exists; report objects this tool wrote earlier
(label ``app.kubernetes.io/managed-by=gpushare``) in namespaces that have no findings any
more are deleted, so the cluster never holds more than one per namespace. RBAC: get, list,
create, update, delete on the report kinds only (deploy/ grants exactly that).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

MANAGED = "app.kubernetes.io/managed-by=gpushare"


class ReportWriteError(RuntimeError):
    """The API server refused a report object (no CRD, no RBAC, invalid)."""


@dataclass
class WriteSummary:
    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def served(api: k8s.CustomObjectsApi, group: str, version: str, plural: str) -> bool:
    """Whether the cluster serves this report kind (its CRD is installed)."""
    try:
        api.list_cluster_custom_object(group, version, plural, limit=1)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise ReportWriteError(f"{group}/{version} {plural}: {exc.status} {exc.reason}") from None
    return True


def write_reports(api: k8s.CustomObjectsApi, group: str, version: str, plural: str, cluster_plural: str,
                  objects: list[dict[str, Any]]) -> WriteSummary:
    summary = WriteSummary()
    kept: set[tuple[str, str]] = set()
    for obj in objects:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        kept.add((namespace, name))
        try:
            _upsert(api, group, version, plural if namespace else cluster_plural, namespace, name, obj)
        except ApiException as exc:
            where = f"{namespace}/{name}" if namespace else name
            raise ReportWriteError(f"{obj['kind']} {where}: {exc.status} {exc.reason}") from None
        summary.written.append(f"{obj['kind']} {namespace + '/' if namespace else ''}{name}")
    try:
        listed = api.list_cluster_custom_object(group, version, plural, label_selector=MANAGED)
    except ApiException as exc:
        raise ReportWriteError(f"{group}/{version} {plural}: {exc.status} {exc.reason}") from None
    for item in listed.get("items", []):
        meta = item.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if key not in kept and key[0]:
            try:
                api.delete_namespaced_custom_object(group, version, key[0], plural, key[1])
            except ApiException as exc:
                if exc.status != 404:
                    raise ReportWriteError(f"delete {key[0]}/{key[1]}: {exc.status} {exc.reason}") from None
            summary.deleted.append(f"{key[0]}/{key[1]}")
    return summary


def _upsert(api: k8s.CustomObjectsApi, group: str, version: str, plural: str, namespace: str, name: str,
            obj: dict[str, Any]) -> None:
    """Create the object, or replace it (with the stored resourceVersion) when it exists."""
    try:
        if namespace:
            current = api.get_namespaced_custom_object(group, version, namespace, plural, name)
        else:
            current = api.get_cluster_custom_object(group, version, plural, name)
    except ApiException as exc:
        if exc.status != 404:
            raise
        if namespace:
            api.create_namespaced_custom_object(group, version, namespace, plural, obj)
        else:
            api.create_cluster_custom_object(group, version, plural, obj)
        return
    version_seen = (current.get("metadata") or {}).get("resourceVersion")
    body = dict(obj, metadata=dict(obj["metadata"], resourceVersion=version_seen))
    if namespace:
        api.replace_namespaced_custom_object(group, version, namespace, plural, name, body)
    else:
        api.replace_cluster_custom_object(group, version, plural, name, body)
