"""The workload ``gpushare explain NAME`` looks at when NAME is no pod: a Deployment, ReplicaSet or Job
of that name, the objects that create its pods (a Deployment's ReplicaSets), their events and the pods
they own; from a snapshot file (its Event items, saved with ``kubectl get events -o yaml``) or from the
live cluster (the events listed per object with the field selector
``involvedObject.kind=KIND,involvedObject.name=NAME``, which kube-apiserver serves for events:
kubernetes ``pkg/registry/core/event/strategy.go``, ``ToSelectableFields``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from policies.scoring.workload_explain import WORKLOAD_KINDS, WorkloadView, events_for, meta_of, owned_by


def _named(obj: dict[str, Any], namespace: str, name: str) -> bool:
    meta = meta_of(obj)
    return meta.get("name") == name and (meta.get("namespace") or "default") == namespace


def snapshot_view(items: list[dict[str, Any]], namespace: str, name: str) -> WorkloadView | None:
    """The workload named so in a snapshot's objects, with its ReplicaSets, events and pods."""
    by_kind = {kind: [i for i in items if i.get("kind") == kind] for kind in (*WORKLOAD_KINDS, "Event", "Pod")}
    found = next(((kind, obj) for kind in WORKLOAD_KINDS for obj in by_kind[kind] if _named(obj, namespace, name)),
                 None)
    if found is None:
        return None
    kind, obj = found
    creators = [rs for rs in by_kind["ReplicaSet"] if meta_of(rs).get("namespace") == namespace
                and owned_by(rs, kind, name)] if kind == "Deployment" else [obj]
    return _view(kind, obj, creators, by_kind["Event"], by_kind["Pod"], namespace)


def _view(kind: str, obj: dict[str, Any], creators: list[dict[str, Any]], events: list[dict[str, Any]],
          pods: list[dict[str, Any]], namespace: str) -> WorkloadView:
    view = WorkloadView(kind, obj, creators)
    for creator in creators:
        c_kind, c_name = str(creator.get("kind")), str(meta_of(creator).get("name"))
        view.events[c_name] = events_for(events, namespace, c_kind, c_name)
        view.pods += [str(meta_of(p).get("name")) for p in pods if owned_by(p, c_kind, c_name)]
    return view


def _items(call: Any, kind: str, page_size: int) -> Iterator[dict[str, Any]]:
    """Every item of a paged list, with the kind list items come without."""
    from webhook.state.paging import list_pages

    for page in list_pages(call, json.loads, page_size):
        for item in page.get("items") or []:
            item.setdefault("kind", kind)
            yield item


def live_view(api_client: Any, namespace: str, name: str, page_size: int = 500) -> WorkloadView | None:
    """The same read from the API server: the workload by name, a Deployment's ReplicaSets (those it owns),
    each one's events by field selector, and the namespace's pods they own. Read as JSON, not as the
    client's typed models: what is shown is what the API server holds."""
    from functools import partial

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    apps, batch, core = client.AppsV1Api(api_client), client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    readers = {"Deployment": apps.read_namespaced_deployment, "ReplicaSet": apps.read_namespaced_replica_set,
               "Job": batch.read_namespaced_job}
    for kind in WORKLOAD_KINDS:
        try:
            response: Any = readers[kind](name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        try:
            obj: dict[str, Any] = json.loads(response.data)
        finally:
            response.release_conn()
        obj.setdefault("kind", kind)
        if kind == "Deployment":
            listed = _items(partial(apps.list_namespaced_replica_set, namespace), "ReplicaSet", page_size)
            creators = [rs for rs in listed if owned_by(rs, kind, name)]
        else:
            creators = [obj]
        events: list[dict[str, Any]] = []
        for creator in creators:
            selector = f"involvedObject.kind={creator['kind']},involvedObject.name={creator['metadata']['name']}"
            events += _items(partial(core.list_namespaced_event, namespace, field_selector=selector), "Event",
                             page_size)
        pods = list(_items(partial(core.list_namespaced_pod, namespace), "Pod", page_size))
        return _view(kind, obj, creators, events, pods, namespace)
    return None
