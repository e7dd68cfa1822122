"""Write the audit's report objects (``webhook.report.policy_reports``) to the cluster: the one
code path of ``gpushare audit --write-reports`` and of the server's leader after each periodic
audit.

``publish`` picks the report API (the first of the candidates the cluster serves: a CRD that is
not installed answers 404 on its collection), builds the objects for it, then:

- lists the objects this tool wrote earlier (label ``app.kubernetes.io/managed-by=gpushare``)
  once, creates the missing ones and replaces the others with the resourceVersion listed (a
  concurrent change answers 409 Conflict: read again, replace once more);
- deletes its labelled objects that were not written this time (namespaces without findings
  any more, or beyond ``audit.max_reports``), so the cluster never holds more than the bound;
- with ``clean_others`` (the API was chosen automatically), deletes its labelled objects of the
  other report APIs the cluster serves, so that installing OpenReports next to PolicyReport
  leaves no stale PolicyReports behind.

RBAC: get, list, create, update and delete on the report kinds, nothing else (deploy/ grants
exactly that; tests/deploy/test_deploy.py and tests/state/test_audit_reports_served.py hold both to it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from kubernetes.client.exceptions import ApiException

MANAGED_LABEL = ("app.kubernetes.io/managed-by", "gpushare")
MANAGED = "=".join(MANAGED_LABEL)


class ReportWriteError(RuntimeError):
    """The API server refused a report object (no CRD, no RBAC, invalid)."""


class ReportKinds(Protocol):
    """A report API (``webhook.report.policy_reports.ReportApi`` has these)."""

    @property
    def group(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def plural(self) -> str: ...
    @property
    def cluster_plural(self) -> str: ...
    @property
    def api_version(self) -> str: ...


@dataclass
class WriteSummary:
    api_version: str = ""
    kind: str = ""
    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if not self.api_version:
            return "no report API served"
        deleted = f", deleted {len(self.deleted)} stale" if self.deleted else ""
        return f"wrote {len(self.written)} {self.kind} object(s) ({self.api_version}){deleted}"


def served(api: Any, group: str, version: str, plural: str) -> bool:
    """Whether the cluster serves this report kind (its CRD is installed)."""
    try:
        api.list_cluster_custom_object(group, version, plural, limit=1)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise ReportWriteError(f"{group}/{version} {plural}: {exc.status} {exc.reason}") from None
    return True


K = TypeVar("K", bound=ReportKinds)


def publish(api: Any, candidates: Sequence[K], build: Callable[[K], list[dict[str, Any]]],
            *, clean_others: bool = False) -> WriteSummary:
    """Write ``build(chosen)`` in the first candidate API the cluster serves (an empty summary
    when it serves none of them)."""
    chosen = next((c for c in candidates if served(api, c.group, c.version, c.plural)), None)
    if chosen is None:
        return WriteSummary()
    summary = write_reports(api, chosen, build(chosen))
    if clean_others:
        for other in candidates:
            if other is not chosen and served(api, other.group, other.version, other.plural):
                summary.deleted += write_reports(api, other, []).deleted
    return summary


def write_reports(api: Any, kinds: ReportKinds, objects: list[dict[str, Any]]) -> WriteSummary:
    """Create or replace ``objects``; delete this tool's other objects of ``kinds``."""
    summary = WriteSummary(kinds.api_version, kinds.kind)
    existing: dict[tuple[str, str], str] = {}  # (namespace, name) -> resourceVersion
    for plural in (kinds.plural, kinds.cluster_plural):
        try:
            listed = api.list_cluster_custom_object(kinds.group, kinds.version, plural, label_selector=MANAGED)
        except ApiException as exc:
            raise ReportWriteError(f"list {kinds.group}/{kinds.version} {plural}: {exc.status} {exc.reason}") from None
        for item in listed.get("items", []):
            meta = item.get("metadata") or {}
            existing[(meta.get("namespace", ""), meta.get("name", ""))] = meta.get("resourceVersion", "")
    kept: set[tuple[str, str]] = set()
    for obj in objects:
        # The label is what finds the object again (for replacing and pruning): always on it.
        labels = {**(obj["metadata"].get("labels") or {}), MANAGED_LABEL[0]: MANAGED_LABEL[1]}
        meta = dict(obj["metadata"], labels=labels)
        obj = dict(obj, metadata=meta)
        where = (meta.get("namespace", ""), meta["name"])
        kept.add(where)
        shown = f"{where[0]}/{where[1]}" if where[0] else where[1]
        try:
            _upsert(api, kinds, where, obj, existing.get(where))
        except ApiException as exc:
            raise ReportWriteError(f"{obj['kind']} {shown}: {exc.status} {exc.reason}") from None
        summary.written.append(f"{obj['kind']} {shown}")
    for where in sorted(set(existing) - kept):
        namespace, name = where
        try:
            if namespace:
                api.delete_namespaced_custom_object(kinds.group, kinds.version, namespace, kinds.plural, name)
            else:
                api.delete_cluster_custom_object(kinds.group, kinds.version, kinds.cluster_plural, name)
        except ApiException as exc:
            if exc.status != 404:  # already gone: what was wanted
                raise ReportWriteError(f"delete {kinds.kind} {namespace}/{name}: {exc.status} {exc.reason}") from None
        summary.deleted.append(f"{namespace}/{name}" if namespace else name)
    return summary


def _upsert(api: Any, kinds: ReportKinds, where: tuple[str, str], obj: dict[str, Any],
            resource_version: str | None) -> None:
    """Create the object, or replace it with the resourceVersion last seen; on a conflict (a
    concurrent writer, or an object created since the list) read it and replace once more."""
    namespace, name = where
    group, version = kinds.group, kinds.version
    plural = kinds.plural if namespace else kinds.cluster_plural

    def replace(seen: str) -> None:
        body = dict(obj, metadata=dict(obj["metadata"], resourceVersion=seen))
        if namespace:
            api.replace_namespaced_custom_object(group, version, namespace, plural, name, body)
        else:
            api.replace_cluster_custom_object(group, version, plural, name, body)

    def current() -> str:
        found = (api.get_namespaced_custom_object(group, version, namespace, plural, name) if namespace
                 else api.get_cluster_custom_object(group, version, plural, name))
        return str((found.get("metadata") or {}).get("resourceVersion", ""))

    def create() -> None:
        if namespace:
            api.create_namespaced_custom_object(group, version, namespace, plural, obj)
        else:
            api.create_cluster_custom_object(group, version, plural, obj)

    try:
        create() if resource_version is None else replace(resource_version)
    except ApiException as exc:
        if exc.status == 409:  # AlreadyExists (created since the list) or Conflict (changed since)
            replace(current())
        elif exc.status == 404 and resource_version is not None:  # deleted since the list
            create()
        else:
            raise
