"""The names the domain reads in objects: extended resources, labels, annotations, environment
variables, and GS007's near misses of the resource names (sections of ``names`` and ``near_miss``
in the settings, policies/model/settings.py)."""

# Annotations stay objects (no ``from __future__ import annotations``), as in policies/model/settings.py.
import re
from typing import ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from policies.model.settings_section import _Section

MemoryUnit = Literal["GiB", "MiB"]
# names.scheduler_name value that turns GM001 off (ACK Pro clusters).
NO_SCHEDULER = "none"
# No card holds more GiB than this (project choice: the largest GPUs sold hold under 300 GiB;
# four times that leaves room for a few generations). A larger gpu-mem is a typo or an attack,
# and fits nowhere: refused (GS003) and filtered out everywhere by the scheduler extender.
MAX_CARD_GIB = 1024
MIB_PER_GIB = 1024


class ResourceNames(_Section):
    """The extended resources the rules read: the one list of them. Every place that needs "the GPU
    resources" derives it from these fields (``names``, ``asked``): the validator below, the names
    read from containers (policies/model/resources.py), a node's GPU resources, the quota objects',
    GS007's known names, the rules' relevance and the tests' generators. A resource added here reaches
    them all; CONTRIBUTING.md, "A resource name", says what else a new one needs."""

    gpu_mem: str = "aliyun.com/gpu-mem"
    gpu_core: str = "aliyun.com/gpu-core.percentage"
    # A node's count of cards (allocatable, published by the device plugin); no container asks for it.
    gpu_count: str = "aliyun.com/gpu-count"
    gpu_topology: str = "aliyun.com/gpu"
    gpu_exclusive: str = "nvidia.com/gpu"

    # Fields naming what a node publishes only, never what a container asks for.
    NODE_ONLY: ClassVar[frozenset[str]] = frozenset({"gpu_count"})

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """Every resource field, in the order declared."""
        return tuple(cls.model_fields)

    @classmethod
    def asked_fields(cls) -> tuple[str, ...]:
        """The fields a container asks for in its limits or requests (all but ``NODE_ONLY``)."""
        return tuple(f for f in cls.model_fields if f not in cls.NODE_ONLY)

    def names(self) -> tuple[str, ...]:
        """Every resource name, in the order of ``fields``."""
        return tuple(getattr(self, f) for f in self.fields())

    def asked(self) -> tuple[str, ...]:
        """The resource names containers ask for, in the order of ``asked_fields``."""
        return tuple(getattr(self, f) for f in self.asked_fields())

    @field_validator("*")
    @classmethod
    def _no_white_space(cls, value: str) -> str:
        # A resource name is a qualified name (letters, digits, "-", "_", ".", one "/"): the API
        # server refuses one with white space, and the backstop's GS007 regexes rely on it.
        if not value or any(c.isspace() for c in value):
            raise ValueError("a resource name is not empty and has no white space")
        return value


class LabelNames(_Section):
    schedule: str = "ack.node.gpu.schedule"
    placement: str = "ack.node.gpu.placement"
    card_name: str = "aliyun.accelerator/nvidia_name"
    card_mem: str = "aliyun.accelerator/nvidia_mem"
    card_count: str = "aliyun.accelerator/nvidia_count"
    region: str = "topology.kubernetes.io/region"
    # Where the kubelet's CPU manager policy is published (label or annotation; it wins over the
    # opt-in state.kubelet_configz source); see docs/state.md, "CPU manager policy".
    cpu_manager_policy: str = "gpushare.io/cpu-manager-policy"
    # A pod label: spread each container's gpu-mem over this many cards of one node (ACK "Use cGPU
    # to achieve GPU sharing based on multiple GPUs": gpu-mem N over M cards, N/M on each).
    pod_gpu_count: str = "aliyun.com/gpu-count"


class CardAnnotationNames(_Section):
    """Annotations that say which cards a pod holds or how a node's cards are linked (read, never written)."""

    # ACK GPU sharing v2: {"<container index>": {"<card index>": <core percent>}}.
    core_allocation: str = "gpushare.alibabacloud.com/core-percentage"
    # ACK topology-aware scheduling: the whole GPUs a topology pod was given, "0,1".
    topology_visible: str = "topology.kubernetes.io/gpu-visible"
    # This project's node annotation: the interconnect bandwidth matrix (docs/scoring.md).
    node_topology: str = "gpushare.io/gpu-topology"


