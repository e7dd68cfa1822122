"""What each GPU quota of a namespace has used and has left, counted as the quota's enforcer counts it.

What each pod charges, and those charges summed per namespace, are policies/model/pod_usage.py
(ResourceQuota's ``QuotaV1Pod`` and ``PodRequests``); here are the limits they are held against.

ElasticQuotaTree (ACK "Work with capacity scheduling"): a pod is scheduled if its requests added to its
quota node's usage stay within max; the usage is that of the pods the scheduler has placed (bound to a
node, not finished) in the namespaces below the node. Every node from the namespace's leaf up to the
root limits it.

Nothing here reads the clock or the cluster: callers pass both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from policies.model.pod_usage import PodUsage, UsageIndex
from policies.model.quantity import QuantityError, parse_quantity
from policies.model.settings import Names
from policies.quota.quota_objects import (
    CLUSTER_QUEUE,
    ELASTIC_QUOTA_TREE,
    LOCAL_QUEUE,
    REQUESTS,
    RESOURCE_QUOTA,
    UNLIMITED,
    cluster_queue_values,
    group_matches,
    resource_quota_keys,
    scoped,
    tree_nodes,
)


@dataclass(frozen=True, slots=True)
class QuotaLimit:
    """One GPU limit that applies to a namespace, with what is used and left under it."""

    mechanism: str  # ResourceQuota or ElasticQuotaTree
    label: str  # 'ResourceQuota team-a/gpu', 'ElasticQuotaTree kube-system/t quota node team-a'
    key: str  # what the quota writes: 'requests.aliyun.com/gpu-mem', 'max["aliyun.com/gpu-mem"]'
    resource: str
    hard: int
    used: int

    @property
    def left(self) -> int:
        return max(self.hard - self.used, 0)


def _whole(value: Decimal | None) -> int | None:
    if value is None or value < 0:
        return None
    return int(value)


def quota_limits(namespace: str, quotas: Iterable[tuple[str, dict[str, Any]]],
                 pods: Iterable[PodUsage] | UsageIndex, names: Names, now: float,
                 queue: str | None = None) -> list[QuotaLimit]:
    """Every GPU memory and compute limit on ``namespace``: its ResourceQuotas' ``requests.`` keys (quotas
    with scopes left out: they count only the pods their scopes match), the max of each quota node
    from its ElasticQuotaTree leaf up to the root (2147483647, "unlimited", left out), and for a workload
    naming a Kueue LocalQueue (``queue``), its ClusterQueue's quota."""
    r = names.resources
    counted = (r.gpu_mem, r.gpu_core)
    usage = pods if isinstance(pods, UsageIndex) else UsageIndex(pods)
    quotas = list(quotas)
    limits: list[QuotaLimit] = []
    if queue:
        limits.extend(_queue_limits(namespace, queue, quotas, names))
    for kind, obj in quotas:
        if not group_matches(kind, obj):
            continue
        meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
        if kind == RESOURCE_QUOTA and meta.get("namespace") == namespace and not scoped(obj):
            for key in resource_quota_keys(obj, names):
                hard = _whole(key.value.quantity)
                if key.prefix != REQUESTS or key.resource not in counted or hard is None:
                    continue
                used = usage.charged_usage(namespace, counted.index(key.resource), now)
                limits.append(QuotaLimit(RESOURCE_QUOTA, f"ResourceQuota {namespace}/{meta.get('name')}",
                                         key.key, key.resource, hard, used))
        elif kind == ELASTIC_QUOTA_TREE:
            limits.extend(_tree_limits(namespace, obj, meta, usage, names))
    return limits


def _tree_limits(namespace: str, obj: dict[str, Any], meta: Mapping[str, Any], usage: UsageIndex,
                 names: Names) -> list[QuotaLimit]:
    nodes = list(tree_nodes(obj, names))
    leaf = next((n for n in nodes if namespace in n.namespaces), None)
    if leaf is None:
        return []
    below: dict[str, set[str]] = {n.name: set() for n in nodes}  # namespaces under each node
    for n in nodes:
        for name in (*n.ancestors, n.name):
            below.setdefault(name, set()).update(n.namespaces)
    r = names.resources
    found = []
    for n in nodes:
        if n.name not in (*leaf.ancestors, leaf.name):
            continue
        for index, resource in enumerate((r.gpu_mem, r.gpu_core)):
            value = n.max.get(resource)
            hard = _whole(value.quantity) if value is not None else None
            if hard is None or value is None or value.quantity == UNLIMITED:
                continue
            used = usage.placed_usage(below[n.name], index)
            found.append(QuotaLimit(ELASTIC_QUOTA_TREE,
                                    f"ElasticQuotaTree {meta.get('namespace')}/{meta.get('name')} quota node {n.name}",
                                    f'max["{resource}"]', resource, hard, used))
    return found


