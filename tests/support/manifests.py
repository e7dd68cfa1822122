"""Builders for real-shaped Kubernetes objects used across tests."""

from __future__ import annotations

import copy
import json
from typing import Any

MEM = "aliyun.com/gpu-mem"
CORE = "aliyun.com/gpu-core.percentage"


def container(name: str = "main", limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
              **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "image": "registry.example/cuda:12", "resources": resources, **extra}


def pod_spec(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers), "restartPolicy": "Never", **extra}
    if init:
        spec["initContainers"] = init
    return spec


def pod(spec: dict[str, Any], name: str = "p", namespace: str = "default", **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, **meta},
            "spec": copy.deepcopy(spec)}


def workload(kind: str, spec: dict[str, Any], name: str = "w", namespace: str = "default") -> dict[str, Any]:
    """The pod spec wrapped as ``kind`` the way each API shapes its template."""
    template = {"metadata": {"labels": {"app": name}}, "spec": copy.deepcopy(spec)}
    meta = {"name": name, "namespace": namespace}
    if kind == "Pod":
        return pod(spec, name, namespace)
    if kind == "CronJob":
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta,
                "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": template}}}}
    api = "batch/v1" if kind == "Job" else ("v1" if kind == "ReplicationController" else "apps/v1")
    body: dict[str, Any] = {"template": template}
    if kind not in ("Job", "ReplicationController"):
        body["selector"] = {"matchLabels": {"app": name}}
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": body}


ALL_KINDS = ("Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController", "Job",
             "CronJob")


def received(value: Any) -> Any:
    """``value`` as the webhook receives it: decoded from JSON, so its strings are not the interned
    literals of the test source (a comparison by identity, ``is "Pod"``, would not hold)."""
    return json.loads(json.dumps(value))


def node(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
         **fields: Any) -> dict[str, Any]:
    """A Node named gpu-1 with the given labels and annotations (absent when None)."""
    meta: dict[str, Any] = {"name": "gpu-1"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, **fields}
