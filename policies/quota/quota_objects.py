"""GPU quota objects as the systems that enforce them read them.

Three mechanisms limit what a namespace's pods may hold on ACK:

- Kubernetes ``ResourceQuota`` (``spec.hard``): the API server's quota admission refuses a pod whose
  requests would pass a hard limit. An extended resource (``aliyun.com/gpu-mem``) is counted only under
  ``requests.<name>``: ``isExtendedResourceNameForQuota`` in kubernetes ``pkg/quota/v1/evaluator/core/pods.go``
  ("only quota objects in format of requests.resourceName is allowed"). A bare or ``limits.`` key is
  accepted by validation (a name with a "/" is a valid resource name) and limits nothing.
- ACK capacity scheduling's ``ElasticQuotaTree`` (``scheduling.sigs.k8s.io``; one tree, in kube-system):
  each node of ``spec.root`` has ``min`` (guaranteed) and ``max`` (the most it may use, borrowing
  included), leaves name ``namespaces``; a pod whose requests added to its quota node's usage pass
  ``max`` is not scheduled (it waits). ACK documentation: "Work with capacity scheduling"; "Improve
  resource utilization with ElasticQuotaTree and task queues" (min <= max on one node).
- Kueue's ``ClusterQueue`` (``kueue.x-k8s.io``): ``spec.resourceGroups[].flavors[].resources[]`` with
  ``nominalQuota`` (and ``borrowingLimit``, ``lendingLimit``); a workload beyond it stays suspended.

This module reads them; no rule logic and no cluster state here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from policies.model.quantity import QuantityError, parse_quantity
from policies.model.resources import Path, render_path
from policies.model.settings import Names

RESOURCE_QUOTA = "ResourceQuota"
ELASTIC_QUOTA_TREE = "ElasticQuotaTree"
CLUSTER_QUEUE = "ClusterQueue"
LOCAL_QUEUE = "LocalQueue"
QUOTA_KINDS = (RESOURCE_QUOTA, ELASTIC_QUOTA_TREE, CLUSTER_QUEUE)
# What the cluster state keeps: the quota objects, and Kueue's LocalQueues (a namespace's name for a
# ClusterQueue, spec.clusterQueue; a workload names its LocalQueue in the kueue.x-k8s.io/queue-name label).
STATE_KINDS = (*QUOTA_KINDS, LOCAL_QUEUE)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The API groups of the custom quota kinds: an object of another group with the same kind name is not one.
QUOTA_GROUPS = {ELASTIC_QUOTA_TREE: "scheduling.sigs.k8s.io", CLUSTER_QUEUE: "kueue.x-k8s.io", RESOURCE_QUOTA: "",
                LOCAL_QUEUE: "kueue.x-k8s.io"}

# The largest int32: data-on-ack's default ElasticQuotaTree writes it for "no limit" on every resource.
UNLIMITED = Decimal(2147483647)
# What the quota API counts extended resources under (pods.go: corev1.DefaultResourceRequestsPrefix).
REQUESTS = "requests."
LIMITS = "limits."
# GPU memory past a pebibyte is no one's quota: it is bytes (16Gi is 17,179,869,184 of a GiB resource).
PEBIBYTE = 2**50


def gpu_resources(names: Names) -> tuple[str, ...]:
    """The GPU resource names a quota may limit: shared memory and compute, whole GPUs."""
    return names.resources.asked()


def quota_unit_bytes(names: Names) -> int:
    return 2**30 if names.memory_unit == "GiB" else 2**20


@dataclass(frozen=True, slots=True)
class QuotaValue:
    """One GPU value of a quota object: where it is, its resource, what is written, what it parses to."""

    path: Path
    resource: str
    raw: Any
    quantity: Decimal | None
    where: str  # how a message names the place: 'spec.hard["requests.aliyun.com/gpu-mem"]'


def _parse(raw: Any) -> Decimal | None:
    try:
        return parse_quantity(raw)
    except QuantityError:
        return None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def group_matches(kind: str, obj: dict[str, Any]) -> bool:
    """Whether ``obj`` is the quota kind its name says (its apiVersion's group is the kind's)."""
    api = obj.get("apiVersion")
    group = api.rsplit("/", 1)[0] if isinstance(api, str) and "/" in api else ""
    return group == QUOTA_GROUPS.get(kind)


# -- ResourceQuota -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class QuotaKey:
    """A key of ``spec.hard`` naming a GPU resource: its prefix ("requests.", "limits." or "") and resource."""

    key: str
    prefix: str
    resource: str
    value: QuotaValue


def resource_quota_keys(obj: dict[str, Any], names: Names) -> list[QuotaKey]:
    """Every key of ``spec.hard`` naming a GPU resource, with or without a prefix."""
    hard = _mapping(_mapping(obj.get("spec")).get("hard"))
    gpu = set(gpu_resources(names))
    found = []
    for key, raw in hard.items():
        if not isinstance(key, str):
            continue
        for prefix in (REQUESTS, LIMITS, ""):
            if key.startswith(prefix) and key[len(prefix):] in gpu:
                resource = key[len(prefix):]
                path: Path = ("spec", "hard", key)
                found.append(QuotaKey(key, prefix, resource,
                                      QuotaValue(path, resource, raw, _parse(raw), f'spec.hard["{key}"]')))
                break
    return found


def scoped(obj: dict[str, Any]) -> bool:
    """A quota with scopes counts only the pods they match (Terminating, BestEffort, PriorityClass...)."""
    spec = _mapping(obj.get("spec"))
    return bool(spec.get("scopes")) or bool(spec.get("scopeSelector"))


# -- ElasticQuotaTree --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TreeNode:
    """One node of an ElasticQuotaTree, with where it is and its ancestors' names."""

    name: str
    path: Path
    min: dict[str, QuotaValue]
    max: dict[str, QuotaValue]
    namespaces: tuple[str, ...]
    ancestors: tuple[str, ...]  # from the root down, not itself
    is_root: bool


