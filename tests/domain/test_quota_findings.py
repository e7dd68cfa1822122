"""GQ001-GQ005 in process, word for word: the quota mistakes of tests/data/quota judged by the engine
(CREATE, and on UPDATE only what the change writes), and GQ005 on the workloads of
tests/data/quota/workloads.yaml against the snapshot tests/data/quota/cluster.yaml (compute quotas:
tests/data/quota/cores.yaml); then each shape of quota object and each way a workload says how many pods
it makes at once (Job, CronJob, replica specs, Ray groups, Argo templates, configured kinds). The same verdicts
through `check`, /dry-run and the real server are tests/server/test_quota_rules.py and
tests/server/test_quota_at_submit.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.admission.engine import Engine
from tests.support.manifests import CORE, MEM, received
from webhook.state.snapshot import load_snapshot

QUOTAS = Path(__file__).parents[1] / "data" / "quota"
GQ001 = ("limits nothing: quota counts aliyun.com/gpu-mem, an extended resource, only under "
         "requests.aliyun.com/gpu-mem, so pods asking for it are admitted whatever it says; write "
         "requests.aliyun.com/gpu-mem: 40 instead")
UNENFORCED = [
    [("GQ001", "deny", f'GQ001: ResourceQuota team-a/bare-key spec.hard["aliyun.com/gpu-mem"] {GQ001}',
      'spec.hard["aliyun.com/gpu-mem"]')],
    [("GQ001", "deny", f'GQ001: ResourceQuota team-b/limits-key spec.hard["limits.aliyun.com/gpu-mem"] {GQ001}',
      'spec.hard["limits.aliyun.com/gpu-mem"]')],
    [("GQ002", "deny", 'GQ002: ResourceQuota team-c/bytes spec.hard["requests.aliyun.com/gpu-mem"] is 16Gi '
                       "(17,179,869,184 GiB, more than a pebibyte of GPU memory): it looks like bytes, but "
                       "aliyun.com/gpu-mem counts GiB; write 16 (16Gi as GiB, rounded up), or 2147483647 for no limit",
      'spec.hard["requests.aliyun.com/gpu-mem"]')],
    [("GQ002", "deny", "GQ002: ElasticQuotaTree kube-system/elasticquotatree quota node team-b "
                       'max["aliyun.com/gpu-mem"] is 80Gi (85,899,345,920 GiB, more than a pebibyte of GPU memory): '
                       "it looks like bytes, but "
                       "aliyun.com/gpu-mem counts GiB; write 80 (80Gi as GiB, rounded up), or 2147483647 for no limit"),
     ("GQ003", "deny", "GQ003: ElasticQuotaTree kube-system/elasticquotatree quota node team-a has min "
                       "aliyun.com/gpu-mem 60 above its max 40: min is guaranteed and max is the most the node may "
                       "use; set min to at most 40 or max to at least 60"),
     ("GQ004", "warn", "GQ004: ElasticQuotaTree kube-system/elasticquotatree root quota node root has "
                       "aliyun.com/gpu-mem min 100 and max 120: the root stands for what the cluster gives the whole "
                       "tree and has no parent to borrow from; set both to 120")],
    [("GQ002", "deny", 'GQ002: ClusterQueue research flavor "default-flavor" resource aliyun.com/gpu-mem nominalQuota '
                       "is 64Gi (68,719,476,736 GiB, more than a pebibyte of GPU memory): it looks like bytes, but "
                       "aliyun.com/gpu-mem counts GiB; write 64 (64Gi as GiB, rounded up), or 2147483647 for no "
                       "limit")],
]


def objects(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((QUOTAS / name).read_text()) if doc]


def findings(engine: Engine, obj: dict[str, Any], **review: Any) -> list[tuple[str, ...]]:
    if "operation" in review:  # decoded from the review, as the webhook receives it
        review["operation"] = received(review["operation"])
    subject = engine.subject(received(obj["kind"]), received(obj), **review)
    return [(f.rule, f.severity, f.message, f.path_text) for f in engine.validate(subject).findings]


def test_each_quota_mistake_is_found_with_its_fix(engine):
    found = [findings(engine, obj) for obj in objects("unenforced.yaml")]
    assert [[f[:3] for f in one] for one in found] == [[f[:3] for f in one] for one in UNENFORCED]
    assert [[f[3] for f in one] for one in found[:3]] == [[f[3] for f in one] for one in UNENFORCED[:3]]


def test_quotas_written_as_quota_counts_them_pass(engine):
    assert [findings(engine, obj) for obj in objects("enforced.yaml")] == [[], [], []]


def test_an_update_is_judged_on_what_it_writes(engine):
    old = objects("unenforced.yaml")[1]
    edited = copy.deepcopy(old)
    edited["spec"]["hard"]["requests.cpu"] = "128"
    assert findings(engine, edited, operation="UPDATE", old=old) == []
    raised = copy.deepcopy(old)
    raised["spec"]["hard"]["limits.aliyun.com/gpu-mem"] = "80"
    assert [f[:2] for f in findings(engine, raised, operation="UPDATE", old=old)] == [("GQ001", "deny")]
    tree = objects("unenforced.yaml")[3]
    relabelled = copy.deepcopy(tree)
    relabelled["metadata"]["labels"] = {"team": "ml"}
    assert findings(engine, relabelled, operation="UPDATE", old=tree) == []


GQ005 = [
    ("GQ005: Deployment team-a/serve: ResourceQuota team-a/gpu has requests.aliyun.com/gpu-mem 40 GiB, 24 used, 16 "
     "left; its 4 pods need 32 GiB (4 x 8): 2 of 4 pods will not be created (the API server's quota admission "
     "refuses them; the controller records FailedCreate events)",
     "GQ005: Deployment team-a/serve: 2 of 4 pods will not be created: ResourceQuota team-a/gpu has 16 of 40 GiB of "
     "requests.aliyun.com/gpu-mem left (24 used); the pods need 32 GiB"),
    ("GQ005: Job team-a/sweep: ResourceQuota team-a/gpu has requests.aliyun.com/gpu-mem 40 GiB, 24 used, 16 left; its "
     "3 pods need 24 GiB (3 x 8): 1 of 3 pods will not be created (the API server's quota admission refuses them; "
     "the controller records FailedCreate events)",
     "GQ005: Job team-a/sweep: 1 of 3 pods will not be created: ResourceQuota team-a/gpu has 16 of 40 GiB of "
     "requests.aliyun.com/gpu-mem left (24 used); the pods need 24 GiB"),
    ('GQ005: PyTorchJob team-b/bert: ElasticQuotaTree kube-system/elasticquotatree quota node team-b has '
     'max["aliyun.com/gpu-mem"] 40 GiB, 30 used, 10 left; its 3 pods need 24 GiB (1 x 8 + 2 x 8): 2 of 3 pods will '
     "wait (Pending) until the quota node's usage falls below its max",
     "GQ005: PyTorchJob team-b/bert: 2 of 3 pods will wait: ElasticQuotaTree kube-system/elasticquotatree quota node "
     'team-b has 10 of 40 GiB of max["aliyun.com/gpu-mem"] left (30 used); the pods need 24 GiB'),
    ('GQ005: Job team-c/tune: ClusterQueue research (LocalQueue team-c/main) has nominalQuota["aliyun.com/gpu-mem"] 64 '
     "GiB, 60 used, 4 left; its 2 pods need 8 GiB (2 x 4): 2 of 2 pods will wait (Kueue admits a workload whole: it "
     "stays suspended until the ClusterQueue has room)", None),
]


@pytest.fixture(scope="module")
def quota_state(settings):
    return load_snapshot(QUOTAS / "cluster.yaml", settings.names)


def test_gq005_says_what_quota_will_do_to_the_pods_a_workload_makes(engine, quota_state):
    found = []
    for obj in objects("workloads.yaml"):
        subject = engine.subject(received(obj["kind"]), received(obj), state=quota_state)
        found.extend((f.rule, f.severity, f.message, f.brief or None) for f in engine.validate(subject).findings)
    assert [f[:2] for f in found] == [("GQ005", "warn")] * 4
    assert [f[2] for f in found] == [message for message, _ in GQ005]
    assert [f[3] for f in found[:3]] == [brief for _, brief in GQ005[:3]]


def test_gq005_is_silent_on_workloads_that_fit_and_without_state(engine, quota_state):
    assert [findings(engine, obj, state=quota_state) for obj in objects("fitting.yaml")] == [[]] * 6
    assert [findings(engine, obj) for obj in objects("workloads.yaml")] == [[]] * 4
    serve = objects("workloads.yaml")[0]
    assert findings(engine, serve, state=quota_state, operation="UPDATE", old=serve) == []


def test_a_cluster_queue_value_written_anew_is_judged_wherever_it_sits(engine):
    queue = objects("unenforced.yaml")[4]
    enforced = copy.deepcopy(queue)
    enforced["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = 64  # the second resource
    assert findings(engine, queue, operation="UPDATE", old=enforced) == [
        (*UNENFORCED[4][0][:3], "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota")]
    assert findings(engine, queue, operation="UPDATE", old=queue) == []
    emptied = {**queue, "spec": {"namespaceSelector": {}}}  # an old queue without resource groups
    assert [f[0] for f in findings(engine, queue, operation="UPDATE", old=emptied)] == ["GQ002"]


def test_gq004_compares_the_roots_min_and_max_by_value(engine):
    tree = objects("unenforced.yaml")[3]
    tree["spec"]["root"]["min"]["aliyun.com/gpu-mem"] = 120  # a number beside the string "120": the same value
    assert [f[0] for f in findings(engine, tree)] == ["GQ002", "GQ003"]


def test_gq005_of_a_single_pod(engine, quota_state):
    one = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "one", "namespace": "team-a"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "one"}}, "template": {
               "metadata": {"labels": {"app": "one"}},
               "spec": {"containers": [{"name": "main", "image": "cuda:12",
                                        "resources": {"limits": {"aliyun.com/gpu-mem": 20}}}]}}}}
    expected = [("GQ005", "warn", "GQ005: Deployment team-a/one: ResourceQuota team-a/gpu has "
                                  "requests.aliyun.com/gpu-mem 40 GiB, 24 used, 16 left; its 1 pod needs 20 GiB "
                                  "(1 x 20): 1 of 1 pods will not be created (the API server's quota admission "
                                  "refuses them; the controller records FailedCreate events)", "")]
    assert findings(engine, one, state=quota_state) == expected
    one["spec"]["replicas"] = -1  # not a count (the API server refuses it): read as the default, one pod
    assert findings(engine, one, state=quota_state) == expected
    one["spec"]["replicas"] = 0  # scaled to zero: no pod is made, so quota has nothing to refuse
    assert findings(engine, one, state=quota_state) == []


# -- GQ001-GQ004 on more shapes of quota object ---------------------------------------------------------

def quota(hard: dict[str, Any], name: str = "gpu", namespace: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": hard}}


def tree(root: dict[str, Any], *children: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
            "spec": {"root": {"name": "root", **root, "children": list(children)}}}


def queue(*resources: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "research", **meta},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": [r["name"] for r in resources],
                                                                 "flavors": [{"name": "a100",
                                                                              "resources": list(resources)}]}]}}


def test_gq001_names_the_fix_for_each_uncounted_key_of_a_quota(engine):
    # The counted key comes first; the keys after it are judged too, and the fix depends on whether
    # the requests. key of the same resource is there already.
    hard = {"requests.aliyun.com/gpu-mem": "40", "limits.aliyun.com/gpu-mem": "40",
            "aliyun.com/gpu-core.percentage": "400"}
    assert findings(engine, quota(hard)) == [
        ("GQ001", "deny", 'GQ001: ResourceQuota team-a/gpu spec.hard["limits.aliyun.com/gpu-mem"] limits nothing: '
                          "quota counts aliyun.com/gpu-mem, an extended resource, only under "
                          "requests.aliyun.com/gpu-mem, so pods asking for it are admitted whatever it says; remove it "
                          "(requests.aliyun.com/gpu-mem is there and is what quota counts)",
         'spec.hard["limits.aliyun.com/gpu-mem"]'),
        ("GQ001", "deny", 'GQ001: ResourceQuota team-a/gpu spec.hard["aliyun.com/gpu-core.percentage"] limits nothing: '
                          "quota counts aliyun.com/gpu-core.percentage, an extended resource, only under "
                          "requests.aliyun.com/gpu-core.percentage, so pods asking for it are admitted whatever it "
                          "says; write requests.aliyun.com/gpu-core.percentage: 400 instead",
         'spec.hard["aliyun.com/gpu-core.percentage"]')]


def test_gq002_judges_gpu_memory_only(engine):
    # A count of cards or of compute percent past 2^20 (what GPU memory in GiB may not pass) is what an admin
    # writes for "no limit", not bytes; a million GiB of GPU memory is a count of GiB.
    hard = {"requests.nvidia.com/gpu": "10000000", "requests.aliyun.com/gpu": "10000000",
            "requests.aliyun.com/gpu-core.percentage": "100000000", "requests.aliyun.com/gpu-mem": "1000000"}
    assert findings(engine, quota(hard)) == []


def bytes_message(label: str, where: str, raw: str, shown: str, wanted: int, unit: str = "GiB") -> str:
    return (f"GQ002: {label} {where} is {raw} ({shown} {unit}, more than a pebibyte of GPU memory): it looks like "
            f"bytes, but aliyun.com/gpu-mem counts {unit}; write {wanted} ({raw} as {unit}, rounded up), or "
            f"2147483647 for no limit")


def test_gq002_rounds_the_count_of_the_unit_up_and_shows_a_fraction_as_it_is(engine):
    # 20G is 20,000,000,000 bytes: 18.6 GiB, so 19 holds it. A fractional count (the API server writes
    # 1048576.25 as 1048576250m) is shown as it is, not rounded; as bytes it is a thousandth of a GiB: 1.
    found = findings(engine, quota({"requests.aliyun.com/gpu-mem": "20G"}))
    assert [f[2] for f in found] == [bytes_message("ResourceQuota team-a/gpu",
                                                   'spec.hard["requests.aliyun.com/gpu-mem"]', "20G",
                                                   "20,000,000,000", 19)]
    found = findings(engine, queue({"name": "aliyun.com/gpu-mem", "nominalQuota": "1048576250m",
                                    "borrowingLimit": "1048576750m"}))
    assert [f[2] for f in found] == [
        bytes_message("ClusterQueue research", 'flavor "a100" resource aliyun.com/gpu-mem nominalQuota',
                      "1048576250m", "1048576.250", 1),
        bytes_message("ClusterQueue research", 'flavor "a100" resource aliyun.com/gpu-mem borrowingLimit',
                      "1048576750m", "1048576.750", 1)]


def test_gq002_in_mib_starts_at_a_pebibyte_of_gpu_memory():
    # names.memory_unit MiB (the device plugin's --memory-unit=MiB): 1Gi is 1,073,741,824 MiB, exactly a
    # pebibyte, so bytes; one MiB less is still a count of MiB (a namespace may hold that much).
    from webhook.settings import Settings

    mib = Engine(Settings(names={"memory_unit": "MiB"}))
    found = findings(mib, quota({"requests.aliyun.com/gpu-mem": "1Gi"}))
    assert [f[2] for f in found] == [bytes_message("ResourceQuota team-a/gpu",
                                                   'spec.hard["requests.aliyun.com/gpu-mem"]', "1Gi",
                                                   "1,073,741,824", 1024, unit="MiB")]
    assert findings(mib, quota({"requests.aliyun.com/gpu-mem": "1073741823"})) == []


def test_a_cluster_queue_is_named_without_a_namespace_even_where_one_is_written(engine):
    # Helm charts often write metadata.namespace on every object; a ClusterQueue is cluster-scoped.
    found = findings(engine, queue({"name": "aliyun.com/gpu-mem", "nominalQuota": "64Gi"}, namespace="team-c"))
    assert [f[2] for f in found] == [bytes_message(
        "ClusterQueue research", 'flavor "a100" resource aliyun.com/gpu-mem nominalQuota', "64Gi",
        "68,719,476,736", 64)]


def test_an_elastic_quota_tree_of_another_api_group_is_not_judged(engine):
    mistakes = tree({"max": {"aliyun.com/gpu-mem": "120"}, "min": {"aliyun.com/gpu-mem": "100"}},
                    {"name": "team-a", "namespaces": ["team-a"], "max": {"aliyun.com/gpu-mem": "80Gi"},
                     "min": {"aliyun.com/gpu-mem": "100Gi"}})
    assert [f[0] for f in findings(engine, mistakes)] == ["GQ002", "GQ002", "GQ003", "GQ004"]
    mistakes["apiVersion"] = "example.com/v1"
    assert findings(engine, mistakes) == []


ROOT_WARNING = ("GQ004: ElasticQuotaTree kube-system/elasticquotatree root quota node root has {} {}: the root stands "
                "for what the cluster gives the whole tree and has no parent to borrow from; set both to {}")


@pytest.mark.parametrize(("root", "shown", "target", "path"), [
    ({"min": {MEM: "100"}}, "min 100 and max (not set)", "100", f'spec.root.min["{MEM}"]'),
    ({"max": {MEM: "120"}}, "min (not set) and max 120", "120", f'spec.root.max["{MEM}"]'),
    # compute is the same at the root, memory is not: memory is warned about
    ({"min": {CORE: "400", MEM: "100"}, "max": {CORE: "400", MEM: "120"}}, "min 100 and max 120", "120",
     f'spec.root.max["{MEM}"]'),
    # a value that is no quantity is not compared; the other resource still is
    ({"min": {CORE: "lots", MEM: "100"}, "max": {CORE: "400", MEM: "120"}}, "min 100 and max 120", "120",
     f'spec.root.max["{MEM}"]'),
], ids=["min-only", "max-only", "one-resource-differs", "one-value-unreadable"])
def test_gq004_warns_of_each_root_resource_whose_min_is_not_its_max(engine, root, shown, target, path):
    assert findings(engine, tree(root)) == [("GQ004", "warn", ROOT_WARNING.format(MEM, shown, target), path)]


def test_a_root_whose_min_is_above_its_max_is_refused_and_warned(engine):
    found = findings(engine, tree({"min": {"aliyun.com/gpu-mem": "120"}, "max": {"aliyun.com/gpu-mem": "100"}}))
    assert [f[:3] for f in found] == [
        ("GQ003", "deny", "GQ003: ElasticQuotaTree kube-system/elasticquotatree quota node root has min "
                          "aliyun.com/gpu-mem 120 above its max 100: min is guaranteed and max is the most the node "
                          "may use; set min to at most 100 or max to at least 120"),
        ("GQ004", "warn", ROOT_WARNING.format("aliyun.com/gpu-mem", "min 120 and max 100", "100"))]


def test_gq003_judges_each_gpu_resource_of_a_node(engine):
    # memory within its max (read first), compute above it
    child = {"name": "team-a", "namespaces": ["team-a"],
             "min": {"aliyun.com/gpu-mem": "20", "aliyun.com/gpu-core.percentage": "300"},
             "max": {"aliyun.com/gpu-mem": "40", "aliyun.com/gpu-core.percentage": "200"}}
    root = {"min": {"aliyun.com/gpu-mem": "120"}, "max": {"aliyun.com/gpu-mem": "120"}}
    assert findings(engine, tree(root, child)) == [
        ("GQ003", "deny", "GQ003: ElasticQuotaTree kube-system/elasticquotatree quota node team-a has min "
                          "aliyun.com/gpu-core.percentage 300 above its max 200: min is guaranteed and max is the "
                          "most the node may use; set min to at most 200 or max to at least 300",
         'spec.root.children[0].min["aliyun.com/gpu-core.percentage"]')]


def test_an_update_is_judged_on_each_value_it_writes(engine):
    # Each resource the update leaves as it was keeps its old mistake unjudged: team-a's memory min above its
    # max, the root's compute min below its max. What it writes anew is judged: team-a's compute, the
    # root's memory.
    old = tree({"min": {CORE: "400", MEM: "120"}, "max": {CORE: "800", MEM: "120"}},
               {"name": "team-a", "namespaces": ["team-a"], "min": {MEM: "60", CORE: "100"},
                "max": {MEM: "40", CORE: "200"}})
    new = copy.deepcopy(old)
    new["spec"]["root"]["min"][MEM] = "100"
    new["spec"]["root"]["children"][0]["min"][CORE] = "300"
    found = findings(engine, new, operation="UPDATE", old=old)
    assert [f[:2] + f[3:] for f in found] == [("GQ003", "deny", f'spec.root.children[0].min["{CORE}"]'),
                                              ("GQ004", "warn", f'spec.root.max["{MEM}"]')]
    assert found[1][2] == ROOT_WARNING.format(MEM, "min 100 and max 120", "120")


def test_a_value_in_a_list_the_old_object_did_not_reach_is_written(engine):
    # The old ClusterQueue had only cpu; the update adds GPU memory after it, at an index the old list has not.
    cpu = {"name": "cpu", "nominalQuota": 64}
    bytes_ = {"name": MEM, "nominalQuota": "64Gi"}
    old = queue(cpu)
    for resources in ([cpu, bytes_], [cpu, {"name": "memory", "nominalQuota": "256Gi"}, bytes_]):
        new = queue(*resources)
        found = findings(engine, new, operation="UPDATE", old=old)
        assert [(f[0], f[1], f[3]) for f in found] == [
            ("GQ002", "deny", f"spec.resourceGroups[0].flavors[0].resources[{len(resources) - 1}].nominalQuota")]


# -- GQ005: how many pods a workload makes at once, and what each needs -----------------------------------

REFUSED = ("GQ005: {label}: ResourceQuota team-a/gpu has requests.aliyun.com/gpu-mem 40 GiB, 24 used, 16 left; its "
           "{pods} {need} GiB ({each}): {missing} of {total} pods will not be created (the API server's quota "
           "admission refuses them; the controller records FailedCreate events)")


def refused(label: str, each: str, missing: int) -> str:
    sizes = [tuple(map(int, part.split(" x "))) for part in each.split(" + ")]
    total = sum(count for count, _ in sizes)
    return REFUSED.format(label=label, pods=f"{total} pods need" if total != 1 else "1 pod needs",
                          need=sum(count * size for count, size in sizes), each=each, missing=missing, total=total)


def gq005(engine: Engine, state: Any, obj: dict[str, Any]) -> list[str]:
    found = findings(engine, obj, state=state)
    assert all(f[:2] == ("GQ005", "warn") for f in found)
    return [f[2] for f in found]


def job(spec: dict[str, Any], name: str, gpu_mem: int, **pod: Any) -> dict[str, Any]:
    template = {"spec": {"restartPolicy": "Never", **pod, "containers": [
        {"name": "main", "image": "cuda:12", "resources": {"limits": {MEM: gpu_mem}}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {**spec, "template": template}}


@pytest.mark.parametrize(("spec", "each", "missing"), [
    ({}, "1 x 20", 1),  # parallelism defaults to 1 (Kubernetes JobSpec)
    ({"parallelism": 4, "completions": 2}, "2 x 10", 1),  # no more pods at once than completions
    ({"parallelism": 2, "completions": -1}, "2 x 10", 1),  # not a count (the API server refuses it): unset
], ids=["default-parallelism", "fewer-completions", "negative-completions"])
def test_gq005_counts_the_pods_a_job_runs_at_once(engine, quota_state, spec, each, missing):
    size = int(each.split(" x ")[1])
    assert gq005(engine, quota_state, job(spec, "train", size)) == [refused("Job team-a/train", each, missing)]


def test_gq005_is_silent_on_a_job_with_nothing_to_complete(engine, quota_state):
    assert gq005(engine, quota_state, job({"parallelism": 2, "completions": 0}, "done", 20)) == []


def test_gq005_reads_a_cron_jobs_job_template(engine, quota_state):
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "team-a"},
            "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": job({"parallelism": 3}, "", 8)["spec"]}}}
    assert gq005(engine, quota_state, cron) == [refused("CronJob team-a/nightly", "3 x 8", 1)]


def test_gq005_adds_the_pods_overhead_as_quota_does(engine, quota_state):
    # PodRequests adds spec.overhead (set from the RuntimeClass): 12 + 6 GiB do not fit in 16.
    sandboxed = job({}, "sandboxed", 12, runtimeClassName="gpu-sandbox", overhead={MEM: 6})
    assert gq005(engine, quota_state, sandboxed) == [refused("Job team-a/sandboxed", "1 x 18", 1)]


def pytorch_job(**replicas: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "bert", "namespace": "team-a"},
            "spec": {"pytorchReplicaSpecs": replicas}}


def replica(gpu_mem: int | None, **spec: Any) -> dict[str, Any]:
    limits = {MEM: gpu_mem} if gpu_mem is not None else {"cpu": "4"}
    return {**spec, "template": {"spec": {"containers": [
        {"name": "pytorch", "image": "pytorch:2", "resources": {"limits": limits}}]}}}


def test_gq005_counts_each_replica_spec_of_a_custom_workload(engine, quota_state):
    # A replica spec without replicas makes one pod (Kubeflow's ReplicaSpec: "If unspecified, defaults to
    # 1", kubeflow/training-operator sdk/python/docs/V1ReplicaSpec.md).
    job_ = pytorch_job(Master=replica(8), Worker=replica(8, replicas=2))
    assert gq005(engine, quota_state, job_) == [
        refused("PyTorchJob team-a/bert", "1 x 8 + 2 x 8", 1)]


def test_gq005_leaves_out_replica_specs_that_ask_for_no_gpu_or_make_no_pod(engine, quota_state):
    # The launcher asks for no GPU; the evaluators are scaled to zero: only the workers count.
    job_ = pytorch_job(Master=replica(None), Evaluator=replica(16, replicas=0), Worker=replica(8, replicas=3))
    assert gq005(engine, quota_state, job_) == [refused("PyTorchJob team-a/bert", "3 x 8", 1)]


def test_gq005_counts_one_pod_per_argo_template(engine, quota_state):
    flow = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "fit", "namespace": "team-a"},
            "spec": {"entrypoint": "fit", "templates": [{"name": "fit", "container": {
                "image": "cuda:12", "resources": {"limits": {MEM: 20}}}}]}}
    assert gq005(engine, quota_state, flow) == [refused("Workflow team-a/fit", "1 x 20", 1)]


def test_gq005_reads_replicas_beside_a_template_only(quota_state):
    # A configured kind whose pod location holds resources, not a template: it is one pod, whatever else
    # the object holds beside it (only a replica spec's template has its count there).
    from webhook.settings import Settings

    configured = Engine(Settings(workloads={"kinds": [{"group": "example.com", "kind": "TrainingRun", "paths": [
        {"path": "spec.launcher.resources", "holds": "resources"}]}]}))
    run = {"apiVersion": "example.com/v1", "kind": "TrainingRun", "metadata": {"name": "run-1", "namespace": "team-a"},
           "spec": {"launcher": {"replicas": 3, "resources": {"limits": {MEM: 20}}}}}
    assert gq005(configured, quota_state, run) == [refused("TrainingRun team-a/run-1", "1 x 20", 1)]


@pytest.fixture(scope="module")
def cores_state(settings):
    return load_snapshot(QUOTAS / "cores.yaml", settings.names)


def compute_workload(kind: str, namespace: str, count: int) -> dict[str, Any]:
    limits = {MEM: 8, CORE: 100}
    template = {"metadata": {"labels": {"app": "infer"}}, "spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "cuda:12", "resources": {"limits": limits}}]}}
    if kind == "Deployment":
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "infer", "namespace": namespace},
                "spec": {"replicas": count, "selector": {"matchLabels": {"app": "infer"}}, "template": template}}
    return {"apiVersion": "batch/v1", "kind": kind, "metadata": {"name": "infer", "namespace": namespace},
            "spec": {"parallelism": count, "template": template}}


def test_gq005_judges_gpu_compute_in_percent(engine, cores_state):
    # team-d's memory (72 GiB left) holds the two pods, its compute (150 % left) holds one of them.
    assert gq005(engine, cores_state, compute_workload("Deployment", "team-d", 2)) == [
        "GQ005: Deployment team-d/infer: ResourceQuota team-d/gpu has requests.aliyun.com/gpu-core.percentage "
        "200 %, 50 used, 150 left; its 2 pods need 200 % (2 x 100): 1 of 2 pods will not be created (the API "
        "server's quota admission refuses them; the controller records FailedCreate events)"]
    assert gq005(engine, cores_state, compute_workload("Job", "team-e", 3)) == [
        'GQ005: Job team-e/infer: ElasticQuotaTree kube-system/elasticquotatree quota node team-e has '
        'max["aliyun.com/gpu-core.percentage"] 300 %, 100 used, 200 left; its 3 pods need 300 % (3 x 100): 1 of 3 '
        "pods will wait (Pending) until the quota node's usage falls below its max"]


class PodsOnlyState:
    """A cluster state that keeps no per-namespace sums (``quota_usage``), only its pods and quota objects:
    GQ005 counts what quota charges from the pods itself."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def availability(self) -> Any:
        return self.base.availability()

    def quota_objects(self) -> list[tuple[str, dict[str, Any]]]:
        return self.base.quota_objects()

    def pods(self) -> list[Any]:
        return self.base.pods()


