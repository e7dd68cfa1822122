"""Why a workload's pods are missing or waiting, in-process: the quota refusals its controllers' events
record, the Kueue ClusterQueue that keeps it suspended, the ElasticQuotaTree node that holds its Pending
pods (tests/data/quota/events.yaml, what `gpushare explain` reads)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from policies.scoring.workload_explain import (
    WorkloadExplanation,
    WorkloadView,
    events_for,
    explain_workload,
    owned_by,
    quota_refusal,
)
from tests.support.helpers import DATA
from webhook.cli.workload_source import snapshot_view
from webhook.state.snapshot import snapshot_from_objects

EVENTS = DATA / "quota" / "events.yaml"
ITEMS = yaml.safe_load(EVENTS.read_text())["items"]
EXCEEDED = ('exceeded quota: gpu, requested: requests.aliyun.com/gpu-mem=8, used: requests.aliyun.com/gpu-mem=40, '
            'limited: requests.aliyun.com/gpu-mem=40')
KEEPS_TRYING = "the controller keeps trying and creates them once the quota has room"
NO_QUOTA = ("no event records a quota refusing its pods (events are kept about an hour), and quota holds none of "
            "them back")
BIG = ("pod team-b/big-7xk2c waits on its quota: ElasticQuotaTree kube-system/elasticquotatree quota node team-b has "
       'max["aliyun.com/gpu-mem"] 40 GiB, 30 used, 10 left; the pod needs 16 GiB: it waits until the quota node\'s '
       "usage falls below its max")


def explain(namespace: str, name: str, names, items: list[dict[str, Any]] = ITEMS) -> WorkloadExplanation:
    view = snapshot_view(items, namespace, name)
    assert view is not None
    return explain_workload(view, snapshot_from_objects(items, names), names)


def refusal(name: str, count: Any = 1, *, kind: str = "Job", namespace: str = "ns", when: str = "",
            message: str = f'Error creating: pods "x" is forbidden: {EXCEEDED}', **extra: Any) -> dict[str, Any]:
    event = {"kind": "Event", "metadata": {"namespace": namespace}, "reason": "FailedCreate", "count": count,
             "message": message, "involvedObject": {"kind": kind, "name": name, "namespace": namespace}, **extra}
    if when:
        event["lastTimestamp"] = when
    return event


def job(name: str = "j", namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    status = spec.pop("status", {})
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": spec, "status": status}


def test_a_deployment_is_followed_to_the_replicaset_whose_pods_quota_refused(settings):
    found = explain("team-a", "serve", settings.names)
    assert found.workload == "Deployment team-a/serve"
    assert found.headline == "Deployment team-a/serve: quota refused to create some of its pods"
    # The old ReplicaSet, scaled to 0, was refused once too: history, not why pods are missing now.
    assert found.refused == [f"ReplicaSet team-a/serve-6f9c7d5b8: 2 of 4 pods are missing: ResourceQuota team-a/gpu "
                             f'refused 12 attempts to create them, the last with "{EXCEEDED}"; {KEEPS_TRYING}']
    assert found.waiting == []
    assert found.summary == f"{found.headline}: {found.refused[0]}"
    assert found.as_dict() == {"workload": "Deployment team-a/serve", "summary": found.summary,
                               "refused": found.refused, "waiting": []}


def test_a_job_whose_pods_quota_refused_says_so_from_its_own_events(settings):
    found = explain("team-a", "sweep", settings.names)
    # parallelism 2, 6 completions, 1 succeeded: 2 pods wanted at once, none there.
    assert found.refused == [f"Job team-a/sweep: 2 of 2 pods are missing: ResourceQuota team-a/gpu refused 1 attempt "
                             f'to create them, the last with "{EXCEEDED}"; {KEEPS_TRYING}']


def test_a_job_kueue_keeps_suspended_waits_for_its_cluster_queue(settings):
    found = explain("team-c", "train", settings.names)
    assert found.headline == "Job team-c/train waits on quota" and found.refused == []
    assert found.waiting == [
        'it is suspended, waiting for quota in ClusterQueue research (LocalQueue team-c/main): '
        'nominalQuota["aliyun.com/gpu-mem"] 64 GiB, 60 reserved, 4 left; Kueue starts it whole when the queue has room']
    assert found.summary == f"{found.headline}: {found.waiting[0]}"


def test_kueue_waits_are_said_only_for_a_suspended_job_naming_a_queue(settings):
    names = settings.names
    train = next(i for i in ITEMS if i["kind"] == "Job" and i["metadata"]["name"] == "train")
    for change in ({"spec": {**train["spec"], "suspend": False}},
                   {"metadata": {**train["metadata"], "labels": {}}},
                   {"metadata": {**train["metadata"], "labels": "not a mapping"}}):
        items = [i if i is not train else {**copy.deepcopy(train), **change} for i in ITEMS]
        assert explain("team-c", "train", names, items).waiting == []
    # Another queue name: the LocalQueue is not in the state.
    items = [i if i is not train else {**train, "metadata": {**train["metadata"],
                                                             "labels": {"kueue.x-k8s.io/queue-name": "other"}}}
             for i in ITEMS]
    assert explain("team-c", "train", names, items).waiting == [
        "it is suspended and names LocalQueue team-c/other, which the cluster state does not hold: Kueue admits it "
        "only once that queue exists"]
    # The LocalQueue without its ClusterQueue, or the ClusterQueue without GPU figures: no figures.
    without = [i for i in ITEMS if i["kind"] != "ClusterQueue"]
    assert explain("team-c", "train", names, without).waiting == [
        "it is suspended, waiting for quota in ClusterQueue research (LocalQueue team-c/main); Kueue starts it whole "
        "when the queue has room"]


def test_a_job_whose_pending_pod_waits_on_the_elastic_quota_tree_says_so(settings):
    found = explain("team-b", "big", settings.names)
    assert found.as_dict() == {"workload": "Job team-b/big", "summary": f"Job team-b/big waits on quota: {BIG}",
                               "refused": [], "waiting": [BIG]}


def test_a_bound_or_unknown_pod_is_not_said_to_wait(settings):
    names = settings.names
    state = snapshot_from_objects(ITEMS, names)
    big = next(i for i in ITEMS if i["kind"] == "Job" and i["metadata"]["name"] == "big")
    # bert-0 is bound; nobody is unknown to the state: neither waits on the tree.
    view = WorkloadView("Job", big, [big], {}, ["bert-0", "nobody", "big-7xk2c"])
    assert explain_workload(view, state, names).waiting == [BIG]
    assert explain_workload(WorkloadView("Job", big, [big], {}, ["bert-0", "nobody"]), state, names).waiting == []


@pytest.mark.parametrize(("namespace", "name", "kind"), [("team-a", "fits", "Deployment"),
                                                         ("team-a", "broken", "ReplicaSet")])
def test_workloads_quota_does_not_hold_are_not_said_to_wait_on_it(settings, namespace, name, kind):
    found = explain(namespace, name, settings.names)
    assert found.headline == f"{kind} {namespace}/{name}: {NO_QUOTA}" == found.summary
    assert found.refused == found.waiting == []


def test_odd_workloads_and_events_are_answered(settings):
    odd = yaml.safe_load((DATA / "quota" / "events_odd.yaml").read_text())["items"]
    assert explain("a", "d", settings.names, odd).summary == f"Deployment a/d: {NO_QUOTA}"
    assert explain("a", "j", settings.names, odd).summary == f"Job a/j: {NO_QUOTA}"


@pytest.mark.parametrize(("spec", "status", "missing"), [
    ({}, {}, "1 of 1 pods"),  # parallelism defaults to 1
    ({"parallelism": 3}, {"active": 1}, "2 of 3 pods"),
    ({"parallelism": 3, "completions": 5}, {"succeeded": 3}, "2 of 2 pods"),  # only 2 completions left to run
    ({"parallelism": 3, "completions": 5}, {"succeeded": 1, "active": 1}, "2 of 3 pods"),
    ({"parallelism": 3, "completions": 2}, {"succeeded": 2}, None),  # done: nothing missing
    ({"parallelism": 2}, {"active": 2}, None),  # whole now: the refusal is history
    ({"parallelism": "x"}, {"active": "y"}, None),  # unreadable counts count as none: nothing said missing
    ({"parallelism": 2}, {"active": "y"}, "2 of 2 pods"),
    ({"parallelism": 0}, {}, "1 of 1 pods"),  # 0 is unset: the Job controller defaults it to 1
])
def test_a_job_s_missing_pods_count_its_parallelism_and_what_is_left_to_complete(settings, spec, status, missing):
    obj = job(**spec, status=status)
    view = WorkloadView("Job", obj, [obj], {"j": [refusal("j")]})
    found = explain_workload(view, snapshot_from_objects([], settings.names), settings.names)
    if missing is None:
        assert found.refused == [] and found.headline.endswith(NO_QUOTA)
    else:
        [said] = found.refused
        assert said.startswith(f"Job ns/j: {missing} are missing: ResourceQuota ns/gpu refused 1 attempt to ")


@pytest.mark.parametrize(("replicas", "has", "missing"), [(None, None, "1 of 1"), (3, 1, "2 of 3"), (0, 0, None),
                                                          (2, 2, None), (2, None, "2 of 2")])
def test_a_replicaset_s_missing_pods_are_its_replicas_less_the_pods_it_has(settings, replicas, has, missing):
    rs = {"kind": "ReplicaSet", "metadata": {"name": "rs", "namespace": "ns"}, "spec": {}, "status": {}}
    if replicas is not None:
        rs["spec"]["replicas"] = replicas
    if has is not None:
        rs["status"]["replicas"] = has
    view = WorkloadView("ReplicaSet", rs, [rs], {"rs": [refusal("rs", kind="ReplicaSet")]})
    found = explain_workload(view, snapshot_from_objects([], settings.names), settings.names)
    assert [r.split(": ")[1] for r in found.refused] == ([] if missing is None else [f"{missing} pods are missing"])


def test_the_last_refusal_is_quoted_and_every_attempt_counted(settings):
    names = settings.names
    obj = job(parallelism=2)
    later = EXCEEDED.replace("used: requests.aliyun.com/gpu-mem=40", "used: requests.aliyun.com/gpu-mem=36")
    events = [refusal("j", 3, when="2026-01-01T10:05:00Z", message=f"Error creating: {later}"),
              refusal("j", None, when="2026-01-01T10:00:00Z"),  # a count missing is one attempt
              refusal("j", 0, eventTime="2026-01-01T09:00:00.000000Z"),  # as is a count of 0
              {**refusal("j", 4), "reason": "SuccessfulCreate"},  # not a refusal
              refusal("j", 9, message="Error creating: serviceaccount missing")]  # not quota's
    view = WorkloadView("Job", obj, [obj], {"j": events})
    [said] = explain_workload(view, snapshot_from_objects([], names), names).refused
    assert said == (f'Job ns/j: 2 of 2 pods are missing: ResourceQuota ns/gpu refused 5 attempts to create them, the '
                    f'last with "{later}"; {KEEPS_TRYING}')
    # Only one creator of several refused: only it is named; the headline says so.
    other = job("k")
    view = WorkloadView("Job", obj, [other, obj], {"j": events[:1], "k": []})
    found = explain_workload(view, snapshot_from_objects([], names), names)
    assert [r.split(":")[0] for r in found.refused] == ["Job ns/j"]
    assert found.workload == "Job ns/j" and found.headline == "Job ns/j: quota refused to create some of its pods"


def test_a_nameless_workload_is_labelled_in_the_default_namespace(settings):
    obj = {"kind": "Job", "metadata": {}, "spec": {}}
    found = explain_workload(WorkloadView("Job", obj), snapshot_from_objects([], settings.names), settings.names)
    assert found.workload == "Job default/" and found.summary == f"Job default/: {NO_QUOTA}"


@pytest.mark.parametrize(("event", "said"), [
    (refusal("j"), EXCEEDED),
    (refusal("j", message=f"{EXCEEDED} and more words"), EXCEEDED),  # up to the limited list's end
    ({**refusal("j"), "reason": "FailedScheduling"}, None),
    (refusal("j", message="Error creating: forbidden: no quota"), None),
    (refusal("j", message=None), None),
])
def test_a_quota_refusal_is_found_only_in_a_failed_create_event(event, said):
    assert quota_refusal(event) == said


def test_events_are_matched_to_their_involved_object():
    events = [refusal("a"), refusal("a", kind="ReplicaSet"), refusal("b"), refusal("a", namespace="other"),
              {"metadata": {"namespace": "ns"}, "involvedObject": {"kind": "Job", "name": "a"}},  # its own namespace
              {"involvedObject": "x"}]
    matched = events_for(events, "ns", "Job", "a")
    assert matched == [events[0], events[4]] and matched[0] is not events[0]  # copies


def test_owner_references_name_the_creator():
    pod = {"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "name": "rs"}, "x"]}}
    assert owned_by(pod, "ReplicaSet", "rs")
    assert not owned_by(pod, "ReplicaSet", "other") and not owned_by(pod, "Job", "rs")
    assert not owned_by({"metadata": {"ownerReferences": "rs"}}, "ReplicaSet", "rs")
    assert not owned_by({"metadata": "x"}, "ReplicaSet", "rs")


def test_only_a_failed_create_event_is_a_refusal_whatever_its_reason_sorts_as():
    assert quota_refusal({**refusal("j"), "reason": "BackOff"}) is None
    assert quota_refusal({**refusal("j"), "reason": "Created"}) is None


def test_only_the_named_owner_and_the_named_namespace_count():
    assert not owned_by({"metadata": {"ownerReferences": [{"kind": "Deployment", "name": "rs"}]}}, "ReplicaSet", "rs")
    assert not owned_by({"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "name": "a"}]}}, "ReplicaSet", "rs")
    events = [refusal("a", namespace="aaa"), refusal("a", namespace="zzz"), refusal("a", namespace="ns")]
    assert events_for(events, "ns", "Job", "a") == [events[2]]


def test_the_last_refusal_may_carry_only_an_event_time(settings):
    names = settings.names
    obj = job(parallelism=2)
    later = EXCEEDED.replace("used: requests.aliyun.com/gpu-mem=40", "used: requests.aliyun.com/gpu-mem=36")
    events = [refusal("j", eventTime="2026-01-01T11:00:00.000000Z", message=f"Error creating: {later}"),
              refusal("j", when="2026-01-01T10:00:00Z")]
    [said] = explain_workload(WorkloadView("Job", obj, [obj], {"j": events}), snapshot_from_objects([], names),
                              names).refused
    assert f'the last with "{later}"' in said


def test_a_creator_that_is_whole_again_is_history_and_the_next_is_still_said(settings):
    names = settings.names
    old = {"kind": "ReplicaSet", "metadata": {"name": "old", "namespace": "ns"}, "spec": {"replicas": 2},
           "status": {"replicas": 3}}  # more pods than wanted while it scales down: nothing missing
    new = {"kind": "ReplicaSet", "metadata": {"name": "new", "namespace": "ns"}, "spec": {"replicas": 2},
           "status": {"replicas": 1}}
    events = {"old": [refusal("old", kind="ReplicaSet")], "new": [refusal("new", kind="ReplicaSet")]}
    deployment = {"kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"}}
    found = explain_workload(WorkloadView("Deployment", deployment, [old, new], events),
                             snapshot_from_objects([], names), names)
    assert [r.split(":")[0] for r in found.refused] == ["ReplicaSet ns/new"]
    assert found.refused[0].startswith("ReplicaSet ns/new: 1 of 2 pods are missing")


@pytest.mark.parametrize(("kind", "labels", "spec"), [
    ("Deployment", {"kueue.x-k8s.io/queue-name": "main"}, {"suspend": True}),
    ("ReplicaSet", {"kueue.x-k8s.io/queue-name": "main"}, {"suspend": True}),
    ("Job", {"kueue.x-k8s.io/queue-name": "main"}, {}),  # not suspended (Kueue admitted it)
    ("Job", {"kueue.x-k8s.io/queue-name": "main"}, {"suspend": 1}),  # suspend is a boolean
])
def test_only_a_suspended_job_waits_for_kueue(settings, kind, labels, spec):
    names = settings.names
    obj = {"kind": kind, "metadata": {"name": "w", "namespace": "team-c", "labels": labels}, "spec": spec}
    state = snapshot_from_objects(ITEMS, names)
    assert explain_workload(WorkloadView(kind, obj, [obj]), state, names).waiting == []


def test_only_the_local_queue_of_that_name_in_the_job_s_namespace_counts(settings):
    names = settings.names

    def decoy(kind: str, namespace: str, name: str, api: str = "kueue.x-k8s.io/v1beta1") -> dict[str, Any]:
        return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": "decoy"}}
    decoys = [decoy("ResourceQuota", "team-c", "main", "v1"),
              decoy("ElasticQuotaTree", "team-c", "main", "scheduling.sigs.k8s.io/v1beta1"),
              decoy("LocalQueue", "team-a", "main"), decoy("LocalQueue", "team-z", "main"),
              decoy("LocalQueue", "team-c", "a"), decoy("LocalQueue", "team-c", "zz")]
    items = decoys + ITEMS
    assert explain("team-c", "train", names, items).waiting == explain("team-c", "train", names).waiting


def test_a_cluster_queue_s_compute_is_said_in_percent(settings):
    names = settings.names
    queue = next(i for i in ITEMS if i["kind"] == "ClusterQueue")
    with_core = copy.deepcopy(queue)
    with_core["spec"]["resourceGroups"][0]["flavors"][0]["resources"].append(
        {"name": "aliyun.com/gpu-core.percentage", "nominalQuota": 400})
    items = [i if i is not queue else with_core for i in ITEMS]
    [said] = explain("team-c", "train", names, items).waiting
    assert ('nominalQuota["aliyun.com/gpu-mem"] 64 GiB, 60 reserved, 4 left; '
            'nominalQuota["aliyun.com/gpu-core.percentage"] 400 %, 0 reserved, 400 left;') in said


def test_a_cluster_queue_s_compute_under_other_resource_names():
    from webhook.settings import Settings

    names = Settings(names={"resources": {"gpu_core": "example.com/z-core"}}).names
    queue = next(i for i in ITEMS if i["kind"] == "ClusterQueue")
    with_core = copy.deepcopy(queue)
    with_core["spec"]["resourceGroups"][0]["flavors"][0]["resources"] = [
        {"name": "example.com/z-core", "nominalQuota": 400}]
    items = [i if i is not queue else with_core for i in ITEMS]
    [said] = explain("team-c", "train", names, items).waiting
    assert 'nominalQuota["example.com/z-core"] 400 %, 0 reserved, 400 left;' in said


def test_a_queue_no_local_queue_of_the_job_s_namespace_holds_is_said_missing(settings):
    names = settings.names
    elsewhere = [{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                  "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": "research"}}
                 for namespace, name in (("team-z", "other"), ("team-c", "zz"))]
    train = next(i for i in ITEMS if i["kind"] == "Job" and i["metadata"]["name"] == "train")
    relabelled = copy.deepcopy(train)
    relabelled["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "other"}
    items = elsewhere + [i if i is not train else relabelled for i in ITEMS]
    assert explain("team-c", "train", names, items).waiting == [
        "it is suspended and names LocalQueue team-c/other, which the cluster state does not hold: Kueue admits it "
        "only once that queue exists"]
