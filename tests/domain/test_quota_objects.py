"""GPU quota objects read as their enforcers read them: a ResourceQuota's spec.hard keys (with or without
the requests. prefix the quota admission counts), an ElasticQuotaTree's nodes depth first with their min,
max, namespaces and ancestors, a Kueue ClusterQueue's quotas per flavor; and which of them the quota
webhook is sent."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from policies.model.settings import Names
from policies.quota.quota_objects import (
    CLUSTER_QUEUE,
    ELASTIC_QUOTA_TREE,
    LOCAL_QUEUE,
    RESOURCE_QUOTA,
    cluster_queue_values,
    gpu_resources,
    group_matches,
    names_gpu,
    quota_sent,
    quota_unit_bytes,
    resource_quota_keys,
    scoped,
    tree_nodes,
)

NAMES = Names()
MEM, CORE, WHOLE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage", "aliyun.com/gpu"


def resource_quota(hard: Any, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": "team-a"},
            "spec": {"hard": hard, **spec}}


def tree(root: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "metadata": {"name": "t", "namespace": "kube-system"}, "spec": {"root": root}}


def cluster_queue(groups: Any) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "research"},
            "spec": {"resourceGroups": groups}}


def test_the_gpu_resources_a_quota_may_limit_and_the_unit_of_memory():
    assert set(gpu_resources(NAMES)) == {MEM, CORE, WHOLE, "nvidia.com/gpu"}
    assert "aliyun.com/gpu-count" not in gpu_resources(NAMES)  # a node's resource, not a container's
    assert quota_unit_bytes(NAMES) == 2**30
    assert quota_unit_bytes(Names(memory_unit="MiB")) == 2**20


@pytest.mark.parametrize(("kind", "api_version", "matches"), [
    (RESOURCE_QUOTA, "v1", True),
    (RESOURCE_QUOTA, "example.com/v1", False),
    (ELASTIC_QUOTA_TREE, "scheduling.sigs.k8s.io/v1beta1", True),
    (ELASTIC_QUOTA_TREE, "v1", False),
    (ELASTIC_QUOTA_TREE, "scheduling.example.com/v1", False),  # the same kind name in another group
    (CLUSTER_QUEUE, "kueue.x-k8s.io/v1beta1", True),
    (LOCAL_QUEUE, "kueue.x-k8s.io/v1beta1", True),
    (LOCAL_QUEUE, "kueue.x-k8s.io", False),  # no version: not an apiVersion of the group
    (LOCAL_QUEUE, "kueue.x-k8s.io/extra/v1beta1", False),  # the group is all before the last "/"
    (CLUSTER_QUEUE, None, False),
    (CLUSTER_QUEUE, 5, False),
    ("Pod", "v1", False),
])
def test_an_object_is_the_quota_kind_its_name_says_only_in_that_kind_s_group(kind, api_version, matches):
    assert group_matches(kind, {"apiVersion": api_version}) is matches


def test_a_resource_quota_s_gpu_keys_with_their_prefix_and_parsed_values():
    keys = resource_quota_keys(resource_quota({
        5: "x", f"requests.{MEM}": "40", f"limits.{CORE}": "200", MEM: "1Gi", f"requests.{WHOLE}": "two",
        "requests.cpu": "64", "requests.nvidia.com/gpu": "4", f"requests.{MEM}x": "1"}), NAMES)
    assert [(k.key, k.prefix, k.resource) for k in keys] == [
        (f"requests.{MEM}", "requests.", MEM), (f"limits.{CORE}", "limits.", CORE), (MEM, "", MEM),
        (f"requests.{WHOLE}", "requests.", WHOLE), ("requests.nvidia.com/gpu", "requests.", "nvidia.com/gpu")]
    first, _, bare, unreadable, _ = keys
    assert first.value.path == ("spec", "hard", f"requests.{MEM}") and first.value.resource == MEM
    assert first.value.raw == "40" and first.value.quantity == Decimal(40)
    assert first.value.where == f'spec.hard["requests.{MEM}"]'
    assert bare.value.quantity == Decimal(2**30)
    assert unreadable.value.quantity is None and unreadable.value.raw == "two"


@pytest.mark.parametrize("obj", [
    {"spec": {"hard": "x"}}, {"spec": "x"}, {}, {"spec": {"hard": None}},
])
def test_a_resource_quota_of_another_shape_names_no_gpu_key(obj):
    assert resource_quota_keys(obj, NAMES) == []
    assert not names_gpu(RESOURCE_QUOTA, obj, NAMES) and not quota_sent(RESOURCE_QUOTA, obj, NAMES)


@pytest.mark.parametrize(("spec", "is_scoped"), [
    ({}, False), ({"scopes": []}, False), ({"scopes": ["BestEffort"]}, True),
    ({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "Exists"}]}}, True),
    ({"scopeSelector": {}}, False),
])
def test_a_quota_with_scopes_counts_only_the_pods_they_match(spec, is_scoped):
    assert scoped(resource_quota({}, **spec)) is is_scoped


ROOT = {"name": "root", "max": {MEM: "640", CORE: "800", "cpu": "100"}, "min": {MEM: "640"}, "children": [
    {"name": "team-a", "namespaces": ["team-a", 5], "max": {MEM: "40"}, "min": {MEM: "20"}, "children": [
        {"name": "a-1", "namespaces": ["a-1"], "max": {MEM: "x"}}]},
    "not a node",
    {"namespaces": ["team-b"], "max": {WHOLE: 2}},
    {"name": "", "namespaces": "team-c"},
]}


def test_a_tree_s_nodes_depth_first_with_their_limits_namespaces_and_ancestors():
    nodes = list(tree_nodes(tree(ROOT), NAMES))
    assert [(n.name, n.path, n.ancestors, n.is_root, n.namespaces) for n in nodes] == [
        ("root", ("spec", "root"), (), True, ()),
        ("team-a", ("spec", "root", "children", 0), ("root",), False, ("team-a",)),
        ("a-1", ("spec", "root", "children", 0, "children", 0), ("root", "team-a"), False, ("a-1",)),
        # A node without a name is named by its place.
        ("spec.root.children[2]", ("spec", "root", "children", 2), ("root",), False, ("team-b",)),
        ("spec.root.children[3]", ("spec", "root", "children", 3), ("root",), False, ()),
    ]
    root, team_a, a_1, nameless, _ = nodes
    assert set(root.max) == {MEM, CORE} and set(root.min) == {MEM}  # cpu is no GPU resource
    assert root.max[MEM].quantity == Decimal(640) and root.max[MEM].path == ("spec", "root", "max", MEM)
    assert root.max[CORE].where == f'quota node root max["{CORE}"]'
    assert team_a.min[MEM].where == f'quota node team-a min["{MEM}"]' and team_a.min[MEM].raw == "20"
    assert a_1.max[MEM].quantity is None and a_1.min == {}
    assert nameless.max[WHOLE].where == f'quota node spec.root.children[2] max["{WHOLE}"]'


@pytest.mark.parametrize("obj", [{"spec": {"root": "x"}}, {"spec": {}}, {"spec": "x"}, {}])
def test_a_tree_without_a_root_has_no_node(obj):
    assert list(tree_nodes(obj, NAMES)) == []
    assert not names_gpu(ELASTIC_QUOTA_TREE, obj, NAMES)
    assert quota_sent(ELASTIC_QUOTA_TREE, obj, NAMES)  # every tree is sent (CEL cannot walk one)


def test_a_tree_names_a_gpu_when_any_node_limits_one():
    assert names_gpu(ELASTIC_QUOTA_TREE, tree(ROOT), NAMES)
    cpu_only = tree({"name": "root", "max": {"cpu": "10"}, "children": [{"name": "a", "min": {"memory": "1Gi"}}]})
    assert not names_gpu(ELASTIC_QUOTA_TREE, cpu_only, NAMES)
    deep = tree({"name": "root", "children": [{"name": "a", "children": [{"name": "b", "min": {CORE: "50"}}]}]})
    assert names_gpu(ELASTIC_QUOTA_TREE, deep, NAMES)


GROUPS = [
    {"flavors": [
        {"name": "a100", "resources": [
            {"name": "cpu", "nominalQuota": 9},
            {"name": MEM, "nominalQuota": 64, "borrowingLimit": "8", "lendingLimit": 4},
            "not a resource",
            {"name": CORE, "nominalQuota": "x"}]},
        {"resources": [{"name": MEM}, {"name": 5, "nominalQuota": 1}]}]},
    "not a group",
    {"flavors": [{"name": "t4", "resources": [{"name": WHOLE, "lendingLimit": 1}]}], "extra": 1},
    {"flavors": "x"},
]


def test_a_cluster_queue_s_gpu_quotas_per_flavor():
    found = cluster_queue_values(cluster_queue(GROUPS), NAMES)
    assert [(flavor, v.resource, v.path, v.raw, v.quantity) for flavor, v in found] == [
        ("a100", MEM, ("spec", "resourceGroups", 0, "flavors", 0, "resources", 1, "nominalQuota"), 64, Decimal(64)),
        ("a100", MEM, ("spec", "resourceGroups", 0, "flavors", 0, "resources", 1, "borrowingLimit"), "8", Decimal(8)),
        ("a100", MEM, ("spec", "resourceGroups", 0, "flavors", 0, "resources", 1, "lendingLimit"), 4, Decimal(4)),
        ("a100", CORE, ("spec", "resourceGroups", 0, "flavors", 0, "resources", 3, "nominalQuota"), "x", None),
        ("t4", WHOLE, ("spec", "resourceGroups", 2, "flavors", 0, "resources", 0, "lendingLimit"), 1, Decimal(1)),
    ]
    assert found[1][1].where == f'flavor "a100" resource {MEM} borrowingLimit'
    assert names_gpu(CLUSTER_QUEUE, cluster_queue(GROUPS), NAMES) and quota_sent(CLUSTER_QUEUE, cluster_queue(GROUPS),
                                                                                 NAMES)


@pytest.mark.parametrize("groups", [None, "x", [], [{"flavors": [{"name": "a", "resources": [{"name": "cpu",
                                                                                                "nominalQuota": 1}]}]}],
                                    [{"flavors": [{"name": "a", "resources": "x"}]}]])
def test_a_cluster_queue_without_gpu_quota_is_not_sent(groups):
    assert cluster_queue_values(cluster_queue(groups), NAMES) == []
    assert not names_gpu(CLUSTER_QUEUE, cluster_queue(groups), NAMES)
    assert not quota_sent(CLUSTER_QUEUE, cluster_queue(groups), NAMES)


def test_what_the_quota_webhook_is_sent():
    assert quota_sent(RESOURCE_QUOTA, resource_quota({f"requests.{MEM}": "40"}), NAMES)
    assert quota_sent(RESOURCE_QUOTA, resource_quota({f"limits.{MEM}": "40"}), NAMES)  # to be told it limits nothing
    assert not quota_sent(RESOURCE_QUOTA, resource_quota({"requests.cpu": "40"}), NAMES)
    assert not names_gpu(LOCAL_QUEUE, {"spec": {"clusterQueue": "research"}}, NAMES)
    assert not quota_sent("Pod", resource_quota({f"requests.{MEM}": "40"}), NAMES)


def test_a_key_is_read_with_its_first_matching_prefix_only():
    names = Names(resources={"gpu_mem": "example.com/gpu", "gpu_core": "limits.example.com/gpu"})
    keys = resource_quota_keys(resource_quota({"limits.example.com/gpu": "4"}), names)
    assert [(k.prefix, k.resource) for k in keys] == [("limits.", "example.com/gpu")]


@pytest.mark.parametrize("kind", ["Pod", "Secret", "StatefulSet", "LocalQueue", "Namespace", "Binding"])
def test_only_a_quota_kind_is_read_as_one(kind):
    shaped = {"apiVersion": "v1", "spec": {"hard": {f"requests.{MEM}": "4"}, "root": {"name": "r", "max": {MEM: "4"}},
                                           "resourceGroups": GROUPS}}
    assert not names_gpu(kind, shaped, NAMES) and not quota_sent(kind, shaped, NAMES)


def test_kinds_as_parsed_from_the_api_server_s_json():
    import json

    rq, tree_kind, queue = json.loads('["ResourceQuota", "ElasticQuotaTree", "ClusterQueue"]')
    assert names_gpu(rq, resource_quota({f"requests.{MEM}": "40"}), NAMES)
    assert names_gpu(tree_kind, tree(ROOT), NAMES) and quota_sent(tree_kind, {"spec": {}}, NAMES)
    assert names_gpu(queue, cluster_queue(GROUPS), NAMES)