def test_gq005_counts_the_pods_of_a_state_without_usage_sums(engine, quota_state):
    serve = objects("workloads.yaml")[0]
    assert gq005(engine, PodsOnlyState(quota_state), serve) == [GQ005[0][0]]


def test_gq005_is_listed_as_needing_cluster_state_for_the_workloads_it_counts(settings):
    # What `gpushare rules` lists: a PodTemplate makes no pod, so it is not among the kinds.
    from policies.rules.rule_index import rule_entries

    [entry] = [e for e in rule_entries(settings) if e.id == "GQ005"]
    assert entry.stateful is True
    assert entry.kinds[:7] == ("CronJob", "DaemonSet", "Deployment", "Job", "ReplicaSet", "ReplicationController",
                               "StatefulSet")
    assert "PyTorchJob.kubeflow.org" in entry.kinds and "PodTemplate" not in entry.kinds


def test_the_quota_webhook_is_sent_the_quotas_that_name_a_gpu_resource(settings):
    # What the generated matchCondition of quotas.validate.gpushare.io answers (its CEL is held to this
    # in tests/deploy/test_match_conditions.py).
    from policies.generate.match_conditions import SCOPES, scope_sends, triggers

    [scope] = [s for s in SCOPES if s.name == "quotas.validate.gpushare.io"]
    sends = triggers(scope, settings)
    assert [scope_sends(scope, sends, obj["kind"], obj, settings) for obj in objects("unenforced.yaml")] == [True] * 5
    assert scope_sends(scope, sends, "ResourceQuota", quota({"requests.cpu": "64"}), settings) is False


