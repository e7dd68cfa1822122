"""Cluster state as the rules see it: nodes and shared-GPU pods, reduced to what rules need.

The webhook fills a ``ClusterSnapshot`` (``cluster_snapshot``) from a snapshot file or from a
live watch; rules only read it, through ``ClusterState``. Raw Kubernetes objects are projected
(``cluster_manifests``) into the small frozen records defined here on the way in, so 150,000 pods
cost little memory and nothing mutable leaks into policy code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from policies.model.isolation_findings import PodEnv
from policies.model.selectors import NodeSelector


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
    # What GPU quotas charge it (policies/model/pod_usage.py): PodRequests of gpu-mem and gpu-core, and
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
        from policies.model.pod_usage import usage_index

        return usage_index(self.pods())

    def pods(self) -> list[PodInfo]:
        found = getattr(self.base, "pods", None)
        return found() if found is not None else []


