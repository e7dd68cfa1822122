"""An UPDATE is judged on what it changes, through the real server (docs/design.md, "What an UPDATE
is judged on").

The objects here break a rule already (made before the webhook was installed, before a rule was
tightened, or after an exemption expired). What the cluster's own machinery does to them must pass:
the garbage collector removing the foregroundDeletion finalizer (``kubectl delete --cascade=foreground``),
a label added by hand or by a GitOps tool, the Deployment controller scaling an old ReplicaSet during
a rollout. An UPDATE that makes the violation worse, or adds another, is denied as before.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.helpers import admission_review, gpushare_server
from tests.support.manifests import CORE, MEM, container, pod_spec, workload

pytestmark = pytest.mark.processes

DEPLOYMENTS = {"group": "apps", "resource": "deployments"}
REPLICASETS = {"group": "apps", "resource": "replicasets"}
JOBS = {"group": "batch", "resource": "jobs"}
GS001 = ('GS001: Deployment default/train container "cuda": aliyun.com/gpu-core.percentage=33 is not a multiple '
         'of 5 in 5..100; use 30 or 35')
EXISTING = "; it was so before this update, which does not change it: admitted"


def breaking(kind: str = "Deployment", name: str = "train") -> dict[str, Any]:
    """A workload whose template breaks GS001 (33 is no multiple of 5), as the API server stores it."""
    asks = {MEM: "4", CORE: "33"}
    obj = workload(kind, pod_spec(container("cuda", limits=asks, requests=dict(asks))), name=name)
    obj["metadata"].update({"uid": f"uid-{name}", "resourceVersion": "41", "generation": 3,
                            "labels": {"app": name}})
    if kind in ("Deployment", "ReplicaSet"):
        obj["spec"]["replicas"] = 3
    return obj


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with gpushare_server(tmp_path_factory.mktemp("update-judging")) as running, running.session() as session:
        yield running, session


def review(served, obj: dict[str, Any], old: dict[str, Any] | None, **resource: str) -> dict[str, Any]:
    server, session = served
    operation = "UPDATE" if old is not None else "CREATE"
    body = admission_review(obj, operation=operation, old=old, **resource)
    reply = server.post_json("/validate", body, session)
    assert reply.status_code == 200, reply.text
    return reply.json()["response"]


def test_the_object_breaks_the_rule_on_create(served):
    response = review(served, breaking(), None, **DEPLOYMENTS)
    assert response["allowed"] is False
    assert response["status"]["message"].startswith(GS001)


def test_the_garbage_collector_removing_the_foreground_deletion_finalizer_is_admitted(served):
    # kubectl delete --cascade=foreground: the API server sets deletionTimestamp and the finalizer; the
    # garbage collector removes the finalizer when the dependents are gone (an UPDATE).
    old = breaking()
    old["metadata"].update({"deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0,
                            "finalizers": ["foregroundDeletion"]})
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    response = review(served, new, old, **DEPLOYMENTS)
    assert response["allowed"] is True, response
    assert response.get("warnings", []) == []  # nothing judged: only finalizers can change now


def test_a_job_being_deleted_is_admitted_whatever_its_update(served):
    old = breaking("Job", "batch")
    old["metadata"].update({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["orphan"]})
    new = copy.deepcopy(old)
    del new["metadata"]["finalizers"]
    assert review(served, new, old, **JOBS)["allowed"] is True


def test_a_label_only_update_is_admitted_with_a_warning_naming_the_violation(served):
    old = breaking()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "vision"
    response = review(served, new, old, **DEPLOYMENTS)
    assert response["allowed"] is True, response
    assert response["warnings"] == [GS001 + EXISTING]


def test_the_deployment_controller_scaling_an_old_replica_set_is_admitted(served):
    # During a rollout the Deployment controller updates the old ReplicaSet: spec.replicas and its
    # deployment.kubernetes.io/desired-replicas and max-replicas annotations (k8s.io/kubernetes
    # pkg/controller/deployment/sync.go, scaleReplicaSet).
    old = breaking("ReplicaSet", "train-5d8f7")
    old["metadata"]["annotations"] = {"deployment.kubernetes.io/desired-replicas": "3",
                                      "deployment.kubernetes.io/max-replicas": "4",
                                      "deployment.kubernetes.io/revision": "1"}
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 1
    new["metadata"]["annotations"].update({"deployment.kubernetes.io/desired-replicas": "1",
                                           "deployment.kubernetes.io/max-replicas": "2"})
    response = review(served, new, old, **REPLICASETS)
    assert response["allowed"] is True, response
    assert [w.split(":")[0] for w in response["warnings"]] == ["GS001"]


def test_an_update_that_keeps_the_violation_while_changing_something_else_is_admitted(served):
    # The image changes (a judged part), the violating value does not.
    old = breaking()
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "cuda:12.4"
    response = review(served, new, old, **DEPLOYMENTS)
    assert response["allowed"] is True, response
    assert response["warnings"] == [GS001 + EXISTING]


def test_an_update_that_makes_the_violation_worse_is_denied(served):
    old = breaking()
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {MEM: "4", CORE: "34"},
                                                                      "requests": {MEM: "4", CORE: "34"}}
    response = review(served, new, old, **DEPLOYMENTS)
    assert response["allowed"] is False
    assert response["status"]["message"].startswith(GS001.replace("=33", "=34").removesuffix("use 30 or 35"))


def test_an_update_that_adds_a_violation_is_denied_and_the_old_one_only_warned(served):
    old = breaking()
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"].append(container("sidecar", limits={MEM: "0"}, requests={MEM: "0"}))
    response = review(served, new, old, **DEPLOYMENTS)
    assert response["allowed"] is False
    assert response["status"]["message"].startswith('GS003: Deployment default/train container "sidecar"')
    assert "GS001" not in response["status"]["message"]
    assert response["warnings"] == [GS001 + EXISTING]


def test_an_update_that_brings_a_violation_to_a_good_object_is_denied(served):
    asks = {MEM: "4", CORE: "30"}
    good = workload("Deployment", pod_spec(container("cuda", limits=asks, requests=dict(asks))), name="train")
    response = review(served, breaking(), good, **DEPLOYMENTS)
    assert response["allowed"] is False
    assert response["status"]["message"].startswith(GS001)