class AssignmentAnnotationNames(_Section):
    """Pod annotations the GPU-sharing scheduler and device plugin use to say whether a bound pod
    got its card yet (read, never written). The scheduler writes assigned="false" and the assume
    time (Unix nanoseconds) at binding; the device plugin flips assigned to "true" when the
    container starts. Sources: the open-source gpushare-scheduler-extender (pkg/utils/const.go,
    pkg/utils/pod.go: EnvAssignedFlag, EnvResourceAssumeTime) and gpushare-device-plugin
    (pkg/gpu/nvidia/podutils.go); ACK's v2 names as Koordinator's ACK compatibility constants
    spell them (AnnotationACKGPUShareAssigned, AnnotationACKGPUShareAssumeTime)."""

    # (assigned flag, assume time) pairs, tried in order; the first pair present on a pod wins.
    pairs: tuple[tuple[str, str], ...] = (
        ("scheduler.framework.gpushare.assigned", "scheduler.framework.gpushare.assume-time"),
        ("ALIYUN_COM_GPU_MEM_ASSIGNED", "ALIYUN_COM_GPU_MEM_ASSUME_TIME"),
    )


class EnvNames(_Section):
    """Environment variables through which the GPU-sharing device plugin and cGPU isolate a container
    (rules GS010 and GS011; docs/isolation.md gives each one's source). The kubelet puts a container's
    own env after the device plugin's, so a pod that sets one overrides it."""

    # GS010: set by the GPU-sharing device plugin (AliyunContainerService/gpushare-device-plugin,
    # pkg/gpu/nvidia/allocate.go: _IDX, _POD, _CONTAINER, _DEV) or read by cGPU
    # (ACK "Configure GPU sharing without GPU memory isolation": _CONTAINER, _DEV; Elastic GPU Service
    # "Install and use cGPU by using Docker": _VISIBLE_DEVICES; ACK "Configure Shared GPU Scheduling
    # cGPU Computing Power Scheduling Policy": _SCHD_WEIGHT). A container may not set them.
    device_plugin: tuple[str, ...] = ("ALIYUN_COM_GPU_MEM_DEV", "ALIYUN_COM_GPU_MEM_CONTAINER",
                                      "ALIYUN_COM_GPU_MEM_IDX", "ALIYUN_COM_GPU_MEM_POD",
                                      "ALIYUN_COM_GPU_VISIBLE_DEVICES", "ALIYUN_COM_GPU_SCHD_WEIGHT")
    # GS010, in containers asking for gpu-mem of pods that may run on mps nodes: the device plugin
    # started with --mps sets them (gpushare-device-plugin's MPS change, pkg/gpu/nvidia/allocate.go).
    mps: tuple[str, ...] = ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PIPE_DIRECTORY")
    # Judged by value (NVIDIA Container Toolkit, "Specialized Configurations with Docker"): all,
    # indices and UUIDs expose GPUs; none, void and empty do not. GS010 in a GPU container (the
    # device plugin sets it), GS011 in a GPU-free one.
    visible_devices: str = "NVIDIA_VISIBLE_DEVICES"
    # GS011: true or 1 switches cGPU's memory isolation off for the container (ACK "Disable the
    # memory isolation capability of cGPU").
    disable_isolation: str = "CGPU_DISABLE"

    @model_validator(mode="after")
    def _names_once(self) -> Self:
        listed = [*self.device_plugin, *self.mps, self.visible_devices, self.disable_isolation]
        if any(not name or any(c.isspace() or c == "=" for c in name) for name in listed):
            raise ValueError("an environment variable name is not empty and has no white space or '='")
        twice = sorted({n for n in listed if listed.count(n) > 1})
        if twice:
            raise ValueError(f"each variable is judged one way, so it is listed once: {', '.join(twice)}")
        return self


