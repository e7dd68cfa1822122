"""The cluster snapshot the live watch and snapshot files fill: nodes, pods (GPU pods in full, the
others by key only), namespaces and quota objects; the generations and the change log that let
per-node data be refreshed for just the nodes that changed; and what quotas charge, kept current
pod by pod."""

from __future__ import annotations

import threading

import pytest

from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.model.pod_usage import usage_index
from tests.support.cluster_objects import gpu_pod, node, plain_pod
from webhook.settings import Settings

NAMES = Settings().names
A, B = "cn-beijing.192.168.1.10", "cn-beijing.192.168.1.11"


def _pod(name: str, node_name: str | None = A, **kw):
    return pod_from_manifest(gpu_pod(name, node_name=node_name, **kw), NAMES)


def _state() -> ClusterSnapshot:
    state = ClusterSnapshot()
    state.upsert_node(node_from_manifest(node(A), NAMES))
    state.upsert_node(node_from_manifest(node(B), NAMES))
    return state


def test_nodes_and_pods_are_read_back_by_name_and_by_node():
    state = _state()
    state.upsert_pod(_pod("train-0"))
    state.upsert_pod(_pod("train-1", B, namespace="team-a"))
    state.upsert_pod(_pod("pending", None))
    assert state.availability().usable
    assert [n.name for n in state.nodes()] == [A, B]
    assert state.get_node(A).name == A and state.get_node("nowhere") is None
    assert state.get_pod("team-a", "train-1").node_name == B and state.get_pod("default", "train-1") is None
    assert [p.key for p in state.pods_on_node(A)] == ["default/train-0"]
    assert state.pods_on_node("nowhere") == []
    assert sorted(p.key for p in state.pods()) == ["default/pending", "default/train-0", "team-a/train-1"]
    assert state.counts() == (2, 3)
    state.remove_node(B)
    assert [n.name for n in state.nodes()] == [A] and state.counts() == (1, 3)
    state.remove_node("never-there")
    assert state.counts() == (1, 3)


def test_a_pod_without_gpus_is_known_by_key_only():
    state = _state()
    state.record_pod(pod_from_manifest(plain_pod("web", A), NAMES))
    state.record_pod(_pod("train-0"))
    assert state.has_pod("default", "web") and state.get_pod("default", "web") is None
    assert state.has_pod("default", "train-0") and not state.has_pod("default", "nobody")
    assert state.pod_keys() == {"default/web", "default/train-0"}
    assert state.counts() == (2, 1) and [p.key for p in state.pods_on_node(A)] == ["default/train-0"]
    # a GPU pod whose GPU request is gone (an UPDATE, a replacement under the same name): by key only
    state.record_pod(pod_from_manifest(plain_pod("train-0", A), NAMES))
    assert state.get_pod("default", "train-0") is None and state.has_pod("default", "train-0")
    assert state.pods_on_node(A) == [] and state.counts() == (2, 0)
    # and back again: in full, no longer by key only
    state.record_pod(_pod("web"))
    assert state.get_pod("default", "web") is not None and state.pod_keys() == {"default/web", "default/train-0"}
    # stored straight away (as a snapshot file is read) after being known by key: known once
    state.record_pod(pod_from_manifest(plain_pod("sidecar", A), NAMES))
    state.upsert_pod(_pod("sidecar"))
    assert state.pod_keys() == {"default/web", "default/train-0", "default/sidecar"}
    state.remove_pod("default", "sidecar")
    state.remove_pod("default", "web")
    state.remove_pod("default", "train-0")
    assert state.pod_keys() == set() and not state.has_pod("default", "web") and state.pods_on_node(A) == []


def test_a_pod_moved_or_unbound_leaves_its_old_node():
    state = _state()
    state.upsert_pod(_pod("train-0"))
    state.upsert_pod(_pod("train-1"))
    state.upsert_pod(_pod("train-0", B))
    assert [p.key for p in state.pods_on_node(A)] == ["default/train-1"]
    assert [p.key for p in state.pods_on_node(B)] == ["default/train-0"]
    state.upsert_pod(_pod("train-0", None))
    assert state.pods_on_node(B) == [] and state.get_pod("default", "train-0").node_name == ""
    assert state.counts() == (2, 2)


def test_every_change_moves_the_generation_of_its_node_and_is_in_the_log():
    state = _state()
    start = state.generation
    assert start == 2 and state.node_generation(A) == 1 and state.node_generation(B) == 2
    assert state.node_generation("nowhere") == 0
    state.upsert_pod(_pod("train-0"))  # on A
    state.upsert_pod(_pod("pending", None))  # on no node: no node's data changes
    assert state.generation == start + 1 and state.node_generation(A) == start + 1
    state.upsert_pod(_pod("train-0", B))  # leaves A, lands on B
    assert state.generation == start + 3
    assert state.node_generation(A) == start + 2 and state.node_generation(B) == start + 3
    state.remove_pod("default", "train-0")
    assert state.node_generation(B) == start + 4
    state.remove_pod("default", "train-0")  # gone already: nothing changes
    assert state.generation == start + 4
    assert state.changes_since(0) == [A, B, A, A, B, B]
    assert state.changes_since(start) == [A, A, B, B]
    assert state.changes_since(start + 3) == [B]
    assert state.changes_since(state.generation) == []


