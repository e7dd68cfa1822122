"""Real-shaped Node, Pod and Binding objects, as the API server stores and sends them."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from policies.model.cluster_snapshot import ClusterSnapshot
from tests.support.manifests import CORE, MEM

SCHEDULE = "ack.node.gpu.schedule"
REGION = "topology.kubernetes.io/region"
_uids = itertools.count(1)


def node(name: str = "cn-beijing.192.168.1.10", *, mode: str | None = "cgpu", region: str | None = "cn-beijing",
         provider_id: str | None = "cn-beijing.i-2ze0demo", cards: int = 4, card_gib: int = 15,
         labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
         kubelet: str = "v1.28.3-aliyun.1", runtime: str = "containerd://1.6.20",
         os_image: str = "Alibaba Cloud Linux 3.2104 U8 (OpenAnolis Edition)",
         card_name: str | None = "Tesla-V100-SXM2-16GB", driver: str | None = "470.82.01",
         taints: list[dict[str, str]] | None = None, resource_version: str = "1000") -> dict[str, Any]:
    """A GPU node like the ones in seeds 000 and 002 (4 x 15 GiB cards by default)."""
    all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "gpushare.io/cpu-manager-policy": "none"}
    if mode is not None:
        all_labels[SCHEDULE] = mode
    if region is not None:
        all_labels[REGION] = region
    if card_name is not None:
        all_labels["aliyun.accelerator/nvidia_name"] = card_name
        all_labels["aliyun.accelerator/nvidia_count"] = str(cards)
    if driver is not None:
        all_labels["ack.aliyun.com/nvidia-driver-version"] = driver
    all_labels.update(labels or {})
    resources = {"aliyun.com/gpu-count": str(cards), "aliyun.com/gpu-mem": str(cards * card_gib),
                 "cpu": "32", "memory": "251Gi", "pods": "110"}
    if mode == "core_mem":
        resources["aliyun.com/gpu-core.percentage"] = str(cards * 100)
    spec: dict[str, Any] = {}
    if provider_id is not None:
        spec["providerID"] = provider_id
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"node-uid-{next(_uids)}", "resourceVersion": resource_version,
                     "labels": all_labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                                     **(annotations or {})}},
        "spec": spec,
        "status": {
            "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}, {"type": "Hostname", "address": name}],
            "allocatable": dict(resources), "capacity": dict(resources),
            "nodeInfo": {"kubeletVersion": kubelet, "containerRuntimeVersion": runtime, "osImage": os_image,
                         "kernelVersion": "5.10.134-16.al8.x86_64", "operatingSystem": "linux",
                         "architecture": "amd64"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def relabel(obj: dict[str, Any], **labels: str | None) -> dict[str, Any]:
    """A copy with labels set (or removed with None); keys use __ for / and _ for . is not needed."""
    out = copy.deepcopy(obj)
    for key, value in labels.items():
        real = key.replace("__", "/")
        if value is None:
            out["metadata"]["labels"].pop(real, None)
        else:
            out["metadata"]["labels"][real] = value
    return out


def with_mode(obj: dict[str, Any], mode: str | None) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    if mode is None:
        out["metadata"]["labels"].pop(SCHEDULE, None)
    else:
        out["metadata"]["labels"][SCHEDULE] = mode
    return out


def gpu_pod(name: str, *, mem: int | None = 2, core: int | None = None, node_name: str | None = None,
            namespace: str = "default", phase: str = "Running", resource_version: str = "1",
            extra_limits: dict[str, Any] | None = None, card: int | None = None) -> dict[str, Any]:
    """A pod as the API server stores it, asking for shared GPU (mem-only, or core+mem with ``core``);
    ``card``: the card the GPU-sharing scheduler recorded it on (a bound pod without one holds no card)."""
    limits: dict[str, Any] = {"cpu": "2", "memory": "4Gi"}
    if mem is not None:
        limits[MEM] = str(mem)
    if core is not None:
        limits[CORE] = str(core)
    limits.update(extra_limits or {})
    spec: dict[str, Any] = {
        "schedulerName": "ack-co-scheduler", "restartPolicy": "Never",
        "containers": [{"name": "cuda", "image": "registry.cn-beijing.aliyuncs.com/ai-samples/gpushare-sample:tf",
                        "resources": {"limits": dict(limits), "requests": dict(limits)},
                        "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}],
        "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300}],
    }
    if node_name:
        spec["nodeName"] = node_name
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"pod-uid-{next(_uids)}",
                                "resourceVersion": resource_version, "labels": {"app": name}}
    if card is not None:
        metadata["annotations"] = {"scheduler.framework.gpushare.allocation": f'{{"0": {{"{card}": {mem}}}}}'}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": spec, "status": {"phase": phase if node_name else "Pending", "qosClass": "Guaranteed"}}


def plain_pod(name: str, node_name: str | None = None, namespace: str = "default") -> dict[str, Any]:
    """A pod without any GPU."""
    obj = gpu_pod(name, mem=None, node_name=node_name, namespace=namespace)
    return obj


def binding(pod_name: str, node_name: str, namespace: str = "default") -> dict[str, Any]:
    """The pods/binding object kube-scheduler POSTs."""
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod_name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}


def state_of(settings: Any, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> ClusterSnapshot:
    """A cluster snapshot holding these node and pod manifests, read with ``settings.names``."""
    state = ClusterSnapshot()
    for obj in nodes:
        state.upsert_node(node_from_manifest(obj, settings.names))
    for obj in pods:
        state.record_pod(pod_from_manifest(obj, settings.names))
    return state
