"""Shared-GPU requests read from pods and workload templates.

Only the GPU resources named in settings are read; everything else in a pod spec is
ignored, which keeps the admission hot path cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from policies.model.quantity import QuantityError, parse_quantity
from policies.model.settings import Names

Path = tuple[str | int, ...]

# Where each kind keeps its pod spec.
POD_SPEC_PATHS: dict[str, Path] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
WORKLOAD_KINDS = frozenset(POD_SPEC_PATHS) - {"Pod"}
# Stands, in a rule's kinds, for every custom resource of the workload table (policies/model/workloads.py):
# training jobs, Ray clusters, inference services... whose pod templates the rule judges too.
CUSTOM_WORKLOADS = "custom workloads"
CONTAINER_GROUPS = ("initContainers", "containers")
_NOUNS = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}


def container_noun(group: str) -> str:
    """How a message names a container of ``group`` (ephemeral containers: kubectl debug's)."""
    return _NOUNS.get(group, "container")


class ShapeError(ValueError):
    """The object does not have the shape its kind requires (e.g. containers is not a list)."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{render_path(path)}: {message}")
        self.path = path


def render_path(path: Path) -> str:
    """A field path as kubectl explains it: spec.containers[0].resources.limits["aliyun.com/gpu-mem"]."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "." in part or "/" in part:
            out += f'["{part}"]'
        else:
            out += f".{part}" if out else part
    return out


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ cost four times as much, per value
class ResourceValue:
    """One GPU resource value as written, with its parsed quantity (None if unparseable); never changed."""

    raw: Any
    quantity: Decimal | None
    error: str | None
    path: Path
    # The value as a positive whole number, however it is written, else None (``whole_gib``).
    # Judged by value, never by spelling: the API server decodes a Pod and encodes it again, so
    # a webhook receives canonical quantities ("2000m" arrives as "2", 1000 as "1k"); the
    # scheduler extender reads ``Quantity.Value()`` (AliyunContainerService/
    # gpushare-scheduler-extender, pkg/utils/pod.go, GetGPUMemoryFromPodResource). Worked out
    # once, when read: the rules and the capacity check count it again and again.
    whole_count: int | None = None


@dataclass(slots=True)
class ContainerRequest:
    """The GPU resources of one container, limits and requests kept apart."""

    name: str
    group: str
    index: int
    path: Path
    limits: dict[str, ResourceValue] = field(default_factory=dict)
    requests: dict[str, ResourceValue] = field(default_factory=dict)
    # An init container with restartPolicy: Always, a native sidecar: it keeps running beside the
    # app containers (Kubernetes documentation, "Sidecar Containers").
    sidecar: bool = False

    @property
    def is_app(self) -> bool:
        """Listed in spec.containers, the containers the GPU-sharing scheduler places on cards (or a
        custom workload's ResourceRequirements standing for them, as TrainJob's resourcesPerNode)."""
        return self.group in ("containers", "resources")

    def value(self, resource: str) -> ResourceValue | None:
        """The effective value: the limit, else the request (as the API server defaults it)."""
        return self.limits.get(resource) or self.requests.get(resource)

    def amount(self, resource: str) -> Decimal | None:
        found = self.limits.get(resource) or self.requests.get(resource)
        return found.quantity if found is not None else None

    def count(self, resource: str) -> int | None:
        """The effective value as a plain positive whole number, else None."""
        found = self.limits.get(resource) or self.requests.get(resource)
        return found.whole_count if found is not None else None

    def memory(self, names: Names, cards: int = 1) -> int | None:
        """The container's gpu-mem count when rule GS003 accepts it (a whole count from 1 to the
        largest card times the ``cards`` the pod's multi-GPU label spreads it over), else None: a
        refused value never becomes a card demand or an env var."""
        mem = names.resources.gpu_mem
        found = self.limits.get(mem) or self.requests.get(mem)
        count = found.whole_count if found is not None else None
        return count if count is not None and count <= names.max_card_memory * cards else None

    def has(self, resource: str) -> bool:
        """Whether the container requests ``resource``, judged by value: a zero is no request.
        kube-scheduler skips a zero request (pkg/scheduler/framework/plugins/noderesources/fit.go,
        fitsRequest: "Skip in case request quantity is zero", ``if rQuant == 0 { continue }``) and the
        kubelet's device manager allocates no device for one (pkg/kubelet/cm/devicemanager/manager.go,
        devicesToAllocate: ``if needed == 0 { // No change, no work. return nil, nil }``).
        A value that is no quantity still counts as named: its value rule refuses it."""
        found = self.limits.get(resource) or self.requests.get(resource)
        return found is not None and not is_zero(found)

    def asked(self) -> set[str]:
        """Every GPU resource the container requests, judged by value (``has``)."""
        return {name for name in self.limits.keys() | self.requests.keys() if self.has(name)}

    def written(self) -> set[str]:
        """Every GPU resource the container names, in limits or requests, whatever its value."""
        return self.limits.keys() | self.requests.keys()


def is_zero(value: ResourceValue) -> bool:
    """A quantity of zero, however written ("0", "0m", "0Gi"): no request (``ContainerRequest.has``)."""
    return value.quantity is not None and value.quantity == 0


def _get(obj: Any, path: Path) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def pod_spec(obj: dict[str, Any], kind: str) -> tuple[dict[str, Any] | None, Path]:
    """The pod spec of a Pod or workload and its path; (None, path) when absent."""
    path = POD_SPEC_PATHS[kind]
    spec: Any = obj
    for depth, part in enumerate(path):
        spec = spec.get(part) if isinstance(spec, dict) else None
        if spec is None:
            return None, path
        if not isinstance(spec, dict):
            raise ShapeError(path[: depth + 1], f"must be an object, got {type(spec).__name__}")
    return spec, path


def pod_labels(obj: dict[str, Any], kind: str) -> dict[str, str]:
    """The labels of the pods an object makes: a Pod's own, a workload's pod template's."""
    labels: Any = obj
    for part in (*POD_SPEC_PATHS[kind][:-1], "metadata", "labels"):
        labels = labels.get(part) if isinstance(labels, dict) else None
    return {k: v for k, v in labels.items() if isinstance(v, str)} if isinstance(labels, dict) else {}


def read_values(resources: dict[str, Any], section: str, base: Path,
                watched: frozenset[str]) -> dict[str, ResourceValue]:
    """The watched resources of ``resources[section]`` (limits or requests), parsed."""
    block = resources.get(section)
    if not block:
        if block is None or isinstance(block, dict):
            return {}
        raise ShapeError((*base, section), f"must be an object, got {type(block).__name__}")
    if not isinstance(block, dict):
        raise ShapeError((*base, section), f"must be an object, got {type(block).__name__}")
    found: dict[str, ResourceValue] = {}
    for name in block:  # a container names a handful of resources; GPU ones are few of them
        if name not in watched:
            continue
        raw = block[name]
        path = (*base, section, name)
        try:
            quantity = parse_quantity(raw)
        except QuantityError as exc:
            found[name] = ResourceValue(raw, None, str(exc), path)
        else:
            found[name] = ResourceValue(raw, quantity, None, path, whole_gib(quantity))
    return found


_watched: tuple[object, frozenset[str]] = (None, frozenset())


def watched_resources(names: Names) -> frozenset[str]:
    """The GPU resource names read from containers (settings sections are frozen, so the set
    is kept for the last one seen; hashing the pydantic model would cost more than the build)."""
    global _watched
    r = names.resources
    if _watched[0] is not r:
        _watched = (r, frozenset(r.asked()))
    return _watched[1]


def container_requests(spec: dict[str, Any] | None, base: Path, names: Names) -> list[ContainerRequest]:
    """The GPU requests of every container and init container that asks for any GPU resource."""
    if spec is None:
        return []
    watched = watched_resources(names)
    out: list[ContainerRequest] = []
    for group in CONTAINER_GROUPS:  # one loop, no generator: this runs for every admitted pod
        items = spec.get(group)
        if items is None:
            continue
        if not isinstance(items, list):
            raise ShapeError((*base, group), f"must be a list, got {type(items).__name__}")
        for index, container in enumerate(items):
            if not isinstance(container, dict):
                raise ShapeError((*base, group, index), f"must be an object, got {type(container).__name__}")
            resources = container.get("resources")
            if resources is None:
                continue
            path = (*base, group, index)
            if not isinstance(resources, dict):
                raise ShapeError((*path, "resources"), f"must be an object, got {type(resources).__name__}")
            if not resources:
                continue
            res_path = (*path, "resources")
            limits = read_values(resources, "limits", res_path, watched)
            requests = read_values(resources, "requests", res_path, watched)
            if limits or requests:
                name = container.get("name")
                out.append(ContainerRequest(str(name) if name is not None else f"{group}[{index}]",
                                            group, index, path, limits, requests,
                                            group == "initContainers" and container.get("restartPolicy") == "Always"))
    return out


def effective_request(containers: Sequence[ContainerRequest], resource: str) -> int:
    """The pod's effective request of a whole-number resource, as kube-scheduler counts it
    (Kubernetes documentation, "Effective Pod requests and limits"): the larger of the highest
    need during initialization (each init container plus the sidecars started before it) and the
    need once running (the app containers plus every sidecar). Init containers run one at a time."""
    sidecars = running = init_peak = 0
    for c in containers:
        amount = c.count(resource)
        if not amount:  # none of it: no peak moves (most pods name no whole GPUs)
            continue
        if c.is_app:
            running += amount
        elif c.sidecar:
            sidecars += amount
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + amount)
    return max(init_peak, running + sidecars)


