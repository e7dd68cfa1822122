"""`gpushare explain` and /explain say when a Pending pod waits on its ElasticQuotaTree rather than on nodes;
`gpushare explain` on a Deployment, ReplicaSet or Job says when quota refused its pods or holds it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.check_helpers import run_gpushare
from tests.support.fake_apiserver import running
from tests.support.helpers import DATA, gpushare_server
from tests.support.quota_crds import QUOTA_CRDS

pytestmark = pytest.mark.processes

CLUSTER = DATA / "quota" / "cluster.yaml"
HELD = ('ElasticQuotaTree kube-system/elasticquotatree quota node team-b has max["aliyun.com/gpu-mem"] 40 GiB, '
        "30 used, 10 left; the pod needs 16 GiB: it waits until the quota node's usage falls below its max")


def test_a_pod_held_by_its_quota_node_is_said_to_wait_on_it():
    done = run_gpushare("explain", "team-b/queued", "--snapshot", CLUSTER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (f'Pod team-b/queued ("main" 16 GiB) waits on its quota: {HELD}; '
                                           "1 node(s) could take it now")


def test_a_pod_its_quota_node_has_room_for_is_not():
    done = run_gpushare("explain", "team-b/waiting", "--snapshot", CLUSTER, "-o", "json")
    explanation = json.loads(done.stdout)
    assert explanation["quota"] == []
    assert explanation["summary"].endswith("it is waiting for its scheduler, not for room")


def test_the_explain_endpoint_says_it_too(tmp_path):
    with gpushare_server(tmp_path, "--snapshot", str(CLUSTER)) as server, server.session() as session:
        reply = session.get(server.url + "/explain", params={"namespace": "team-b", "name": "queued"}, timeout=10)
        assert reply.status_code == 200, reply.text
        assert reply.json()["quota"] == [HELD]


# Workloads: pods a ResourceQuota refused were never created; the refusal is the FailedCreate event of the
# ReplicaSet or Job that tried. A Job Kueue has not admitted stays suspended.
EVENTS = DATA / "quota" / "events.yaml"
EXCEEDED = ('"exceeded quota: gpu, requested: requests.aliyun.com/gpu-mem=8, used: requests.aliyun.com/gpu-mem=40, '
            'limited: requests.aliyun.com/gpu-mem=40"')
KEEPS_TRYING = "the controller keeps trying and creates them once the quota has room"
SERVE = [
    "Deployment team-a/serve: quota refused to create some of its pods",
    f"  - ReplicaSet team-a/serve-6f9c7d5b8: 2 of 4 pods are missing: ResourceQuota team-a/gpu refused 12 attempts "
    f"to create them, the last with {EXCEEDED}; {KEEPS_TRYING}",
]
TRAIN = [
    "Job team-c/train waits on quota",
    '  - it is suspended, waiting for quota in ClusterQueue research (LocalQueue team-c/main): '
    'nominalQuota["aliyun.com/gpu-mem"] 64 GiB, 60 reserved, 4 left; Kueue starts it whole when the queue has room',
]
BIG = ("pod team-b/big-7xk2c waits on its quota: ElasticQuotaTree kube-system/elasticquotatree quota node team-b has "
       'max["aliyun.com/gpu-mem"] 40 GiB, 30 used, 10 left; the pod needs 16 GiB: it waits until the quota node\'s '
       "usage falls below its max")
NO_QUOTA = ("no event records a quota refusing its pods (events are kept about an hour), and quota holds none of "
            "them back")


def _explain(*args: str | Path) -> list[str]:
    done = run_gpushare("explain", *args)
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.splitlines()


def test_a_deployment_whose_pods_quota_refused_is_followed_to_its_replicaset_events():
    assert _explain("team-a/serve", "--snapshot", EVENTS) == SERVE
    assert _explain("serve", "-n", "team-a", "--snapshot", EVENTS) == SERVE


def test_a_job_whose_pods_quota_refused_says_so_from_its_own_events():
    assert _explain("team-a/sweep", "--snapshot", EVENTS) == [
        "Job team-a/sweep: quota refused to create some of its pods",
        f"  - Job team-a/sweep: 2 of 2 pods are missing: ResourceQuota team-a/gpu refused 1 attempt to create them, "
        f"the last with {EXCEEDED}; {KEEPS_TRYING}"]


def test_a_job_kueue_keeps_suspended_waits_for_its_cluster_queue():
    assert _explain("train", "-n", "team-c", "--snapshot", EVENTS) == TRAIN


def test_a_job_whose_pod_waits_on_the_elastic_quota_tree_says_so():
    done = run_gpushare("explain", "team-b/big", "--snapshot", EVENTS, "-o", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"workload": "Job team-b/big", "summary": f"Job team-b/big waits on quota: {BIG}",
                                       "refused": [], "waiting": [BIG]}


def test_workloads_quota_does_not_hold_are_not_said_to_wait_on_it():
    # no event at all; a FailedCreate for another reason (a missing service account) is not quota's
    assert _explain("team-a/fits", "--snapshot", EVENTS) == [f"Deployment team-a/fits: {NO_QUOTA}"]
    assert _explain("team-a/broken", "--snapshot", EVENTS) == [f"ReplicaSet team-a/broken: {NO_QUOTA}"]


def test_a_name_that_is_neither_pod_nor_workload_is_still_a_usage_error():
    done = run_gpushare("explain", "team-a/nosuch", "--snapshot", EVENTS)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"gpushare: error: pod team-a/nosuch in {EVENTS}: no such pod; name its namespace "
                                   f"with -n NAMESPACE (or NAMESPACE/POD)")


def test_live_explain_reads_the_events_by_field_selector(tmp_path):
    items = yaml.safe_load(EVENTS.read_text())["items"]
    with running() as api:
        api.install_crd(*QUOTA_CRDS)
        api.add(*items)
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        assert _explain("team-a/serve", "--kubeconfig", kubeconfig) == SERVE
        assert _explain("team-c/train", "--kubeconfig", kubeconfig) == TRAIN
        assert _explain("team-a/fits", "--kubeconfig", kubeconfig) == [f"Deployment team-a/fits: {NO_QUOTA}"]
        event_reads = [r for r in api.requests if r.path == "/api/v1/namespaces/team-a/events"]
        assert {r.query.get("fieldSelector") for r in event_reads} == {
            "involvedObject.kind=ReplicaSet,involvedObject.name=serve-6f9c7d5b8",
            "involvedObject.kind=ReplicaSet,involvedObject.name=serve-5d8b6c4f7"}


def test_live_explain_refused_its_events_says_so_in_one_line(tmp_path):
    items = yaml.safe_load(EVENTS.read_text())["items"]
    with running() as api:
        api.install_crd(*QUOTA_CRDS)
        api.add(*items)
        api.fail_next(1, 403, prefix="/api/v1/namespaces/team-a/events")
        done = run_gpushare("explain", "team-a/serve", "--kubeconfig", api.kubeconfig(tmp_path / "kubeconfig"))
        url = api.url
    assert done.returncode == 1 and not done.stdout and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"gpushare: error: the API server {url} refused to read team-a/serve and its "
                                   f"events: HTTP 403 Forbidden")


def test_odd_workloads_and_events_in_a_hand_written_snapshot_are_answered_not_crashed_on():
    odd = DATA / "quota" / "events_odd.yaml"
    assert _explain("a/d", "--snapshot", odd) == [f"Deployment a/d: {NO_QUOTA}"]
    assert _explain("a/j", "--snapshot", odd) == [f"Job a/j: {NO_QUOTA}"]