def _limits(node: dict[str, Any], label: str, field: str, path: Path,
            resources: tuple[str, ...]) -> dict[str, QuotaValue]:
    block = _mapping(node.get(field))
    return {r: QuotaValue((*path, field, r), r, block[r], _parse(block[r]), f'quota node {label} {field}["{r}"]')
            for r in resources if r in block}


def tree_nodes(obj: dict[str, Any], names: Names) -> Iterator[TreeNode]:
    """Every node of the tree, depth first from ``spec.root`` (children in order)."""
    root = _mapping(obj.get("spec")).get("root")
    if not isinstance(root, dict):
        return
    resources = gpu_resources(names)
    todo: list[tuple[dict[str, Any], Path, tuple[str, ...]]] = [(root, ("spec", "root"), ())]
    while todo:
        node, path, ancestors = todo.pop()
        name = node.get("name")
        label = str(name) if isinstance(name, str) and name else render_tree_path(path)
        namespaces = node.get("namespaces")
        yield TreeNode(label, path, _limits(node, label, "min", path, resources),
                       _limits(node, label, "max", path, resources),
                       tuple(n for n in namespaces if isinstance(n, str)) if isinstance(namespaces, list) else (),
                       ancestors, not ancestors)
        children = node.get("children")
        if isinstance(children, list):
            for index in reversed(range(len(children))):
                if isinstance(children[index], dict):
                    todo.append((children[index], (*path, "children", index), (*ancestors, label)))


def render_tree_path(path: Path) -> str:
    return render_path(path)


# -- Kueue ClusterQueue ------------------------------------------------------------------------------

QUEUE_FIELDS = ("nominalQuota", "borrowingLimit", "lendingLimit")


def cluster_queue_values(obj: dict[str, Any], names: Names) -> list[tuple[str, QuotaValue]]:
    """(flavor, value) of every GPU resource's nominalQuota, borrowingLimit and lendingLimit."""
    gpu = set(gpu_resources(names))
    found = []
    groups = _mapping(obj.get("spec")).get("resourceGroups")
    for g, group in enumerate(groups if isinstance(groups, list) else ()):
        flavors = _mapping(group).get("flavors")
        for f, flavor in enumerate(flavors if isinstance(flavors, list) else ()):
            flavor_name = str(_mapping(flavor).get("name") or "")
            resources = _mapping(flavor).get("resources")
            for r, resource in enumerate(resources if isinstance(resources, list) else ()):
                resource = _mapping(resource)
                name = resource.get("name")
                if not isinstance(name, str) or name not in gpu:
                    continue
                for field in QUEUE_FIELDS:
                    if field in resource:
                        path: Path = ("spec", "resourceGroups", g, "flavors", f, "resources", r, field)
                        where = f'flavor "{flavor_name}" resource {name} {field}'
                        found.append((flavor_name, QuotaValue(path, str(name), resource[field],
                                                              _parse(resource[field]), where)))
    return found


def names_gpu(kind: str, obj: dict[str, Any], names: Names) -> bool:
    """Whether the quota object names a GPU resource anywhere it limits (what the webhook is sent)."""
    if kind == RESOURCE_QUOTA:
        return bool(resource_quota_keys(obj, names))
    if kind == ELASTIC_QUOTA_TREE:
        return any(node.min or node.max for node in tree_nodes(obj, names))
    if kind == CLUSTER_QUEUE:
        return bool(cluster_queue_values(obj, names))
    return False


def quota_sent(kind: str, obj: dict[str, Any], names: Names) -> bool:
    """What the quota webhook's matchCondition answers: a ResourceQuota or ClusterQueue that names a GPU
    resource, and every ElasticQuotaTree (CEL cannot walk a tree of any depth; ACK keeps one, in
    kube-system, edited by admins, so sending it whole costs nothing). Read leniently, as CEL reads it."""
    if kind == ELASTIC_QUOTA_TREE:
        return True
    return names_gpu(kind, obj, names)
