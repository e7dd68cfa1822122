"""The records the rules read the cluster through (policies/model/cluster.py), built from real-shaped
pods: what a pod holds on its cards (a container spread over several cards holds a share on each),
whether it uses GPUs, is kept in full, has finished; and a view over the state that reads through
what it does not change, the quota objects and pods too, and what quotas charge even over a state
that keeps no index of it."""

from __future__ import annotations

from typing import Any

import pytest

from policies.model.cluster import USABLE, Availability, PodGPU, PodInfo, StateView
from policies.model.cluster_manifests import pod_from_manifest
from policies.model.isolation_findings import PodEnv
from tests.support.cluster_objects import gpu_pod, node, state_of
from webhook.settings import Settings

NAMES = Settings().names
NODE = "cn-beijing.192.168.1.10"


@pytest.mark.parametrize(("mem", "core", "cards", "per_card"), [
    (8, 40, 1, (8, 40)), (8, 40, 2, (4, 20)), (9, 45, 2, (4, 22)), (6, 30, 3, (2, 10)), (2, 0, 4, (0, 0)),
])
def test_a_container_spread_over_cards_holds_a_share_on_each(mem, core, cards, per_card):
    gpu = PodGPU("cuda", mem, core, 0, cards)
    assert (gpu.mem_per_card, gpu.core_per_card) == per_card


def test_a_container_is_on_one_card_unless_spread():
    gpu = PodGPU("cuda", 8, 40)
    assert (gpu.cards, gpu.index, gpu.mem_per_card, gpu.core_per_card) == (1, None, 8, 40)


def _pod(**fields: Any) -> PodInfo:
    base: dict[str, Any] = {"namespace": "team-a", "name": "train", "uid": "u", "node_name": NODE,
                            "phase": "Running", "gpus": (), "annotations": {}}
    return PodInfo(**{**base, **fields})


def test_a_pod_sums_its_containers_shared_gpu():
    pod = _pod(gpus=(PodGPU("a", 4, 0), PodGPU("b", 2, 30)))
    assert (pod.key, pod.mem, pod.core) == ("team-a/train", 6, 30)
    assert pod.uses_shared_gpu and pod.is_core_mem and pod.uses_gpu and pod.kept
    memory_only = _pod(gpus=(PodGPU("a", 4, 0),))
    assert memory_only.uses_shared_gpu and not memory_only.is_core_mem


@pytest.mark.parametrize(("fields", "uses_gpu", "kept"), [
    ({}, False, False),
    ({"topology_gpus": 1}, True, True),
    ({"exclusive_gpus": 1}, True, True),
    ({"init_gpus": (PodGPU("warm", 2, 0),)}, True, True),
    ({"env": PodEnv((), (), None)}, False, True),  # a GPU-free pod that exposes GPUs to itself
    ({"quota_mem": 1}, False, True),  # its overhead is charged
    ({"quota_core": 1}, False, True),
    ({"topology_gpus": -1, "exclusive_gpus": -1, "quota_mem": -1, "quota_core": -1}, False, False),
], ids=str)
def test_which_pods_use_gpus_and_are_kept_in_full(fields, uses_gpu, kept):
    pod = _pod(**fields)
    assert (pod.uses_gpu, pod.kept, pod.uses_shared_gpu, pod.mem, pod.core) == (uses_gpu, kept, False, 0, 0)


@pytest.mark.parametrize(("phase", "deleting", "terminated"), [
    ("Running", False, False), ("Pending", False, False), ("", False, False), ("Unknown", False, False),
    ("Succeeded", False, True), ("Failed", False, True), ("Running", True, True),
])
def test_a_finished_or_deleted_pod_holds_no_card(phase, deleting, terminated):
    assert _pod(phase=phase, deleting=deleting).terminated is terminated


def test_the_state_is_usable_unless_it_says_why_not():
    assert USABLE.usable and USABLE.reason == ""
    down = Availability(False, "the watch is not synced")
    assert (down.usable, down.cause, down.retry_when) == (False, "the cluster state is not usable",
                                                          "the webhook has synced")


def _state():
    settings = Settings()
    pods = [gpu_pod("train-0", mem=4, node_name=NODE), gpu_pod("queued", mem=2)]
    state = state_of(settings, [node(NODE)], pods)
    state.upsert_quota("ResourceQuota", {"metadata": {"name": "gpu", "namespace": "default"}})
    return state


class Bare:
    """A ClusterState with only what the protocol asks (no quota objects, no pod list, no usage index)."""

    def __init__(self, base):
        self.base = base

    def availability(self):
        return Availability(False, "starting")

    def get_node(self, name):
        return self.base.get_node(name)

    def has_pod(self, namespace, name):
        return self.base.has_pod(namespace, name)

    def nodes(self):
        return self.base.nodes()

    def get_pod(self, namespace, name):
        return self.base.get_pod(namespace, name)

    def pods_on_node(self, node):
        return self.base.pods_on_node(node)


def test_a_view_reads_quota_objects_pods_and_usage_through():
    state = _state()
    view = StateView(state)
    assert view.quota_objects() == state.quota_objects() and len(view.quota_objects()) == 1
    assert sorted(p.key for p in view.pods()) == ["default/queued", "default/train-0"]
    usage = view.quota_usage()
    assert (usage.charged_usage("default", 0, 0.0), usage.placed_usage(["default"], 0)) == (6, 4)
    assert view.availability() is state.availability()


def test_a_view_over_a_bare_state_has_no_quota_objects_and_counts_no_pods():
    bare = StateView(Bare(_state()))
    assert bare.quota_objects() == [] and bare.pods() == []
    assert bare.quota_usage().charged_usage("default", 0, 0.0) == 0
    assert bare.namespace_labels("default") is None
    assert not bare.availability().usable and bare.availability().reason == "starting"
    assert bare.get_pod("default", "train-0").mem == 4 and bare.has_pod("default", "queued")


def test_a_view_counts_usage_from_the_pods_when_its_state_keeps_no_index():
    class PodsOnly(Bare):
        def pods(self):
            return self.base.pods()

    usage = StateView(PodsOnly(_state())).quota_usage()
    assert (usage.charged_usage("default", 0, 0.0), usage.placed_usage(["default"], 0)) == (6, 4)
    # a view of a view: the same counts
    nested = StateView(StateView(PodsOnly(_state()))).quota_usage()
    assert nested.charged_usage("default", 0, 0.0) == 6


def test_a_gpu_free_pod_kept_for_its_env_charges_no_quota():
    monitor = gpu_pod("gpu-monitor", mem=None, node_name=NODE, namespace="monitoring")
    monitor["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    state = state_of(Settings(), [node(NODE)], [monitor])
    [kept] = state.pods()
    assert kept.kept and (kept.quota_mem, kept.quota_core) == (0, 0)
    usage = StateView(state).quota_usage()
    assert [usage.charged_usage("monitoring", i, 0.0) for i in (0, 1)] == [0, 0]
    assert [usage.placed_usage(["monitoring"], i) for i in (0, 1)] == [0, 0]


def test_a_pod_record_is_what_its_manifest_says():
    record = pod_from_manifest(gpu_pod("train-0", mem=4, core=20, node_name=NODE), NAMES)
    assert (record.key, record.mem, record.core, record.is_core_mem, record.terminated) == (
        "default/train-0", 4, 20, True, False)
