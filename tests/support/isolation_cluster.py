"""A small running cluster whose pods set what GS010 and GS011 judge, for the audit (snapshot and
live) and the dashboard: each such pod is reported once, and the pods that set nothing wrong (GM003's
own value, hidden devices, a GPU-free pod) are not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.support.cluster_objects import gpu_pod, node, plain_pod

NODE = "cn-beijing.10.1.0.1"  # cgpu, 2 x 15 GiB
MONITOR_NODE = "cn-beijing.10.1.0.2"  # a CPU node running a GPU monitor that exposes GPUs to itself
FORGED_MESSAGE = ('GS010: Pod team-a/forged container "cuda": env ALIYUN_COM_GPU_MEM_CONTAINER=15 overrides what '
                  "the GPU-sharing device plugin sets; remove it (and 1 more in this pod)")
DISABLED_MESSAGE = ('GS011: Pod team-a/no-isolation container "cuda": env CGPU_DISABLE=true turns off cGPU memory '
                    "isolation: the container can use all of its card's memory; remove it, or have an admin "
                    "exempt the pod")
MONITOR_MESSAGE = ('GS011: Pod monitoring/gpu-monitor container "cuda": env NVIDIA_VISIBLE_DEVICES=all exposes the '
                   "node's GPUs to a container that requests none; set none or void, or have an admin exempt the pod")
# (rule, pod) the audit reports, and nothing else of GS010 or GS011.
EXPECTED = {
    ("GS010", "Pod team-a/forged"),
    ("GS010", "Pod team-a/all-devices-0"), ("GS010", "Pod team-a/all-devices-1"),  # one per replica
    ("GS011", "Pod team-a/no-isolation"),
    ("GS011", "Pod monitoring/gpu-monitor"),
}


def _env(pod: dict[str, Any], *entries: dict[str, Any]) -> dict[str, Any]:
    pod["spec"]["containers"][0]["env"] = list(entries)
    return pod


def objects() -> list[dict[str, Any]]:
    forged = _env(gpu_pod("forged", mem=2, node_name=NODE, namespace="team-a"),
                  {"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "15"},
                  {"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "15"})
    replicas = [_env(gpu_pod(f"all-devices-{i}", mem=1, node_name=NODE, namespace="team-a"),
                     {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}) for i in range(2)]
    mutated = _env(gpu_pod("mutated", mem=4, node_name=NODE, namespace="team-a"),
                   {"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "4"},  # what GM003 writes
                   {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"})
    disabled = _env(gpu_pod("no-isolation", mem=3, node_name=NODE, namespace="team-a"),
                    {"name": "CGPU_DISABLE", "value": "true"})
    monitor = _env(plain_pod("gpu-monitor", node_name=MONITOR_NODE, namespace="monitoring"),
                   {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    quiet = _env(plain_pod("web", node_name=MONITOR_NODE, namespace="monitoring"),
                 {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})
    return [node(NODE, mode="cgpu", cards=2, card_gib=15), node(MONITOR_NODE, mode=None, cards=0, card_name=None),
            forged, *replicas, mutated, disabled, monitor, quiet]


def write_snapshot(directory: Path) -> Path:
    snapshot = directory / "isolation-cluster.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects()}, sort_keys=False))
    return snapshot
