"""Nodes and pods as the cluster state keeps them, read from real-shaped manifests (a watch event's
object, a snapshot file's): a node's GPU resources, addresses and versions; a pod's GPU requests on
cards and off them, the annotations kept, the constraints of a pending pod, its env record and what
GPU quotas charge it. Malformed fields project to empty ones, never to an error."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from policies.model.cluster import PodGPU
from policies.model.cluster_manifests import is_gpu_node, node_from_manifest, pod_from_manifest
from tests.support.cluster_objects import gpu_pod, node, plain_pod
from tests.support.manifests import CORE, MEM, container, pod, pod_spec, received
from webhook.settings import Settings

NAMES = Settings().names
WHOLE, EXCLUSIVE = "aliyun.com/gpu", "nvidia.com/gpu"


def test_a_node_keeps_its_gpu_resources_address_and_versions():
    # as decoded from the API server's JSON: its strings are not the literals of this file
    info = node_from_manifest(received(node("cn-beijing.192.168.1.10", mode="core_mem", cards=2)), NAMES)
    assert info.name == "cn-beijing.192.168.1.10"
    assert info.labels["ack.node.gpu.schedule"] == "core_mem"
    assert info.annotations["node.alpha.kubernetes.io/ttl"] == "0"
    assert info.provider_id == "cn-beijing.i-2ze0demo"
    assert info.internal_ip == "192.168.1.10"
    # cpu, memory and pods are no GPU resource: not kept
    gpu = {"aliyun.com/gpu-count": 2, MEM: 30, CORE: 200}
    assert info.allocatable == gpu and info.capacity == gpu
    assert (info.kubelet_version, info.container_runtime, info.os_image) == (
        "v1.28.3-aliyun.1", "containerd://1.6.20", "Alibaba Cloud Linux 3.2104 U8 (OpenAnolis Edition)")


def _node(**changes: Any) -> dict[str, Any]:
    obj = node("gpu-1")
    for path, value in changes.items():
        *parents, last = path.split("__")
        where = obj
        for part in parents:
            where = where[part]
        where[last] = value
    return obj


@pytest.mark.parametrize(("obj", "field", "expected"), [
    (_node(metadata="not a map"), "name", ""),
    (_node(metadata__labels={"nvidia_count": 4, "ready": True}), "labels", {"nvidia_count": "4", "ready": "True"}),
    (_node(metadata__labels=["a"]), "labels", {}),
    (_node(spec={}), "provider_id", ""),
    (_node(spec="x"), "provider_id", ""),
    (_node(status="x"), "internal_ip", ""),
    (_node(status__addresses={"type": "InternalIP", "address": "10.0.0.1"}), "internal_ip", ""),
    (_node(status__addresses=["10.0.0.1", {"type": "Hostname", "address": "gpu-1"},
                              {"type": "InternalIP", "address": "10.0.0.2"},
                              {"type": "InternalIP", "address": "10.0.0.3"}]), "internal_ip", "10.0.0.2"),
    (_node(status__addresses=[{"type": "InternalIP"}]), "internal_ip", ""),
    (_node(status__addresses=[{"type": "internalIP", "address": "10.0.0.9"}, {"type": "Zone", "address": "10.0.0.8"},
                              {"type": "InternalIP", "address": "10.0.0.2"}]), "internal_ip", "10.0.0.2"),
    (_node(status__addresses=[{"type": "ExternalIP", "address": "47.0.0.1"}]), "internal_ip", ""),
    (_node(status__allocatable={MEM: "60", "aliyun.com/gpu-count": "lots", CORE: "1500m"}), "allocatable",
     {MEM: 60, CORE: 1}),
    (_node(status__capacity=["60"]), "capacity", {}),
    (_node(status__capacity={MEM: "lots", CORE: "400", "aliyun.com/gpu-count": "4"}), "capacity",
     {CORE: 400, "aliyun.com/gpu-count": 4}),  # a value that is no quantity is skipped, the others kept
    (_node(status__nodeInfo="x"), "kubelet_version", ""),
    (_node(status__nodeInfo={"kubeletVersion": None}), "kubelet_version", ""),
    (_node(status__nodeInfo={"containerRuntimeVersion": "docker://19.3.15"}), "container_runtime",
     "docker://19.3.15"),
    (_node(status__nodeInfo={"osImage": "Ubuntu 22.04"}), "os_image", "Ubuntu 22.04"),
], ids=lambda v: "" if isinstance(v, dict) else str(v))
def test_a_malformed_or_partial_node_projects_to_empty_fields(obj, field, expected):
    assert getattr(node_from_manifest(obj, NAMES), field) == expected


def _bare_node(labels: dict[str, str], resources: dict[str, str], where: str = "capacity") -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": "n", "labels": labels}, "status": {where: resources}}


@pytest.mark.parametrize(("obj", "gpu"), [
    (node("gpu-1"), True),
    (_bare_node({"ack.node.gpu.schedule": "cgpu"}, {}), True),
    (_bare_node({"aliyun.accelerator/nvidia_name": "Tesla-T4"}, {}), True),
    (_bare_node({"aliyun.accelerator/nvidia_count": "1"}, {}), True),
    (_bare_node({}, {MEM: "16"}), True),
    (_bare_node({}, {MEM: "16"}, "allocatable"), True),
    (_bare_node({}, {EXCLUSIVE: "8"}, "allocatable"), True),
    (_bare_node({}, {"aliyun.com/gpu-count": "1"}), True),
    (_bare_node({}, {MEM: "0"}), False),  # a device plugin that found no card publishes zero
    (_bare_node({"kubernetes.io/os": "linux"}, {"cpu": "32", "memory": "64Gi"}), False),
], ids=str)
def test_a_gpu_node_shows_gpus_or_the_scheduling_label(obj, gpu):
    assert is_gpu_node(node_from_manifest(obj, NAMES), NAMES) is gpu


def test_a_bound_pod_keeps_its_shared_gpu_and_card_annotations():
    obj = gpu_pod("train-0", mem=3, core=30, node_name="gpu-1", card=1, namespace="team-a")
    obj["metadata"]["annotations"].update({
        "gpushare.alibabacloud.com/core-percentage": '{"0": {"1": 30}}', "ALIYUN_COM_GPU_MEM_IDX": "1",
        "topology.kubernetes.io/gpu-visible": "0,1",
        "scheduler.framework.gpushare.assigned": "true", "scheduler.framework.gpushare.assume-time": "17",
        "ALIYUN_COM_GPU_MEM_ASSIGNED": "false", "ALIYUN_COM_GPU_MEM_ASSUME_TIME": "18",
        "gpushare.io/exempt": "GS003", "gpushare.io/exempt-reason": 7,
        "kubectl.kubernetes.io/last-applied-configuration": "{}", "prometheus.io/scrape": "true"})
    info = pod_from_manifest(obj, NAMES)
    assert (info.namespace, info.name, info.node_name, info.phase) == ("team-a", "train-0", "gpu-1", "Running")
    assert info.uid.startswith("pod-uid-")
    assert info.gpus == (PodGPU("cuda", 3, 30, 0, 1),)
    assert (info.mem, info.core, info.is_core_mem) == (3, 30, True)
    assert info.annotations == {
        "scheduler.framework.gpushare.allocation": '{"0": {"1": 3}}',
        "gpushare.alibabacloud.com/core-percentage": '{"0": {"1": 30}}', "ALIYUN_COM_GPU_MEM_IDX": "1",
        "topology.kubernetes.io/gpu-visible": "0,1",
        "scheduler.framework.gpushare.assigned": "true", "scheduler.framework.gpushare.assume-time": "17",
        "ALIYUN_COM_GPU_MEM_ASSIGNED": "false", "ALIYUN_COM_GPU_MEM_ASSUME_TIME": "18",
        "gpushare.io/exempt": "GS003", "gpushare.io/exempt-reason": "7"}
    assert info.scheduler_name == "ack-co-scheduler"
    assert info.selector is None and info.env is None and not info.deleting
    assert (info.topology_gpus, info.exclusive_gpus, info.init_gpus) == (0, 0, ())
    assert (info.quota_mem, info.quota_core, info.deletion_deadline) == (3, 30, None)


def test_a_pod_spread_over_cards_and_its_init_containers():
    spec = pod_spec(container("a", limits={MEM: 8, CORE: 40}), container("b", limits={MEM: 3000}),
                    container("c", requests={MEM: "2"}),
                    init=[container("warm", limits={MEM: 4}),
                          container("side", limits={MEM: 2}, restartPolicy="Always")])
    obj = pod(spec, "spread", labels={"aliyun.com/gpu-count": "2"})
    info = pod_from_manifest(obj, NAMES)
    # b asks more than two cards hold: refused by GS003, never a card demand
    assert info.gpus == (PodGPU("a", 8, 40, 0, 2), PodGPU("c", 2, 0, 2, 2))
    assert [(g.mem_per_card, g.core_per_card) for g in info.gpus] == [(4, 20), (1, 0)]
    assert info.init_gpus == (PodGPU("warm", 4, 0), PodGPU("side", 2, 0))
    assert info.namespace == "default" and info.node_name == "" and info.phase == ""
    # a quota charges what the API server counts (PodRequests), b's 3000 too: the app containers plus
    # the sidecar (8 + 3000 + 2 + 2) outweigh the peak of initialisation (4)
    assert info.quota_mem == 3012 and info.quota_core == 40


@pytest.mark.parametrize(("limits", "topology", "exclusive"), [
    ({WHOLE: 2}, 2, 0),
    ({EXCLUSIVE: 1}, 0, 1),
    ({WHOLE: 2, EXCLUSIVE: 1}, 2, 0),  # whole exclusive GPUs count only beside no shared or topology GPU
    ({MEM: 2, EXCLUSIVE: 1}, 0, 0),
], ids=str)
def test_whole_gpus_are_counted_as_kube_scheduler_counts_them(limits, topology, exclusive):
    info = pod_from_manifest(pod(pod_spec(container("x", limits=limits))), NAMES)
    assert (info.topology_gpus, info.exclusive_gpus) == (topology, exclusive)
    assert info.uses_gpu


def test_a_pending_pod_keeps_its_node_constraints_and_a_bound_one_does_not():
    selector = {"nodeSelector": {"ack.node.gpu.schedule": "cgpu"}}
    pending = pod_from_manifest(pod(pod_spec(container("x", limits={MEM: 2}), **selector)), NAMES)
    assert pending.selector is not None
    assert pending.selector.mismatch({"ack.node.gpu.schedule": "share"}, "n") is not None
    assert pending.selector.mismatch({"ack.node.gpu.schedule": "cgpu"}, "n") is None
    affinity = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}
    assert pod_from_manifest(pod(pod_spec(container("x"), **affinity)), NAMES).selector is not None
    bound = pod(pod_spec(container("x", limits={MEM: 2}), nodeName="gpu-1", **selector))
    assert pod_from_manifest(bound, NAMES).selector is None
    for spec in (pod_spec(container("x")),  # no constraints
                 pod_spec(container("x"), nodeSelector={}, affinity={}),
                 pod_spec(container("x"), affinity={"podAntiAffinity": {}}),  # no node constraint in it
                 pod_spec(container("x"), nodeSelector="cgpu")):  # malformed: none read
        assert pod_from_manifest(pod(spec), NAMES).selector is None


def test_a_malformed_pod_projects_to_empty_fields():
    obj = {"kind": "Pod", "metadata": {"name": "p", "annotations": ["x"], "labels": "x"}, "spec": "x",
           "status": "x"}
    info = pod_from_manifest(obj, NAMES)
    assert (info.namespace, info.name, info.uid, info.node_name, info.phase) == ("default", "p", "", "", "")
    assert (info.annotations, info.gpus, info.scheduler_name, info.env) == ({}, (), "", None)
    assert not info.kept
    nameless = pod_from_manifest({"kind": "Pod", "metadata": "x"}, NAMES)
    assert (nameless.name, nameless.namespace, nameless.annotations) == ("", "default", {})
    assert pod_from_manifest({"metadata": {"annotations": None}, "spec": {"containers": []}}, NAMES).annotations == {}


def test_the_env_record_is_kept_for_the_audit_unless_asked_not_to():
    obj = gpu_pod("forged", node_name="gpu-1")
    obj["spec"]["containers"][0]["env"] = [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "15"}]
    assert pod_from_manifest(obj, NAMES).env is not None
    assert pod_from_manifest(obj, NAMES, with_env=False).env is None
    # the requests the caller parsed are the ones read: here, none
    assert pod_from_manifest(obj, NAMES, []).gpus == ()
    assert pod_from_manifest(obj, names=NAMES, requests=[], with_env=False).env is None


def test_a_pod_being_deleted_is_charged_until_its_grace_period_ends():
    obj = gpu_pod("going", mem=4, node_name="gpu-1")
    obj["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=30)
    info = pod_from_manifest(obj, NAMES)
    assert info.deleting and info.terminated
    assert info.deletion_deadline == 1767225630.0 and info.quota_mem == 4


def test_quotas_charge_a_pod_its_overhead_too():
    spec = pod_spec(container("x", limits={"cpu": "1"}), overhead={MEM: "1", CORE: "5"})
    info = pod_from_manifest(pod(spec), NAMES)
    assert (info.quota_mem, info.quota_core) == (1, 5) and info.kept and not info.uses_gpu
    malformed = pod_from_manifest(pod(pod_spec(container("x"), overhead="1")), NAMES)
    assert (malformed.quota_mem, malformed.quota_core, malformed.kept) == (0, 0, False)
    plain = pod_from_manifest(plain_pod("web", "gpu-1"), NAMES)
    assert (plain.quota_mem, plain.quota_core, plain.deletion_deadline, plain.kept) == (0, 0, None, False)


def test_a_manifest_is_only_read():
    obj = gpu_pod("train-0", node_name="gpu-1", card=0)
    before = copy.deepcopy(obj)
    pod_from_manifest(obj, NAMES)
    node_from_manifest(node("gpu-1"), NAMES)
    assert obj == before