def test_a_reader_behind_the_change_log_starts_over():
    state = ClusterSnapshot()
    state.CHANGE_LOG = 8  # a short log: the same as 65,536 changes, sooner
    for i in range(8):
        state.upsert_node(node_from_manifest(node(f"n{i}"), NAMES))
    assert state.changes_since(0) == [f"n{i}" for i in range(8)]
    state.upsert_node(node_from_manifest(node("n8"), NAMES))  # the ninth: the older half is dropped
    assert state.changes_since(3) is None
    assert state.changes_since(4) == ["n4", "n5", "n6", "n7", "n8"]
    assert state.changes_since(6) == ["n6", "n7", "n8"]


def test_the_pod_generation_follows_pods_bound_or_not():
    state = _state()
    state.upsert_pod(_pod("pending", None))
    assert state.pod_generation == 1
    state.upsert_pod(_pod("pending", None))  # replaced: dropped and stored
    assert state.pod_generation == 3
    state.remove_pod("default", "pending")
    assert state.pod_generation == 4
    state.remove_pod("default", "pending")
    assert state.pod_generation == 4


def test_namespace_labels_are_unknown_until_namespaces_are_seen():
    state = ClusterSnapshot()
    assert state.namespace_labels("default") is None and state.namespace_names() == set()
    state.remove_namespace("default")  # nothing to remove yet
    assert state.namespace_labels("default") is None
    state.upsert_namespace("default", {"gpushare.io/exemptions": "allowed"})
    state.upsert_namespace("team-a", {})
    assert state.namespace_labels("default") == {"gpushare.io/exemptions": "allowed"}
    assert state.namespace_labels("team-a") == {} and state.namespace_labels("team-b") is None
    assert state.namespace_names() == {"default", "team-a"}
    state.remove_namespace("team-a")
    state.remove_namespace("team-b")
    assert state.namespace_names() == {"default"} and state.namespace_labels("team-a") is None


def test_quota_objects_are_kept_by_kind_namespace_and_name_in_a_stable_order():
    state = ClusterSnapshot()
    quota = {"kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": "team-b"}}
    tree = {"kind": "ElasticQuotaTree", "metadata": {"name": "elasticquotatree", "namespace": "kube-system"}}
    other = {"kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": "team-a"}}
    queue = {"kind": "ClusterQueue", "metadata": {"name": "q"}}
    for kind, obj in (("ResourceQuota", quota), ("ElasticQuotaTree", tree), ("ResourceQuota", other),
                      ("ClusterQueue", queue)):
        state.upsert_quota(kind, obj)
    assert state.quota_generation == 4
    assert state.quota_objects() == [("ClusterQueue", queue), ("ElasticQuotaTree", tree),
                                     ("ResourceQuota", other), ("ResourceQuota", quota)]
    changed = {**quota, "spec": {"hard": {"requests.aliyun.com/gpu-mem": "8"}}}
    state.upsert_quota("ResourceQuota", changed)  # the same object again: replaced
    state.remove_quota("ResourceQuota", "team-a", "gpu")
    state.remove_quota("ClusterQueue", "", "q")
    assert state.quota_objects() == [("ElasticQuotaTree", tree), ("ResourceQuota", changed)]
    assert state.quota_generation == 7
    state.upsert_quota("ResourceQuota", {"metadata": "x"})  # malformed: kept under empty names
    assert state.quota_objects() == [("ElasticQuotaTree", tree), ("ResourceQuota", {"metadata": "x"}),
                                     ("ResourceQuota", changed)]


def _usage(state: ClusterSnapshot, namespace: str) -> tuple[int, int, int, int]:
    found = state.quota_usage()
    return (found.charged_usage(namespace, 0, 0.0), found.charged_usage(namespace, 1, 0.0),
            found.placed_usage([namespace], 0), found.placed_usage([namespace], 1))


def test_what_quotas_charge_is_kept_current_pod_by_pod():
    state = _state()
    state.upsert_pod(_pod("train-0", mem=4, core=20))
    state.upsert_pod(_pod("pending", None, mem=2))
    assert _usage(state, "default") == (6, 20, 4, 20)  # built on first use
    state.upsert_pod(_pod("train-1", B, mem=3))
    state.upsert_pod(_pod("train-0", mem=5, core=20))  # changed: the old one counted out
    assert _usage(state, "default") == (10, 20, 8, 20)
    state.remove_pod("default", "pending")
    state.record_pod(pod_from_manifest(plain_pod("train-1", B), NAMES))  # its GPU request gone
    assert _usage(state, "default") == (5, 20, 5, 20)
    assert _usage(state, "team-a") == (0, 0, 0, 0)
    # what the index says is what counting every pod afresh says
    fresh = usage_index(state.pods())
    assert (fresh.charged, fresh.placed) == (state.quota_usage().charged, state.quota_usage().placed)
    # a copy: what a reader does with it changes nothing held
    state.quota_usage().charged["default"][0] = 99
    assert _usage(state, "default")[0] == 5


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_is_kept_in_full_and_charges_nothing(phase):
    state = _state()
    state.record_pod(_pod("done", phase=phase))
    assert state.get_pod("default", "done").terminated and state.counts() == (2, 1)
    assert _usage(state, "default") == (0, 0, 0, 0)


def test_writes_are_held_off_while_a_reader_holds_them():
    state = _state()
    tried: list[bool] = []

    def try_to_write():  # a writer's lock, tried without waiting
        got = state.writes_held().acquire(blocking=False)  # type: ignore[attr-defined]
        tried.append(got)
        if got:
            state.writes_held().release()  # type: ignore[attr-defined]

    with state.writes_held():
        writer = threading.Thread(target=try_to_write)
        writer.start()
        writer.join(10)
    assert tried == [False]
    writer = threading.Thread(target=try_to_write)
    writer.start()
    writer.join(10)
    assert tried == [False, True]
