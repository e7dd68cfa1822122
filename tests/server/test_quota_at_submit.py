"""GQ005 through `gpushare check --snapshot`, /dry-run and admission on the real server started on a snapshot
holding a ResourceQuota and an ElasticQuotaTree (tests/data/quota/cluster.yaml): workloads that pass what
their namespace's quotas have left are warned with exact words; ones that fit, and namespaces without a
quota, are not; Pods are left to the API server's own quota admission."""

from __future__ import annotations

import pytest
import yaml

from tests.support.check_helpers import check_json, line_of
from tests.support.helpers import DATA, admission_review, gpushare_server

pytestmark = pytest.mark.processes

QUOTAS = DATA / "quota"
CLUSTER = QUOTAS / "cluster.yaml"
WORKLOADS = QUOTAS / "workloads.yaml"
FITTING = QUOTAS / "fitting.yaml"

DEPLOYMENT = ("GQ005: Deployment team-a/serve: ResourceQuota team-a/gpu has requests.aliyun.com/gpu-mem 40 GiB, "
              "24 used, 16 left; its 4 pods need 32 GiB (4 x 8): 2 of 4 pods will not be created (the API server's "
              "quota admission refuses them; the controller records FailedCreate events)")
JOB = ("GQ005: Job team-a/sweep: ResourceQuota team-a/gpu has requests.aliyun.com/gpu-mem 40 GiB, 24 used, 16 left; "
       "its 3 pods need 24 GiB (3 x 8): 1 of 3 pods will not be created (the API server's quota admission refuses "
       "them; the controller records FailedCreate events)")
KUEUE = ("GQ005: Job team-c/tune: ClusterQueue research (LocalQueue team-c/main) has "
         'nominalQuota["aliyun.com/gpu-mem"] 64 GiB, 60 used, 4 left; its 2 pods need 8 GiB (2 x 4): 2 of 2 pods '
         "will wait (Kueue admits a workload "
         "whole: it stays suspended until the ClusterQueue has room)")
# What an admission warning says (the API server may cut warnings past 256 characters).
DEPLOYMENT_BRIEF = ("GQ005: Deployment team-a/serve: 2 of 4 pods will not be created: ResourceQuota team-a/gpu has 16 "
                    "of 40 GiB of requests.aliyun.com/gpu-mem left (24 used); the pods need 32 GiB")
JOB_BRIEF = ("GQ005: Job team-a/sweep: 1 of 3 pods will not be created: ResourceQuota team-a/gpu has 16 of 40 GiB of "
             "requests.aliyun.com/gpu-mem left (24 used); the pods need 24 GiB")
PYTORCHJOB_BRIEF = ("GQ005: PyTorchJob team-b/bert: 2 of 3 pods will wait: ElasticQuotaTree "
                    'kube-system/elasticquotatree quota node team-b has 10 of 40 GiB of max["aliyun.com/gpu-mem"] left '
                    "(30 used); the pods need 24 GiB")
PYTORCHJOB = ('GQ005: PyTorchJob team-b/bert: ElasticQuotaTree kube-system/elasticquotatree quota node team-b has '
              'max["aliyun.com/gpu-mem"] 40 GiB, 30 used, 10 left; its 3 pods need 24 GiB (1 x 8 + 2 x 8): 2 of 3 '
              "pods will wait (Pending) until the quota node's usage falls below its max")


def _docs(path):
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_check_with_the_snapshot_warns_what_quota_will_do():
    code, report = check_json("--snapshot", CLUSTER, WORKLOADS)
    assert code == 0  # warnings: the workloads are admitted
    found = sorted((f["line"], f["rule"], f["message"]) for f in report["findings"])
    # Said of the workload as a whole: at the line its document starts (apiVersion, just above its kind).
    assert found == [(line_of(WORKLOADS, "kind: Deployment") - 1, "GQ005", DEPLOYMENT),
                     (line_of(WORKLOADS, "metadata: {name: sweep") - 2, "GQ005", JOB),
                     (line_of(WORKLOADS, "kind: PyTorchJob") - 1, "GQ005", PYTORCHJOB),
                     (line_of(WORKLOADS, "  name: tune") - 3, "GQ005", KUEUE)]