def test_gq005_follows_configured_resource_names():
    # Compute named by another vendor (its name sorts after memory's): units and sizes follow the names.
    from webhook.settings import Settings
    from webhook.state.snapshot import snapshot_from_objects, snapshot_objects

    percent = "example.com/gpu-percent"
    configured = Settings(names={"resources": {"gpu_core": percent}})
    state = snapshot_from_objects(snapshot_objects((QUOTAS / "cores.yaml").read_text().replace(CORE, percent)),
                                  configured.names)
    workload = received(compute_workload("Deployment", "team-d", 2))
    workload["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {MEM: 8, percent: 100}
    assert gq005(Engine(configured), state, workload) == [
        f"GQ005: Deployment team-d/infer: ResourceQuota team-d/gpu has requests.{percent} 200 %, 50 used, 150 left; "
        f"its 2 pods need 200 % (2 x 100): 1 of 2 pods will not be created (the API server's quota admission "
        f"refuses them; the controller records FailedCreate events)"]


def test_gq005_counts_no_pod_for_a_ray_worker_group_without_replicas(engine, quota_state):
    # KubeRay defaults a worker group's replicas to 0 (ray-operator/apis/ray/v1/raycluster_types.go); the
    # head group makes its one pod (here without a GPU).
    def group(gpu_mem: int | None) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.9.0-gpu", "resources": {
            "limits": {MEM: gpu_mem} if gpu_mem is not None else {"cpu": "4"}}}]}}

    ray = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "tune", "namespace": "team-a"},
           "spec": {"headGroupSpec": {"rayStartParams": {}, "template": group(None)},
                    "workerGroupSpecs": [{"groupName": "autoscaled", "rayStartParams": {}, "template": group(16)},
                                         {"groupName": "fixed", "replicas": 3, "rayStartParams": {},
                                          "template": group(8)}]}}
    assert gq005(engine, quota_state, ray) == [refused("RayCluster team-a/tune", "3 x 8", 1)]
    ray["spec"]["workerGroupSpecs"][0]["replicas"] = 1
    assert gq005(engine, quota_state, ray) == [refused("RayCluster team-a/tune", "1 x 16 + 3 x 8", 3)]


def test_an_update_from_a_python_caller_is_judged_on_what_it_writes(engine):
    # Engine.subject called in process with the operation written in the source (not decoded from a review):
    # the same verdict as over HTTP.
    old = objects("unenforced.yaml")[1]
    edited = copy.deepcopy(old)
    edited["spec"]["hard"]["requests.cpu"] = "128"
    subject = engine.subject("ResourceQuota", edited, operation="UPDATE", old=old)
    assert engine.validate(subject).findings == []
