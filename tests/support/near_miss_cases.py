"""Pods naming near misses of the shared-GPU resource names, and pods that must not count as
ones: the rule (GS007, over the real server and CLI) and the webhooks' matchConditions (CEL)
are tested on these same objects."""

from __future__ import annotations

from typing import Any

# (resource as written, value, the name GS007 suggests)
NEAR_MISSES: list[tuple[str, Any, str]] = [
    ("aliyun.com/gpu-memory", 4, "aliyun.com/gpu-mem"),
    ("aliyun.com/gpu_mem", 4, "aliyun.com/gpu-mem"),
    ("aliyun.com/gpumem", 4, "aliyun.com/gpu-mem"),
    ("alibaba.com/gpu-mem", 4, "aliyun.com/gpu-mem"),
    ("aliyun.com/gpu-core-percentage", 50, "aliyun.com/gpu-core.percentage"),
    ("aliyun.com/GPU-Mem", 2, "aliyun.com/gpu-mem"),
]
# Real resources: never near misses, and (but for the shared-GPU names) never sent for one.
NOT_NEAR_MISSES: list[str] = ["nvidia.com/gpu", "aliyun.com/gpu", "aliyun.com/fpga", "aliyun.com/rdma",
                              "alibabacloud.com/gpu-mem", "cpu"]


def pod_with(resource: str, value: Any, *, name: str = "near-miss", section: str = "limits",
             init: bool = False) -> dict[str, Any]:
    container = {"name": "app", "image": "cuda:12", "resources": {section: {resource: value}}}
    spec: dict[str, Any] = {"containers": [container]}
    if init:
        spec = {"initContainers": [container], "containers": [{"name": "main", "image": "busybox"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def deployment_with(resource: str, value: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "near-miss", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "x"}},
                     "template": {"metadata": {"labels": {"app": "x"}}, "spec": pod_with(resource, value)["spec"]}}}


def cronjob_with(resource: str, value: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "near-miss", "namespace": "default"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
                "spec": {**pod_with(resource, value)["spec"], "restartPolicy": "Never"}}}}}}
