"""What each GPU quota of a namespace has used and has left, counted as its enforcer counts it: a
ResourceQuota's requests. keys against the pods it charges, every ElasticQuotaTree node from the
namespace's leaf to the root against the pods placed below it, a Kueue ClusterQueue's quota against what
Kueue reports reserved; and the cluster's shares per quota (`inspect --quotas`, the metrics)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.model.pod_usage import PodUsage, UsageIndex
from policies.model.settings import Names
from policies.quota.quota_usage import QuotaLimit, quota_limits, quota_shares

NAMES = Names()
MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"
NOW = 1_700_000_000.0


def usage(namespace: str, mem: int = 0, core: int = 0, *, node: str = "n1", phase: str = "Running",
          deadline: float | None = None) -> PodUsage:
    return PodUsage(namespace, phase, node, deadline, mem, core)


def resource_quota(namespace: str, hard: dict[str, Any], name: str = "gpu", **spec: Any) -> tuple[str, dict]:
    return ("ResourceQuota", {"apiVersion": "v1", "kind": "ResourceQuota",
                              "metadata": {"name": name, "namespace": namespace}, "spec": {"hard": hard, **spec}})


def tree(root: dict[str, Any], api: str = "scheduling.sigs.k8s.io/v1beta1") -> tuple[str, dict]:
    return ("ElasticQuotaTree", {"apiVersion": api, "kind": "ElasticQuotaTree",
                                 "metadata": {"name": "t", "namespace": "kube-system"}, "spec": {"root": root}})


def local_queue(namespace: str, name: str, target: Any, api: str = "kueue.x-k8s.io/v1beta1") -> tuple[str, dict]:
    return ("LocalQueue", {"apiVersion": api, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
                           "spec": {"clusterQueue": target}})


def cluster_queue(flavors: list[dict[str, Any]], reserved: Any = None, name: str = "research",
                  api: str = "kueue.x-k8s.io/v1beta1", **spec: Any) -> tuple[str, dict]:
    obj: dict[str, Any] = {"apiVersion": api, "kind": "ClusterQueue", "metadata": {"name": name},
                           "spec": {"resourceGroups": [{"flavors": flavors}], **spec}}
    if reserved is not None:
        obj["status"] = {"flavorsReservation": reserved}
    return ("ClusterQueue", obj)


def flavor(name: str, **quotas: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "resources": [{"name": resource, **fields} for resource, fields in quotas.items()]}


def limits(namespace: str, quotas: list[tuple[str, dict]], pods: list[PodUsage] = (), queue: str | None = None,
           now: float = NOW) -> list[tuple[str, str, str, int, int, int]]:
    return [(q.mechanism, q.label, q.key, q.hard, q.used, q.left)
            for q in quota_limits(namespace, quotas, pods, NAMES, now, queue=queue)]


def test_a_resource_quota_counts_its_requests_keys_against_the_pods_it_charges():
    quotas = [resource_quota("team-a", {f"requests.{MEM}": "40", f"requests.{CORE}": "300", f"limits.{MEM}": "10",
                                        MEM: "10", "requests.aliyun.com/gpu": "2", "requests.cpu": "64"}),
              resource_quota("team-b", {f"requests.{MEM}": "8"})]
    pods = [usage("team-a", 16, 50), usage("team-a", 8, node=""),  # charged whether placed or not
            usage("team-a", 30, phase="Succeeded"),  # finished: not charged
            usage("team-a", 4, deadline=NOW - 1),  # past its deletion deadline: not charged
            usage("team-a", 2, deadline=NOW + 30),  # being deleted, not yet past it: charged
            usage("team-b", 5)]
    assert limits("team-a", quotas, pods) == [
        ("ResourceQuota", "ResourceQuota team-a/gpu", f"requests.{MEM}", 40, 26, 14),
        ("ResourceQuota", "ResourceQuota team-a/gpu", f"requests.{CORE}", 300, 50, 250)]
    assert limits("team-b", quotas, pods) == [("ResourceQuota", "ResourceQuota team-b/gpu", f"requests.{MEM}", 8, 5, 3)]
    assert limits("team-c", quotas, pods) == []


@pytest.mark.parametrize(("hard", "expected"), [
    ("40", [40]), ("0", [0]), ("1.5", [1]), ("-1", []), ("forty", []), ("1Gi", [1073741824]),
])
def test_a_hard_limit_is_counted_in_whole_units_and_a_negative_or_unreadable_one_left_out(hard, expected):
    assert [hard for *_, hard, _, _ in limits("a", [resource_quota("a", {f"requests.{MEM}": hard})])] == expected


def test_a_full_quota_has_nothing_left_never_less():
    assert QuotaLimit("ResourceQuota", "q", "k", MEM, 10, 12).left == 0
    assert QuotaLimit("ResourceQuota", "q", "k", MEM, 10, 10).left == 0
    assert QuotaLimit("ResourceQuota", "q", "k", MEM, 10, 3).left == 7


def test_a_scoped_or_foreign_resource_quota_is_left_out():
    quotas = [resource_quota("a", {f"requests.{MEM}": "4"}, scopes=["BestEffort"]),
              resource_quota("a", {f"requests.{MEM}": "4"}, name="plain"),
              ("ResourceQuota", {"apiVersion": "example.com/v1", "metadata": {"name": "x", "namespace": "a"},
                                 "spec": {"hard": {f"requests.{MEM}": "1"}}}),
              ("ResourceQuota", {"apiVersion": "v1", "metadata": "x", "spec": {"hard": {f"requests.{MEM}": "1"}}})]
    assert [label for _, label, *_ in limits("a", quotas)] == ["ResourceQuota a/plain"]


TREE = {"name": "root", "max": {MEM: "640", CORE: "2147483647"}, "children": [
    {"name": "research", "max": {MEM: "100"}, "children": [
        {"name": "team-a", "namespaces": ["team-a", "team-a2"], "max": {MEM: "40", CORE: "200"}},
        {"name": "team-b", "namespaces": ["team-b"], "max": {MEM: "2147483647"}}]},
    {"name": "free", "namespaces": ["team-f"], "max": {MEM: "-5"}},
    {"name": "odd", "namespaces": ["team-o"], "max": {MEM: "x"}}]}


def test_every_tree_node_from_the_leaf_to_the_root_limits_the_namespace():
    pods = [usage("team-a", 10, 100), usage("team-a2", 6), usage("team-b", 20), usage("team-f", 1),
            usage("team-a", 50, node=""),  # not placed: capacity scheduling counts placed pods
            usage("team-b", 7, phase="Failed")]
    label = "ElasticQuotaTree kube-system/t quota node "
    assert limits("team-a", [tree(TREE)], pods) == [
        ("ElasticQuotaTree", f"{label}root", f'max["{MEM}"]', 640, 37, 603),  # 2147483647 compute: unlimited
        ("ElasticQuotaTree", f"{label}research", f'max["{MEM}"]', 100, 36, 64),
        ("ElasticQuotaTree", f"{label}team-a", f'max["{MEM}"]', 40, 16, 24),
        ("ElasticQuotaTree", f"{label}team-a", f'max["{CORE}"]', 200, 100, 100)]
    assert [lbl for _, lbl, *_ in limits("team-b", [tree(TREE)], pods)] == [f"{label}root", f"{label}research"]
    assert [lbl for _, lbl, *_ in limits("team-f", [tree(TREE)], pods)] == [f"{label}root"]  # -5 is no limit
    assert [lbl for _, lbl, *_ in limits("team-o", [tree(TREE)], pods)] == [f"{label}root"]
    assert limits("elsewhere", [tree(TREE)], pods) == []  # a namespace no leaf names
    assert limits("team-a", [tree(TREE, api="example.com/v1")], pods) == []


def test_the_usage_may_be_given_as_an_index():
    pods = [usage("team-a", 10), usage("team-b", 3)]
    assert limits("team-a", [tree(TREE)], UsageIndex(pods)) == limits("team-a", [tree(TREE)], pods)


def test_a_local_queue_s_cluster_queue_limits_the_workload_that_names_it():
    reserved = [{"name": "a100", "resources": [{"name": MEM, "total": "60"}, {"name": CORE, "total": 30}]},
                {"name": "t4", "resources": [{"name": MEM, "total": "-3"}, {"name": MEM, "total": "x"}, "odd"]},
                "odd"]
    quotas = [local_queue("team-c", "main", "research"),
              cluster_queue([flavor("a100", **{MEM: {"nominalQuota": 64}, CORE: {"nominalQuota": 400}}),
                             flavor("t4", **{MEM: {"nominalQuota": "16"}})], reserved)]
    label = "ClusterQueue research (LocalQueue team-c/main)"
    assert limits("team-c", quotas, queue="main") == [
        ("ClusterQueue", label, f'nominalQuota["{MEM}"]', 80, 60, 20),  # the flavors added up: never stricter
        ("ClusterQueue", label, f'nominalQuota["{CORE}"]', 400, 30, 370)]
    assert limits("team-c", quotas) == [] and limits("team-c", quotas, queue="other") == []
    assert limits("team-d", quotas, queue="main") == []  # another namespace's queue of that name


def test_in_a_cohort_the_borrowing_limit_adds_and_without_one_nothing_is_said():
    def queue(**mem: Any) -> list[tuple[str, dict]]:
        return [local_queue("team-c", "main", "research"),
                cluster_queue([flavor("a100", **{MEM: mem})], cohort="shared")]
    assert limits("team-c", queue(nominalQuota=64, borrowingLimit=16), queue="main") == [
        ("ClusterQueue", "ClusterQueue research (LocalQueue team-c/main)",
         f'nominalQuota["{MEM}"] + borrowingLimit["{MEM}"]', 80, 0, 80)]
    assert limits("team-c", queue(nominalQuota=64), queue="main") == []  # may borrow whatever the cohort has
    named = [local_queue("team-c", "main", "research"),
             cluster_queue([flavor("a100", **{MEM: {"nominalQuota": 8, "borrowingLimit": 2}})], cohortName="c")]
    assert [hard for *_, hard, _, _ in limits("team-c", named, queue="main")] == [10]


@pytest.mark.parametrize("quotas", [
    [local_queue("team-c", "main", "research"), cluster_queue([flavor("a", **{MEM: {"nominalQuota": 2147483647}})])],
    [local_queue("team-c", "main", "research"), cluster_queue([flavor("a", **{MEM: {"nominalQuota": "x"}})])],
    [local_queue("team-c", "main", "research"), cluster_queue([flavor("a", **{MEM: {"borrowingLimit": 1}})])],
    [local_queue("team-c", "main", "research"),
     cluster_queue([flavor("a", **{MEM: {"nominalQuota": 8, "borrowingLimit": 2147483647}})], cohort="c")],
    [local_queue("team-c", "main", "other"), cluster_queue([flavor("a", **{MEM: {"nominalQuota": 8}})])],
    [local_queue("team-c", "main", "research", api="example.com/v1"),
     cluster_queue([flavor("a", **{MEM: {"nominalQuota": 8}})])],
    [local_queue("team-c", "main", "research"),
     cluster_queue([flavor("a", **{MEM: {"nominalQuota": 8}})], api="example.com/v1")],
    [cluster_queue([flavor("a", **{MEM: {"nominalQuota": 8}})])],
], ids=["unlimited", "unreadable", "no-nominal", "unlimited-borrowing", "other-queue", "foreign-local-queue",
        "foreign-cluster-queue", "no-local-queue"])
def test_a_queue_without_a_usable_quota_says_nothing(quotas):
    assert limits("team-c", quotas, queue="main") == []


def test_quota_shares_cover_every_limit_with_the_namespaces_below_it():
    quotas = [resource_quota("team-a", {f"requests.{MEM}": "40"}),
              resource_quota("team-z", {"requests.cpu": "1"}),
              ("ResourceQuota", {"apiVersion": "v1", "metadata": {"name": "nameless"}, "spec": {}}),
              tree({"name": "root", "max": {MEM: "640"}, "children": [
                  {"name": "team-a", "namespaces": ["team-a", "team-a2"], "max": {MEM: "40"}},
                  {"name": "team-b", "namespaces": ["team-b"]}]}),
              tree({"name": "other", "namespaces": ["team-x"], "max": {MEM: "1"}}, api="example.com/v1"),
              local_queue("team-c", "main", "research"), local_queue("team-d", "main", "research"),
              local_queue("team-e", "main", "research", api="example.com/v1"),
              ("LocalQueue", {"apiVersion": "kueue.x-k8s.io/v1beta1", "metadata": {"namespace": "team-g"},
                              "spec": {"clusterQueue": "research"}}),
              cluster_queue([flavor("a100", **{MEM: {"nominalQuota": 64}})],
                            [{"name": "a100", "resources": [{"name": MEM, "total": "60"}]}])]
    pods = [usage("team-a", 10), usage("team-a2", 5), usage("team-b", 3)]
    shares = quota_shares(quotas, pods, NAMES, NOW)
    assert [(s.namespaces, s.limit.label, s.limit.key, s.limit.hard, s.limit.used) for s in shares] == [
        (("team-c", "team-d"), "ClusterQueue research", f'nominalQuota["{MEM}"]', 64, 60),
        (("team-a", "team-a2", "team-b"), "ElasticQuotaTree kube-system/t quota node root", f'max["{MEM}"]', 640, 18),
        (("team-a", "team-a2"), "ElasticQuotaTree kube-system/t quota node team-a", f'max["{MEM}"]', 40, 15),
        (("team-a",), "ResourceQuota team-a/gpu", f"requests.{MEM}", 40, 10)]
    assert quota_shares([], pods, NAMES, NOW) == []


def test_quota_objects_as_parsed_from_the_api_server_s_json():
    import json

    quotas = [resource_quota("team-a", {f"requests.{MEM}": "40"}), tree(TREE),
              local_queue("team-a", "main", "research"), cluster_queue([flavor("a100", **{MEM: {"nominalQuota": 64}})])]
    parsed = [tuple(pair) for pair in json.loads(json.dumps(quotas))]  # kinds and names are fresh strings
    pods = [usage("team-a", 10)]
    assert limits("team-a", parsed, pods, queue="main") == limits("team-a", quotas, pods, queue="main")
    assert len(limits("team-a", parsed, pods, queue="main")) == 6
    shares = quota_shares(parsed, pods, NAMES, NOW)
    assert [(s.limit.label, s.namespaces) for s in shares] == [
        (s.limit.label, s.namespaces) for s in quota_shares(quotas, pods, NAMES, NOW)]
    assert len(shares) == 6


def test_a_limit_above_the_unlimited_mark_is_a_limit():
    big = {"name": "root", "namespaces": ["a"], "max": {MEM: "3000000000"}}
    assert [hard for *_, hard, _, _ in limits("a", [tree(big)])] == [3000000000]
    queue = [local_queue("a", "main", "research"), cluster_queue([flavor("f", **{MEM: {"nominalQuota": 3000000000}})])]
    assert [hard for *_, hard, _, _ in limits("a", queue, queue="main")] == [3000000000]


def test_other_kinds_and_other_gpus_are_not_read_as_these_quotas():
    weird_queue = ("LocalQueue", {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                                  "metadata": {"name": "q", "namespace": "a"},
                                  "spec": {"root": {"name": "r", "namespaces": ["a"], "max": {MEM: "4"}}}})
    assert limits("a", [weird_queue]) == []
    queue = [local_queue("a", "main", "research"),
             cluster_queue([flavor("f", **{MEM: {"nominalQuota": 8, "borrowingLimit": 2},
                                           "nvidia.com/gpu": {"nominalQuota": 4, "borrowingLimit": 4}})],
                           cohort="c")]
    assert [(key, hard) for _, _, key, hard, _, _ in limits("a", queue, queue="main")] == [
        (f'nominalQuota["{MEM}"] + borrowingLimit["{MEM}"]', 10)]


def test_only_the_local_queue_and_cluster_queue_of_those_names_count():
    def named(kind: str, namespace: str, name: str, api: str, **spec: Any) -> tuple[str, dict]:
        return (kind, {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": namespace},
                       "spec": spec})
    decoys = [named("ResourceQuota", "team-c", "main", "v1", clusterQueue="decoy"),
              named("LocalQueue", "team-z", "main", "kueue.x-k8s.io/v1beta1", clusterQueue="decoy"),
              named("LocalQueue", "team-c", "zz", "kueue.x-k8s.io/v1beta1", clusterQueue="decoy"),
              named("ElasticQuotaTree", "", "research", "scheduling.sigs.k8s.io/v1beta1"),
              named("LocalQueue", "", "research", "kueue.x-k8s.io/v1beta1")]
    real = [local_queue("team-c", "main", "research"), cluster_queue([flavor("a", **{MEM: {"nominalQuota": 8}})]),
            cluster_queue([flavor("a", **{MEM: {"nominalQuota": 99}})], name="decoy")]
    assert [hard for *_, hard, _, _ in limits("team-c", decoys + real, queue="main")] == [8]


def test_a_reservation_without_a_total_reserves_nothing():
    reserved = [{"name": "a", "resources": [{"name": MEM, "total": "6"}, {"name": MEM}]}]
    quotas = [local_queue("c", "main", "research"),
              cluster_queue([flavor("a", **{MEM: {"nominalQuota": 8}})], reserved)]
    assert [used for *_, used, _ in limits("c", quotas, queue="main")] == [6]


def test_a_resource_quota_alone_in_its_namespace_is_shared_too():
    quotas = [resource_quota("team-q", {f"requests.{MEM}": "12"})]
    shares = quota_shares(quotas, [usage("team-q", 5)], NAMES, NOW)
    assert [(s.namespaces, s.limit.label, s.limit.used) for s in shares] == [
        (("team-q",), "ResourceQuota team-q/gpu", 5)]
