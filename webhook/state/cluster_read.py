"""One read of nodes and pods from the API server (for ``inspect``; no watch).

Lists are paged (``limit``/``continue``) and read as raw JSON: a big cluster's pods never
become a list of client model objects, only the small records the state keeps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

from policies.model.cluster_snapshot import ClusterSnapshot
from policies.model.settings import Names
from policies.model.workloads import WorkloadKind
from webhook.state.paging import list_pages
from webhook.state.snapshot import snapshot_from_objects

PAGE_SIZE = 500


def _items(list_call: Callable[..., Any], kind: str, page_size: int) -> Iterator[dict[str, Any]]:
    for page in list_pages(list_call, json.loads, page_size):
        for item in page.get("items") or []:
            item.setdefault("kind", kind)  # list items come without their kind
            yield item


def read_cluster(api_client: Any, names: Names, page_size: int = PAGE_SIZE) -> ClusterSnapshot:
    """Nodes and GPU pods of the whole cluster, as a snapshot."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    nodes = _items(core.list_node, "Node", page_size)
    pods = _items(core.list_pod_for_all_namespaces, "Pod", page_size)
    return snapshot_from_objects([*nodes, *pods, *read_quotas(api_client, page_size)], names)


# The quota kinds the state reads besides ResourceQuota: (kind, group, versions tried in order, plural).
CUSTOM_QUOTAS = (("ElasticQuotaTree", "scheduling.sigs.k8s.io", ("v1beta1",), "elasticquotatrees"),
                 ("ClusterQueue", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "clusterqueues"),
                 ("LocalQueue", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "localqueues"))


def read_quotas(api_client: Any, page_size: int = PAGE_SIZE) -> list[dict[str, Any]]:
    """ResourceQuotas, ACK's ElasticQuotaTree and Kueue's ClusterQueues and LocalQueues (docs/quotas.md).
    A kind whose CRD is not installed (404), or that the caller may not list (403), is left out: most
    clusters run one mechanism, and the quotas only add to what is shown."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    found: list[dict[str, Any]] = []
    try:
        found.extend(_items(core.list_resource_quota_for_all_namespaces, "ResourceQuota", page_size))
    except ApiException as exc:
        if exc.status not in (403, 404):
            raise
    for kind, group, versions, plural in CUSTOM_QUOTAS:
        for version in versions:
            call = partial(custom.list_cluster_custom_object, group, version, plural)
            try:
                items = list(_items(call, kind, page_size))
            except ApiException as exc:
                if exc.status in (403, 404):
                    continue
                raise
            for item in items:
                item.setdefault("apiVersion", f"{group}/{version}")
            found.extend(items)
            break
    return found


def read_workloads(api_client: Any, kinds: Iterable[WorkloadKind],
                   page_size: int = PAGE_SIZE) -> tuple[list[dict[str, Any]], list[str]]:
    """Every object of the custom workload kinds the cluster serves (the first of each kind's versions
    it answers for), and notes on kinds that could not be read. A kind whose CRD is not installed
    answers 404 and is skipped without a word: most clusters run a few of them."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(api_client)
    found: list[dict[str, Any]] = []
    notes: list[str] = []
    for kind in kinds:
        versions = [v for v in kind.versions if v != "*"]
        if not versions:
            notes.append(f"{kind.name}: {kind.configured} names no version, so audit does not read it "
                         f"(list its versions there)")
        for version in versions:
            call = partial(custom.list_cluster_custom_object, kind.group, version, kind.plural)
            try:
                found.extend(_items(call, kind.kind, page_size))
            except ApiException as exc:
                if exc.status == 404:
                    continue  # not served (in this version)
                if exc.status != 403:
                    raise
                notes.append(f"{kind.name}: not allowed to list {kind.plural}.{kind.group} (HTTP 403)")
            break
    return found, notes