def _queue_limits(namespace: str, queue: str, quotas: list[tuple[str, dict[str, Any]]],
                  names: Names) -> list[QuotaLimit]:
    """The ClusterQueue a LocalQueue of ``namespace`` named ``queue`` points at (``spec.clusterQueue``): per
    GPU resource, the nominalQuota of its flavors added up (a workload takes one flavor: adding them is never
    stricter than Kueue), plus each borrowingLimit when it is in a cohort (with a cohort and no
    borrowingLimit it may borrow whatever the cohort has unused: nothing is said); used is what Kueue
    reports reserved (``status.flavorsReservation``)."""
    local = next((obj for kind, obj in quotas if kind == LOCAL_QUEUE and group_matches(kind, obj)
                  and _meta(obj).get("namespace") == namespace and _meta(obj).get("name") == queue), None)
    target = _spec(local).get("clusterQueue") if local is not None else None
    cluster_queue = next((obj for kind, obj in quotas if kind == CLUSTER_QUEUE and group_matches(kind, obj)
                          and _meta(obj).get("name") == target), None)
    if cluster_queue is None:
        return []
    spec = _spec(cluster_queue)
    cohort = spec.get("cohort") or spec.get("cohortName")
    values = cluster_queue_values(cluster_queue, names)
    r = names.resources
    found = []
    for resource in (r.gpu_mem, r.gpu_core):
        nominal = [v for _, v in values if v.resource == resource and v.path[-1] == "nominalQuota"]
        borrowing = [v for _, v in values if v.resource == resource and v.path[-1] == "borrowingLimit"]
        if not nominal or any(v.quantity is None or v.quantity == UNLIMITED for v in (*nominal, *borrowing)):
            continue
        if cohort and len(borrowing) < len(nominal):
            continue
        hard = sum(int(v.quantity) for v in nominal if v.quantity is not None)
        if cohort:
            hard += sum(int(v.quantity) for v in borrowing if v.quantity is not None)
        found.append(QuotaLimit(CLUSTER_QUEUE, f"ClusterQueue {target} (LocalQueue {namespace}/{queue})",
                                f'nominalQuota["{resource}"]' + (f' + borrowingLimit["{resource}"]' if cohort else ""),
                                resource, hard,
                                _reserved(cluster_queue, resource)))
    return found


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = obj.get("spec") if obj is not None else None
    return spec if isinstance(spec, dict) else {}


def _reserved(cluster_queue: Mapping[str, Any], resource: str) -> int:
    """What Kueue reports reserved of ``resource`` over every flavor (ClusterQueueStatus.flavorsReservation)."""
    status = cluster_queue.get("status")
    flavors = status.get("flavorsReservation") if isinstance(status, dict) else None
    total = 0
    for flavor in flavors if isinstance(flavors, list) else ():
        resources = flavor.get("resources") if isinstance(flavor, dict) else None
        for used in resources if isinstance(resources, list) else ():
            if isinstance(used, dict) and used.get("name") == resource:
                try:
                    total += max(int(parse_quantity(used.get("total", 0))), 0)
                except QuantityError:
                    continue
    return total


@dataclass(frozen=True, slots=True)
class QuotaShare:
    """One row of a team's share: the namespaces a GPU limit covers, and its used / quota / left."""

    namespaces: tuple[str, ...]
    limit: QuotaLimit


def quota_shares(quotas: Iterable[tuple[str, dict[str, Any]]], pods: Iterable[PodUsage], names: Names,
                 now: float) -> list[QuotaShare]:
    """Every GPU limit of the cluster with what it has used and left: per ResourceQuota (its namespace), per
    ElasticQuotaTree node (the namespaces below it), per ClusterQueue (the namespaces whose LocalQueues name
    it). What ``inspect --quotas`` shows and the metrics export."""
    quotas = list(quotas)
    usage = UsageIndex(pods)
    namespaces: set[str] = set()
    queues: list[tuple[str, str]] = []
    for kind, obj in quotas:
        meta = _meta(obj)
        if kind == RESOURCE_QUOTA and isinstance(meta.get("namespace"), str):
            namespaces.add(meta["namespace"])
        elif kind == ELASTIC_QUOTA_TREE and group_matches(kind, obj):
            namespaces.update(n for node in tree_nodes(obj, names) for n in node.namespaces)
        elif kind == LOCAL_QUEUE and group_matches(kind, obj) and isinstance(meta.get("name"), str):
            queues.append((str(meta.get("namespace") or ""), meta["name"]))
    covered: dict[tuple[str, str, str], set[str]] = {}
    found: dict[tuple[str, str, str], QuotaLimit] = {}
    for namespace in sorted(namespaces):
        for limit in quota_limits(namespace, quotas, usage, names, now):
            key = (limit.label, limit.key, limit.resource)
            found.setdefault(key, limit)
            covered.setdefault(key, set()).add(namespace)
    for namespace, queue in sorted(queues):
        for limit in _queue_limits(namespace, queue, quotas, names):
            key = (limit.label.split(" (", 1)[0], limit.key, limit.resource)
            found.setdefault(key, replace(limit, label=key[0]))
            covered.setdefault(key, set()).add(namespace)
    return [QuotaShare(tuple(sorted(covered[key])), found[key]) for key in sorted(found)]


