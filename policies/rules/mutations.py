"""GM001-GM003: the JSON patch that the mutating webhook returns.

Every operation is computed against the object as sent and only fills in what is missing,
so mutating an already mutated object yields an empty patch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from policies.model.resources import cards_per_container, memory_share
from policies.model.subject import Subject
from policies.rules.relevance import Relevance

Op = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Mutation:
    id: str
    title: str
    doc: str
    seed: str
    # The kinds it patches and what a pod must show for it to patch anything (the mutating
    # webhooks' matchConditions are generated from these; policies/generate/match_conditions.py).
    kinds: frozenset[str]
    relevance: Relevance


_ASKS_GPU_MEMORY = Relevance(resources=("gpu_mem",))
MUTATIONS: dict[str, Mutation] = {
    m.id: m
    for m in (
        Mutation("GM001", "Shared-GPU pods use the GPU-sharing scheduler",
                 "Pods requesting aliyun.com/gpu-mem get the configured schedulerName (names.scheduler_name: "
                 "ack-co-scheduler on registered clusters; none on ACK Pro, whose own kube-scheduler places "
                 "shared GPUs) when it is unset or default-scheduler; another scheduler the user chose is kept.",
                 "001", frozenset({"Pod"}), _ASKS_GPU_MEMORY),
        Mutation("GM002", "GPU-sharing DaemonSets run at system-node-critical",
                 "The GPU-sharing DaemonSets (gpushare-device-plugin-ds by default) and their pods get "
                 "priorityClassName system-node-critical so they are not preempted.", "001, 002",
                 frozenset({"DaemonSet", "Pod"}), Relevance(gpushare_daemonsets=True)),
        Mutation("GM003", "Apps see their GPU memory share",
                 "App containers requesting aliyun.com/gpu-mem get ALIYUN_COM_GPU_MEM_CONTAINER, their gpu-mem "
                 "count (N/M for a pod spread over M cards by the aliyun.com/gpu-count label): the value the "
                 "GPU-sharing device plugin sets too. ALIYUN_COM_GPU_MEM_DEV is never "
                 "written: it is the card's memory as the device plugin measures it on the node, which the "
                 "webhook cannot know for sure, and a pod's own value would override the plugin's.", "004",
                 frozenset({"Pod"}), _ASKS_GPU_MEMORY),
    )
}


@lru_cache(maxsize=1024)  # few distinct paths (containers x fields), built on every mutation
def pointer(path: tuple[str | int, ...]) -> str:
    """An RFC 6901 JSON pointer for a path."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _scheduler_ops(subject: Subject) -> list[Op]:
    scheduler = subject.names.injected_scheduler
    if subject.kind != "Pod" or scheduler is None:
        return []
    mem = subject.names.resources.gpu_mem
    for container in subject.containers:
        if container.has(mem):
            break
    else:
        return []
    spec = subject.obj.get("spec") or {}
    current = spec.get("schedulerName")
    if current not in (None, "", subject.names.default_scheduler):
        return []
    op = "replace" if "schedulerName" in spec else "add"
    return [{"op": op, "path": "/spec/schedulerName", "value": scheduler}]


def _owned_by_gpushare_daemonset(subject: Subject) -> bool:
    owners = subject.metadata.get("ownerReferences")
    if not isinstance(owners, list):
        return False
    daemonsets = subject.names.gpushare_daemonsets
    return any(isinstance(o, dict) and o.get("kind") == "DaemonSet" and o.get("name") in daemonsets
               for o in owners)


def _priority_ops(subject: Subject) -> list[Op]:
    if subject.kind == "DaemonSet":
        if subject.metadata.get("name") not in subject.names.gpushare_daemonsets:
            return []
    elif subject.kind != "Pod" or not _owned_by_gpushare_daemonset(subject):
        return []
    spec, base = subject.pod_spec
    if spec is None or spec.get("priorityClassName"):
        return []
    ops: list[Op] = [{"op": "add", "path": pointer((*base, "priorityClassName")),
                      "value": subject.names.priority_class}]
    # A priority already resolved from the old class would contradict the new class; the
    # Priority admission plugin recomputes it when it runs again after this webhook.
    if "priority" in spec:
        ops.append({"op": "remove", "path": pointer((*base, "priority"))})
    return ops


def _env_ops(subject: Subject) -> list[Op]:
    """ALIYUN_COM_GPU_MEM_CONTAINER only (docs/scoring.md, "Environment variables", says why), on app
    containers only: the scheduler places spec.containers on cards and the device plugin finds a
    pod by their sum, so what an init container would get is not known here (rule GS008). A pod
    spread over M cards gets N/M, its share of each card (ACK "Use cGPU to achieve GPU sharing based
    on multiple GPUs": ALIYUN_COM_GPU_MEM_CONTAINER=2 for gpu-mem 8 over 4 GPUs); a pod whose N/M
    is not whole (rule GS009) gets none.

    The open-source gpushare device plugin (AliyunContainerService/gpushare-device-plugin,
    pkg/gpu/nvidia/allocate.go) sets ALIYUN_COM_GPU_MEM_CONTAINER to len(DevicesIDs), the
    number of gpu-mem units the kubelet allocated to the container: its gpu-mem count, known
    here exactly. It sets ALIYUN_COM_GPU_MEM_DEV to getGPUMemory(), the first card's memory as
    NVML reports it on the node (pkg/gpu/nvidia/nvidia.go), which is not known at admission.
    The kubelet puts a container's own env after the plugin's, so a value written here wins:
    writing only what equals the plugin's value keeps the app's ratio right.
    """
    if subject.kind != "Pod":
        return []
    names = subject.names
    spec, _ = subject.pod_spec
    if spec is None:
        return []
    ops: list[Op] = []
    spread = cards_per_container(subject.pod_labels, names) or 1
    for request in subject.containers:  # parsed from spec, so its shape is already checked
        share = memory_share(request, spread, names)
        if share is None:
            continue
        container, path = spec[request.group][request.index], request.path
        wanted = [(names.env_mem_container, str(share))]
        env = container.get("env")
        present = {name for e in env if isinstance(e, dict) and isinstance(name := e.get("name"), str)} \
            if isinstance(env, list) else set()  # a name of another type (a list: unhashable) is none of ours
        missing = [{"name": n, "value": v} for n, v in wanted if n not in present]
        if not missing:
            continue
        if isinstance(env, list):
            ops.extend({"op": "add", "path": pointer((*path, "env", "-")), "value": e} for e in missing)
        else:
            op = "replace" if "env" in container else "add"
            ops.append({"op": op, "path": pointer((*path, "env")), "value": missing})
    return ops


PatchPlanner = Callable[[Subject], list[Op]]
_PLANNERS: tuple[tuple[str, PatchPlanner], ...] = (
    ("GM001", _scheduler_ops),
    ("GM002", _priority_ops),
    ("GM003", _env_ops),
)


def plan_patch(subject: Subject, enabled: Callable[[str], bool] = lambda _id: True) -> list[tuple[str, Op]]:
    """Every patch operation for the subject, each tagged with the mutation id it serves."""
    if subject.operation != "CREATE" and subject.kind == "Pod":
        return []  # pod specs are immutable after creation
    if subject.workload is not None:
        return []  # a custom workload's pods are created by its operator and mutated then, one by one
    planned: list[tuple[str, Op]] = []
    for mutation_id, plan in _PLANNERS:
        if enabled(mutation_id):
            planned.extend((mutation_id, op) for op in plan(subject))
    return planned
