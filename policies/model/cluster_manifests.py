"""Nodes and pods read from their manifests (a watch event's object or a snapshot file's): a node's
GPU resources, labels and taints; a pod's GPU requests, the cards it was given, its env and the
fields quotas charge."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.model.cluster import NodeInfo, PodGPU, PodInfo
from policies.model.isolation_findings import pod_env
from policies.model.quantity import QuantityError, parse_quantity
from policies.model.resources import (
    ContainerRequest,
    ShapeError,
    cards_per_container,
    container_requests,
    effective_request,
)
from policies.model.selectors import NodeSelector, node_selector_from_spec
from policies.model.settings import Names


def _resource_ints(block: Any, keep: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    if not isinstance(block, dict):
        return out
    for name in keep:
        if name in block:
            try:
                value = parse_quantity(block[name])
            except QuantityError:
                continue
            out[name] = int(value)
    return out


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def node_resource_names(names: Names) -> tuple[str, ...]:
    return names.resources.names()


def is_gpu_node(node: NodeInfo, names: Names) -> bool:
    """A node the GPU rules care about: it shows GPUs (capacity of a GPU resource, a card label)
    or carries the GPU scheduling label."""
    labels = names.labels
    if any(key in node.labels for key in (labels.schedule, labels.card_name, labels.card_count)):
        return True
    return any(node.capacity.get(r) or node.allocatable.get(r) for r in node_resource_names(names))


def mapping_or_empty(value: Any) -> dict[str, Any]:
    """``value`` when it is a mapping, else empty: a malformed manifest projects to an empty field."""
    return value if isinstance(value, dict) else {}


def node_from_manifest(obj: dict[str, Any], names: Names) -> NodeInfo:
    """Project a Node object into a NodeInfo."""
    meta = mapping_or_empty(obj.get("metadata"))
    spec = mapping_or_empty(obj.get("spec"))
    status = mapping_or_empty(obj.get("status"))
    keep = node_resource_names(names)
    addresses = status.get("addresses")
    internal_ip = next((a.get("address", "") for a in addresses
                        if isinstance(a, dict) and a.get("type") == "InternalIP"), "") \
        if isinstance(addresses, list) else ""
    info = mapping_or_empty(status.get("nodeInfo"))
    return NodeInfo(
        name=str(meta.get("name", "")),
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        provider_id=str(spec.get("providerID") or ""),
        internal_ip=str(internal_ip),
        allocatable=_resource_ints(status.get("allocatable"), keep),
        capacity=_resource_ints(status.get("capacity"), keep),
        kubelet_version=str(info.get("kubeletVersion") or ""),
        container_runtime=str(info.get("containerRuntimeVersion") or ""),
        os_image=str(info.get("osImage") or ""),
    )


@dataclass(slots=True)  # not frozen, as PodGPU: built for every review
class PodGPUs:
    """What a pod asks of the GPUs: its app containers' shared GPU (on cards), its init containers'
    gpu-mem (on no card), and its effective requests of whole GPUs."""

    gpus: tuple[PodGPU, ...]
    init_gpus: tuple[PodGPU, ...]
    topology: int
    exclusive: int


def shared_gpus(requests: Sequence[ContainerRequest], names: Names, labels: Mapping[str, str]) -> PodGPUs:
    """A pod's GPU requests from its parsed containers and its labels (the multi-GPU label).

    Only spec.containers go on cards: init containers run to completion before the app containers
    start, and the GPU-sharing scheduler and device plugin count spec.containers alone
    (AliyunContainerService/gpushare-scheduler-extender pkg/utils/pod.go,
    GetGPUMemoryFromPodResource; gpushare-device-plugin pkg/gpu/nvidia/podutils.go,
    getGPUMemoryFromPodResource). Whole GPUs are kube-scheduler's to count: its effective request.
    """
    spread = cards_per_container(labels, names) or 1
    core_name = names.resources.gpu_core
    gpus: list[PodGPU] = []
    init: list[PodGPU] = []
    for request in requests:
        mem = request.memory(names, spread)
        if mem is None:
            continue
        core = request.amount(core_name)
        if request.is_app:
            gpus.append(PodGPU(request.name, mem, int(core) if core is not None else 0, request.index, spread))
        else:
            init.append(PodGPU(request.name, mem, int(core) if core is not None else 0))
    r = names.resources
    return PodGPUs(tuple(gpus), tuple(init), effective_request(requests, r.gpu_topology),
                   effective_request(requests, r.gpu_exclusive))


def pod_card_annotations(names: Names) -> tuple[str, ...]:
    """The pod annotations a PodInfo keeps: which cards a pod holds, whether the device plugin
    assigned them yet (the audit's GA006), and its exemption (the audit honours it too)."""
    cards = names.card_annotations
    assignment = tuple(name for pair in names.assignment.pairs for name in pair)
    return (names.allocation_annotation, names.card_index_annotation, cards.core_allocation,
            cards.topology_visible, *assignment, names.exempt_annotation, names.exempt_reason_annotation)


def _pending_selector(spec: Any) -> NodeSelector | None:
    """The node constraints of an unbound pod (None when it has none or they are malformed)."""
    if not isinstance(spec, dict) or spec.get("nodeName") or not (spec.get("nodeSelector") or spec.get("affinity")):
        return None
    try:
        selector = node_selector_from_spec(spec, ("spec",))
    except ShapeError:
        return None
    return None if selector.empty else selector


def pod_from_manifest(obj: dict[str, Any], names: Names, requests: list[ContainerRequest] | None = None, *,
                      with_env: bool = True) -> PodInfo:
    """Project a Pod object into a PodInfo, keeping only the card-allocation annotations
    (``requests``: the pod's container requests when the caller has parsed them already; ``with_env``
    False: a record for placements alone, without what GS010 and GS011 report, which only the audit reads)."""
    meta = mapping_or_empty(obj.get("metadata"))
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        annotations = {}
    kept = {k: str(annotations[k]) for k in pod_card_annotations(names) if k in annotations}
    spec = obj.get("spec")
    if requests is None:
        requests = container_requests(spec, ("spec",), names) if isinstance(spec, dict) else []
    labels = _str_map(meta.get("labels"))
    found = shared_gpus(requests, names, labels)
    return PodInfo(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        node_name=str(mapping_or_empty(obj.get("spec")).get("nodeName") or ""),
        phase=str(mapping_or_empty(obj.get("status")).get("phase") or ""),
        gpus=found.gpus,
        annotations=kept,
        topology_gpus=found.topology,
        # Whole exclusive GPUs matter only for pods without shared or topology GPUs (GB002 on topology nodes).
        exclusive_gpus=found.exclusive if not found.gpus and not found.topology else 0,
        scheduler_name=sys.intern(str(mapping_or_empty(spec).get("schedulerName") or "")),
        selector=_pending_selector(spec),
        init_gpus=found.init_gpus,
        env=pod_env(spec, requests, labels, names) if with_env and isinstance(spec, dict) else None,
        deleting=bool(meta.get("deletionTimestamp")),
        **_quota_fields(requests, spec, meta, names),
    )


def _quota_fields(requests: list[ContainerRequest], spec: Any, meta: dict[str, Any], names: Names) -> dict[str, Any]:
    """What GPU quotas charge the pod (nothing for the many pods asking for no GPU)."""
    overhead = mapping_or_empty(spec).get("overhead")
    overhead = overhead if isinstance(overhead, dict) else None
    if not requests and not overhead:
        return {}
    from policies.model.pod_usage import deletion_deadline, pod_requests

    r = names.resources
    return {"quota_mem": pod_requests(requests, overhead, r.gpu_mem),
            "quota_core": pod_requests(requests, overhead, r.gpu_core),
            "deletion_deadline": deletion_deadline(meta)}
