"""Nodes, pods and snapshots in the shapes `kubectl get -o yaml` prints, for scoring tests."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.model.settings import Names

MEM = "aliyun.com/gpu-mem"
CORE = "aliyun.com/gpu-core.percentage"
WHOLE = "aliyun.com/gpu"
ALLOCATION = "scheduler.framework.gpushare.allocation"


def gpu_node(name: str, mode: str, cards: int = 4, gib_per_card: int = 15, *, placement: str | None = None,
             model: str = "Tesla-V100-SXM2-16GB", labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A GPU node as the device plugins publish it: shared modes count GiB, topology counts whole GPUs."""
    node_labels = {"kubernetes.io/hostname": name, "ack.node.gpu.schedule": mode,
                   "aliyun.accelerator/nvidia_name": model, "aliyun.accelerator/nvidia_count": str(cards),
                   "aliyun.accelerator/nvidia_mem": f"{gib_per_card * 1024 + 800}MiB",
                   "gpushare.io/cpu-manager-policy": "none", **(labels or {})}
    if placement:
        node_labels["ack.node.gpu.placement"] = placement
    if mode == "topology":
        resources = {WHOLE: str(cards)}
    elif mode == "default":
        resources = {"nvidia.com/gpu": str(cards)}
    else:
        resources = {MEM: str(cards * gib_per_card), "aliyun.com/gpu-count": str(cards)}
        if mode == "core_mem":
            resources[CORE] = str(cards * 100)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": node_labels, "annotations": annotations or {}},
            "spec": {"providerID": "cn-beijing.i-" + re.sub("[^a-z0-9]", "", name.lower())},
            "status": {"allocatable": {**resources, "cpu": "32"}, "capacity": {**resources, "cpu": "32"}}}


def gpu_pod(name: str, node: str = "", *, mem: int | None = None, core: int | None = None,
            whole: int | None = None, namespace: str = "default", annotations: dict[str, str] | None = None,
            phase: str = "Running", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if mem is not None:
        limits[MEM] = mem
    if core is not None:
        limits[CORE] = core
    if whole is not None:
        limits[WHOLE] = whole
    pod_spec: dict[str, Any] = {"containers": [{"name": name.split("-")[0], "image": "cuda:12",
                                                "resources": {"limits": limits}}], **(spec or {})}
    if node:
        pod_spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "annotations": annotations or {}},
            "spec": pod_spec, "status": {"phase": phase}}


def allocation(card: int, gib: int, container: int = 0) -> dict[str, str]:
    """The annotation the GPU-sharing scheduler writes on a pod it placed."""
    return {ALLOCATION: json.dumps({str(container): {str(card): gib}})}


def snapshot(*objects: dict[str, Any], names: Names) -> ClusterSnapshot:
    state = ClusterSnapshot()
    for obj in objects:
        if obj["kind"] == "Node":
            state.upsert_node(node_from_manifest(obj, names))
        else:
            state.upsert_pod(pod_from_manifest(obj, names))
    return state


def snapshot_yaml(*objects: dict[str, Any]) -> str:
    """What `kubectl get nodes,pods -A -o yaml` would print for these objects."""
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(objects)}, sort_keys=False)