class Names(_Section):
    resources: ResourceNames = Field(default_factory=ResourceNames.model_construct)
    labels: LabelNames = Field(default_factory=LabelNames.model_construct)
    card_annotations: CardAnnotationNames = Field(default_factory=CardAnnotationNames.model_construct)
    # GM001: the scheduler set on shared-GPU pods, or "none" to set none. Registered clusters run
    # ack-co-scheduler (Shared GPU scheduling in registered clusters); ACK Pro clusters schedule
    # shared GPUs with their own kube-scheduler, where "none" is right. The deploy manifests make
    # the installer choose; outside a deployment (serve on a snapshot, check, /dry-run) this
    # default applies.
    scheduler_name: str = Field("ack-co-scheduler", min_length=1)
    default_scheduler: str = "default-scheduler"
    priority_class: str = "system-node-critical"
    gpushare_daemonsets: tuple[str, ...] = ("gpushare-device-plugin-ds",)
    # GM003 writes it; GS010 admits a container's own value only when it equals what GM003 writes.
    env_mem_container: str = "ALIYUN_COM_GPU_MEM_CONTAINER"
    env: EnvNames = Field(default_factory=EnvNames.model_construct)
    # The unit aliyun.com/gpu-mem counts in, on nodes and in pods alike. ACK counts GiB ("Allocate
    # computing power by scheduling shared GPU": gpu-mem 2 is 2 GiB); the open-source device plugin
    # can be started with --memory-unit=MiB (AliyunContainerService/gpushare-device-plugin,
    # cmd/nvidia/main.go), and then every count is MiB.
    memory_unit: MemoryUnit = "GiB"
    # ECS nodes' spec.providerID: REGION.INSTANCEID, bare or behind alicloud:// (policies/model/ecs.py
    # cites the cloud provider). Named groups "region" and "instance" are required.
    ecs_provider_id_pattern: str = r"(?:alicloud://)?(?P<region>[a-z]+(?:-[a-z0-9]+)+)\.(?P<instance>i-[a-z0-9]+)"
    # Where the GPU-sharing scheduler records the card it chose for a pod (read, never written).
    allocation_annotation: str = "scheduler.framework.gpushare.allocation"
    card_index_annotation: str = "ALIYUN_COM_GPU_MEM_IDX"
    exempt_annotation: str = "gpushare.io/exempt"
    exempt_reason_annotation: str = "gpushare.io/exempt-reason"
    assignment: AssignmentAnnotationNames = Field(default_factory=AssignmentAnnotationNames.model_construct)

    @property
    def max_card_memory(self) -> int:
        """The most gpu-mem one card can hold, in ``memory_unit`` (GS003's upper bound)."""
        return MAX_CARD_GIB * (MIB_PER_GIB if self.memory_unit == "MiB" else 1)

    @property
    def injected_scheduler(self) -> str | None:
        """The scheduler GM001 sets, or None when configured as "none"."""
        return None if self.scheduler_name.strip().lower() == NO_SCHEDULER else self.scheduler_name

    @field_validator("ecs_provider_id_pattern")
    @classmethod
    def _pattern_with_groups(cls, value: str) -> str:
        try:
            groups = re.compile(value).groupindex
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        if not {"region", "instance"} <= set(groups):
            raise ValueError("needs the named groups (?P<region>...) and (?P<instance>...)")
        return value


class NearMissSettings(_Section):
    """GS007: resource names that look like the shared-GPU names but are not them."""

    # Domains a near miss may be written under: the real one, Alibaba's other names, and
    # (always) typos within two edits of the real domain or no domain at all.
    # alibabacloud.com is not here: Alibaba's open-gpu-share and unified device scheduling use
    # alibabacloud.com/gpu-mem, gpu-core, ... as real, different resources.
    lookalike_domains: tuple[str, ...] = ("aliyun.com", "alibaba.com", "alicloud.com", "aliyun.cn", "aliyuncs.com")
    # Real resources that are never near misses, whatever they look like (aliyun.com/gpu is
    # topology-aware whole GPUs, gpu-count the node's card count; fpga, npu and rdma are
    # resources Alibaba Cloud's device plugins publish).
    allowed: tuple[str, ...] = ("aliyun.com/gpu", "aliyun.com/gpu-count", "aliyun.com/fpga", "aliyun.com/npu",
                                "aliyun.com/rdma")