def test_workloads_that_fit_and_namespaces_without_quota_get_no_quota_warning():
    code, report = check_json("--snapshot", CLUSTER, FITTING)
    assert code == 0
    assert [f for f in report["findings"] if f["rule"].startswith("GQ")] == []
    assert report["summary"]["objects"] == 6


def test_without_a_snapshot_nothing_is_said_about_quota():
    _, report = check_json(WORKLOADS)
    assert [f for f in report["findings"] if f["rule"] == "GQ005"] == []


@pytest.fixture(scope="module")
def quota_server(tmp_path_factory):
    with gpushare_server(tmp_path_factory.mktemp("quota"), "--snapshot", str(CLUSTER)) as running:
        yield running


@pytest.fixture(scope="module")
def quota_session(quota_server):
    with quota_server.session() as client:
        yield client


def _warnings(result):
    return [w["message"] if isinstance(w, dict) else w for w in result["warnings"]]


def test_dry_run_reports_what_quota_will_do(quota_server, quota_session):
    body = WORKLOADS.read_text() + "---\n" + FITTING.read_text()
    reply = quota_session.post(quota_server.url + "/dry-run", data=body.encode(),
                               headers={"Content-Type": "application/yaml"}, timeout=15)
    assert reply.status_code == 200, reply.text
    results = reply.json()["results"]
    quota = {r["name"] + "/" + r["namespace"]: [w for w in _warnings(r) if w.startswith("GQ")] for r in results}
    assert quota == {"serve/team-a": [DEPLOYMENT], "sweep/team-a": [JOB], "bert/team-b": [PYTORCHJOB],
                     "tune/team-c": [KUEUE], "small/team-a": [], "one/team-b": [], "big/team-free": [],
                     "big/no-quota": [], "small/team-c": [], "borrows/team-c": []}
    assert all(r["allowed"] for r in results)


def _admit(server, session, obj, **review):
    return server.post_json("/validate", admission_review(obj, **review), session).json()["response"]


def test_admission_admits_with_the_warning(quota_server, quota_session):
    deployment, job, pytorchjob, _ = _docs(WORKLOADS)
    response = _admit(quota_server, quota_session, deployment, group="apps", resource="deployments")
    assert response["allowed"] is True and response["warnings"] == [DEPLOYMENT_BRIEF]
    response = _admit(quota_server, quota_session, job, group="batch", resource="jobs")
    assert response["allowed"] is True and response["warnings"] == [JOB_BRIEF]
    response = _admit(quota_server, quota_session, pytorchjob, group="kubeflow.org", resource="pytorchjobs")
    assert response["allowed"] is True and response["warnings"] == [PYTORCHJOB_BRIEF]
    for fitting in _docs(FITTING):
        group = "apps" if fitting["kind"] == "Deployment" else "batch" if fitting["kind"] == "Job" else "kubeflow.org"
        response = _admit(quota_server, quota_session, fitting, group=group)
        assert response["allowed"] is True and not any(w.startswith("GQ") for w in response.get("warnings") or [])


def test_pods_are_left_to_the_api_server_s_quota_admission(quota_server, quota_session):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", "namespace": "team-a"},
           "spec": {"schedulerName": "ack-co-scheduler", "containers": [
               {"name": "c", "image": "cuda:12", "resources": {"limits": {"aliyun.com/gpu-mem": 32}}}]}}
    response = _admit(quota_server, quota_session, pod)
    assert response["allowed"] is True and not any(w.startswith("GQ") for w in response.get("warnings") or [])


def test_an_update_is_not_judged_against_quota(quota_server, quota_session):
    deployment = _docs(WORKLOADS)[0]
    response = _admit(quota_server, quota_session, deployment, operation="UPDATE", old=deployment, group="apps",
                      resource="deployments")
    assert response["allowed"] is True and not any(w.startswith("GQ") for w in response.get("warnings") or [])
