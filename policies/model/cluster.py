"""Cluster state as the rules see it: nodes and shared-GPU pods, reduced to what rules need.

The webhook fills a ``ClusterSnapshot`` from a snapshot file or from a live watch; rules
only read it. Raw Kubernetes objects are projected into small frozen records on the way
in, so 150,000 pods cost little memory and nothing mutable leaks into policy code.
"""

from __future__ import annotations

import sys
import threading
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from policies.model.isolation import PodEnv, pod_env
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


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    provider_id: str
    internal_ip: str
    allocatable: dict[str, int]
    capacity: dict[str, int]
    kubelet_version: str = ""
    container_runtime: str = ""
    os_image: str = ""
    # The CPU manager policy the node's kubelet reported (its /configz, read by the opt-in live
    # source); empty when not read. The node's label or annotation wins (placement.cpu_manager_policy).
    kubelet_cpu_manager_policy: str = ""

# Not frozen (never changed all the same): a frozen dataclass's __init__ cost four times as much, and
# GC001 builds these for every review; hashable, as keys of the capacity index's verdicts.
@dataclass(slots=True, unsafe_hash=True)
class PodGPU:
    """One container's shared-GPU request inside a pod record."""

    container: str
    mem: int  # the container's gpu-mem
    core: int
    # Position in spec.containers (None for init containers): the key of the scheduler's
    # per-container allocation annotation.
    index: int | None = None
    # The cards ``mem`` is spread over, ``mem / cards`` on each (ACK "Use cGPU to achieve GPU
    # sharing based on multiple GPUs": the pod label aliyun.com/gpu-count); 1 for most pods.
    cards: int = 1

    @property
    def mem_per_card(self) -> int:
        return self.mem // self.cards

    @property
    def core_per_card(self) -> int:
        """Compute on each card. The multi-GPU page is silent on compute: divided like memory and
        rounded down, so a spread container never counts as needing more than it asked for."""
        return self.core // self.cards


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    node_name: str
    phase: str
    # The app containers' shared-GPU requests: what the GPU-sharing scheduler places on cards. It
    # counts spec.containers only (AliyunContainerService/gpushare-scheduler-extender,
    # pkg/utils/pod.go, GetGPUMemoryFromPodResource; the device plugin's podutils.go likewise).
    gpus: tuple[PodGPU, ...]
    annotations: dict[str, str]
    topology_gpus: int = 0
    exclusive_gpus: int = 0
    scheduler_name: str = ""
    # The hard node constraints of a pod not bound yet (``explain`` ranks it); None once bound,
    # so 150,000 running pods carry nothing here.
    selector: NodeSelector | None = None
    # gpu-mem on init containers: held on no card (the audit re-judges it, rule GS008).
    init_gpus: tuple[PodGPU, ...] = ()
    # What it sets in the variables the device plugin and cGPU own, when GS010 or GS011 report it
    # (the audit judges it again); None for nearly every pod.
    env: PodEnv | None = None
    # metadata.deletionTimestamp is set: the pod is being deleted (it may run out its grace period).
    deleting: bool = False
    # What GPU quotas charge it (policies/quota/quota_usage.py): PodRequests of gpu-mem and gpu-core, and
    # when its deletion's grace period ends (QuotaV1Pod stops charging it then).
    quota_mem: int = 0
    quota_core: int = 0
    deletion_deadline: float | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def mem(self) -> int:
        return sum(g.mem for g in self.gpus)

    @property
    def core(self) -> int:
        return sum(g.core for g in self.gpus)

    @property
    def uses_shared_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def is_core_mem(self) -> bool:
        return any(g.core for g in self.gpus)

    @property
    def uses_gpu(self) -> bool:
        """It holds shared, topology or exclusive GPUs."""
        return bool(self.gpus) or self.topology_gpus > 0 or self.exclusive_gpus > 0 or bool(self.init_gpus)

    @property
    def kept(self) -> bool:
        """Worth keeping in the state in full: it uses GPUs, or sets what GS010 or GS011 report (a
        GPU-free pod exposing the node's GPUs to itself), or a GPU quota charges it."""
        return self.uses_gpu or self.env is not None or self.quota_mem > 0 or self.quota_core > 0

    @property
    def terminated(self) -> bool:
        """Finished, or being deleted: it holds no card. The GPU-sharing scheduler drops such a pod
        from its cache (AliyunContainerService/gpushare-scheduler-extender, pkg/utils/pod.go
        ``IsCompletePod``: a deletionTimestamp, or phase Succeeded or Failed; used by
        pkg/gpushare/controller.go ``syncPod`` and ``updatePodInCache``), so a binding beside a pod
        still terminating on a full card is one it has decided."""
        return self.deleting or self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether stateful rules may trust the state, and if not, why (shown in messages)."""

    usable: bool
    reason: str = ""
    # Why nothing was checked, as the fail-mode message says it.
    cause: str = "the cluster state is not usable"
    # When a request denied for it (fail-closed) can succeed.
    retry_when: str = "the webhook has synced"


USABLE = Availability(True)


class ClusterState(Protocol):
    """What rules may ask of the cluster."""

    def availability(self) -> Availability: ...

    def get_node(self, name: str) -> NodeInfo | None: ...

    def has_pod(self, namespace: str, name: str) -> bool: ...

    def nodes(self) -> list[NodeInfo]: ...

    def get_pod(self, namespace: str, name: str) -> PodInfo | None: ...

    def pods_on_node(self, node: str) -> list[PodInfo]: ...


class StateView:
    """A ClusterState that reads ``base`` through; a view over the state (a replica's assumptions,
    a follower's answer) overrides only what it changes."""

    def __init__(self, base: ClusterState) -> None:
        self.base = base

    def availability(self) -> Availability:
        return self.base.availability()

    def get_node(self, name: str) -> NodeInfo | None:
        return self.base.get_node(name)

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        labels = getattr(self.base, "namespace_labels", None)
        return labels(namespace) if labels is not None else None

    def nodes(self) -> list[NodeInfo]:
        return self.base.nodes()

    def has_pod(self, namespace: str, name: str) -> bool:
        return self.base.has_pod(namespace, name)

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        return self.base.get_pod(namespace, name)

    def pods_on_node(self, node: str) -> list[PodInfo]:
        return self.base.pods_on_node(node)

    def quota_objects(self) -> list[tuple[str, dict[str, Any]]]:
        found = getattr(self.base, "quota_objects", None)
        return found() if found is not None else []

    def quota_usage(self) -> Any:
        found = getattr(self.base, "quota_usage", None)
        if found is not None:
            return found()
        from policies.quota.quota_usage import usage_index

        return usage_index(self.pods())

    def pods(self) -> list[PodInfo]:
        found = getattr(self.base, "pods", None)
        return found() if found is not None else []


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


def _mapping(value: Any) -> dict[str, Any]:
    """``value`` when it is a mapping, else empty: a malformed manifest projects to an empty field."""
    return value if isinstance(value, dict) else {}


def node_from_manifest(obj: dict[str, Any], names: Names) -> NodeInfo:
    """Project a Node object into a NodeInfo."""
    meta = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    status = _mapping(obj.get("status"))
    keep = node_resource_names(names)
    addresses = status.get("addresses")
    internal_ip = next((a.get("address", "") for a in addresses
                        if isinstance(a, dict) and a.get("type") == "InternalIP"), "") \
        if isinstance(addresses, list) else ""
    info = _mapping(status.get("nodeInfo"))
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
    meta = _mapping(obj.get("metadata"))
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
        node_name=str(_mapping(obj.get("spec")).get("nodeName") or ""),
        phase=str(_mapping(obj.get("status")).get("phase") or ""),
        gpus=found.gpus,
        annotations=kept,
        topology_gpus=found.topology,
        # Whole exclusive GPUs matter only for pods without shared or topology GPUs (GB002 on topology nodes).
        exclusive_gpus=found.exclusive if not found.gpus and not found.topology else 0,
        scheduler_name=sys.intern(str(_mapping(spec).get("schedulerName") or "")),
        selector=_pending_selector(spec),
        init_gpus=found.init_gpus,
        env=pod_env(spec, requests, labels, names) if with_env and isinstance(spec, dict) else None,
        deleting=bool(meta.get("deletionTimestamp")),
        **_quota_fields(requests, spec, meta, names),
    )