def cards_per_container(labels: Mapping[str, str], names: Names) -> int | None:
    """M of the pod label that spreads each container's gpu-mem over M cards (ACK "Use cGPU to
    achieve GPU sharing based on multiple GPUs"); None without the label or when it is not a whole
    number of 1 or more (rule GS009 says so; the pod then counts as on one card)."""
    text = labels.get(names.labels.pod_gpu_count)
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and int(text) >= 1 else None


def memory_share(container: ContainerRequest, spread: int, names: Names) -> int | None:
    """What the GPU-sharing device plugin sets as ALIYUN_COM_GPU_MEM_CONTAINER for ``container`` of a pod
    spread over ``spread`` cards, and what GM003 writes: an app container's gpu-mem (the number of units
    the kubelet allocated to it: gpushare-device-plugin, pkg/gpu/nvidia/allocate.go), N/M for a pod
    spread over M cards (ACK "Use cGPU to achieve GPU sharing based on multiple GPUs"). None for an
    init container (the scheduler places app containers only), a value GS003 refuses, or an N/M that is
    not whole (GS009)."""
    gib = container.memory(names, spread)
    if gib is None or not container.is_app or gib % spread:
        return None
    return gib // spread


# Whole counts of the quantities seen: a cluster writes few distinct values, and Decimal arithmetic
# is the costly part of counting one (parse_quantity shares one Decimal per text, whose hash it keeps).
_WHOLE: dict[Decimal, int | None] = {}
_WHOLE_MAX = 4096


def whole_gib(value: Decimal | None) -> int | None:
    """A positive whole number (of GiB, of cards), or None when the value is not one."""
    if value is None:
        return None
    try:
        return _WHOLE[value]
    except KeyError:
        pass
    whole = None if value <= 0 or value != value.to_integral_value() else int(value)
    if len(_WHOLE) >= _WHOLE_MAX:
        _WHOLE.clear()
    _WHOLE[value] = whole
    return whole