def _quota_fields(requests: list[ContainerRequest], spec: Any, meta: dict[str, Any], names: Names) -> dict[str, Any]:
    """What GPU quotas charge the pod (nothing for the many pods asking for no GPU)."""
    overhead = _mapping(spec).get("overhead")
    overhead = overhead if isinstance(overhead, dict) else None
    if not requests and not overhead:
        return {}
    from policies.quota.quota_usage import deletion_deadline, pod_requests

    r = names.resources
    return {"quota_mem": pod_requests(requests, overhead, r.gpu_mem),
            "quota_core": pod_requests(requests, overhead, r.gpu_core),
            "deletion_deadline": deletion_deadline(meta)}


class ClusterSnapshot:
    """An in-memory, thread-safe ClusterState; the live watch and snapshot files both fill one.

    Every change bumps a generation counter, records it on the node it touches and in a
    bounded change log, so derived per-node data (card occupancy for scoring) can be
    cached and refreshed for just the nodes that changed.
    """

    CHANGE_LOG = 65_536  # changes remembered; a reader further behind starts over

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}
        self._by_node: dict[str, dict[str, PodInfo]] = {}
        # Pods without GPUs are known by key only: a binding for one
        # is then "nothing to check", not "pod not seen yet".
        self._other: set[str] = set()
        self._generation = 0
        self._node_generation: dict[str, int] = {}
        self._log_generations: list[int] = []
        self._log_nodes: list[str] = []
        self._log_floor = 0  # changes after this generation are all in the log
        # Namespace labels (who allows annotation exemptions); None until Namespaces were seen.
        self._namespaces: dict[str, dict[str, str]] | None = None
        # GPU quota objects (ResourceQuota, ElasticQuotaTree, ClusterQueue) by (kind, namespace, name).
        self._quotas: dict[tuple[str, str, str], dict[str, Any]] = {}
        # Increases with every change to a quota object (the metrics refresh when it moves).
        self.quota_generation = 0
        # Increases with every pod stored or dropped, bound or not (``generation`` follows nodes' changes
        # only; quotas charge pending pods too): what GQ005's usage is kept for.
        self.pod_generation = 0
        # What quotas charge, summed per namespace and kept current pod by pod (policies/quota/quota_usage.py),
        # so that a review adds up namespaces rather than every pod; built on first use.
        self._quota_usage: Any = None

    def _touch(self, node: str) -> None:
        self._generation += 1
        self._node_generation[node] = self._generation
        self._log_generations.append(self._generation)
        self._log_nodes.append(node)
        if len(self._log_generations) > self.CHANGE_LOG:
            half = self.CHANGE_LOG // 2
            self._log_floor = self._log_generations[half - 1]
            del self._log_generations[:half], self._log_nodes[:half]

    def changes_since(self, generation: int) -> list[str] | None:
        """Names of the nodes changed (themselves or their pods) after ``generation``, or None
        when the log no longer reaches that far back."""
        with self._lock:
            if generation < self._log_floor:
                return None
            start = bisect_right(self._log_generations, generation)
            return self._log_nodes[start:]

    @property
    def generation(self) -> int:
        """Increases with every change to any node or pod."""
        return self._generation

    def writes_held(self) -> AbstractContextManager[Any]:
        """Holds every change off while in use: a moment when no writer is half-way through one
        (the server forks its audit process inside it)."""
        return self._lock

    def node_generation(self, name: str) -> int:
        """The generation of the last change to this node or to the pods on it."""
        return self._node_generation.get(name, 0)

    def availability(self) -> Availability:
        return USABLE

    def record_pod(self, pod: PodInfo) -> None:
        """Keep a pod as the rules need it: in full when it asks for GPUs (finished ones too, which
        rules skip and ``inspect`` shows) or sets what GS010 or GS011 report, else by key only."""
        key = pod.key
        if pod.kept:
            with self._lock:
                self._other.discard(key)
                self.upsert_pod(pod)
            return
        with self._lock:
            if key in self._pods:
                self._drop_pod(key)
            self._other.add(key)

    def upsert_node(self, node: NodeInfo) -> None:
        with self._lock:
            self._nodes[node.name] = node
            self._touch(node.name)

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._nodes.pop(name, None)
            self._touch(name)

    def upsert_pod(self, pod: PodInfo) -> None:
        with self._lock:
            self.pod_generation += 1
            self._drop_pod(pod.key)
            self._pods[pod.key] = pod
            if self._quota_usage is not None and (pod.quota_mem or pod.quota_core):
                from policies.quota.quota_usage import pod_usage

                self._quota_usage.add(pod_usage(pod), 1)
            if pod.node_name:
                self._by_node.setdefault(pod.node_name, {})[pod.key] = pod
                self._touch(pod.node_name)

    def remove_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self._drop_pod(f"{namespace}/{name}")
            self._other.discard(f"{namespace}/{name}")

    def has_pod(self, namespace: str, name: str) -> bool:
        key = f"{namespace}/{name}"
        return key in self._pods or key in self._other

    def pod_keys(self) -> set[str]:
        """Every pod the snapshot knows, with or without GPUs."""
        with self._lock:
            return set(self._pods) | self._other

    def _drop_pod(self, key: str) -> None:
        old = self._pods.pop(key, None)
        if old is not None:
            self.pod_generation += 1
            if self._quota_usage is not None and (old.quota_mem or old.quota_core):
                from policies.quota.quota_usage import pod_usage

                self._quota_usage.add(pod_usage(old), -1)
        if old is not None and old.node_name:
            self._touch(old.node_name)
            on_node = self._by_node.get(old.node_name)
            if on_node is not None:
                on_node.pop(key, None)
                if not on_node:
                    del self._by_node[old.node_name]

    def upsert_namespace(self, name: str, labels: dict[str, str]) -> None:
        with self._lock:
            if self._namespaces is None:
                self._namespaces = {}
            self._namespaces[name] = labels

    def remove_namespace(self, name: str) -> None:
        with self._lock:
            if self._namespaces is not None:
                self._namespaces.pop(name, None)

    def upsert_quota(self, kind: str, obj: dict[str, Any]) -> None:
        """Keep a quota object as read (they are few: one per team and namespace)."""
        meta = _mapping(obj.get("metadata"))
        with self._lock:
            self._quotas[(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = obj
            self.quota_generation += 1

    def remove_quota(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            self._quotas.pop((kind, namespace, name), None)
            self.quota_generation += 1

    def quota_objects(self) -> list[tuple[str, dict[str, Any]]]:
        """(kind, object) of every quota object held, in a stable order."""
        with self._lock:
            return [(key[0], obj) for key, obj in sorted(self._quotas.items())]

    def quota_usage(self) -> Any:
        """A copy of what quotas charge per namespace (``policies.quota.quota_usage.UsageIndex``)."""
        with self._lock:
            if self._quota_usage is None:
                from policies.quota.quota_usage import usage_index

                self._quota_usage = usage_index(self._pods.values())
            return self._quota_usage.copy()

    def namespace_names(self) -> set[str]:
        with self._lock:
            return set(self._namespaces or ())

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """The namespace's labels; None when no Namespaces were given or this one does not exist."""
        namespaces = self._namespaces
        return None if namespaces is None else namespaces.get(namespace)

    def get_node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            return list(self._nodes.values())

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        return self._pods.get(f"{namespace}/{name}")

    def pods(self) -> list[PodInfo]:
        with self._lock:
            return list(self._pods.values())

    def pods_on_node(self, node: str) -> list[PodInfo]:
        with self._lock:
            return list(self._by_node.get(node, {}).values())

    def counts(self) -> tuple[int, int]:
        """Nodes and GPU pods held in full."""
        return len(self._nodes), len(self._pods)
