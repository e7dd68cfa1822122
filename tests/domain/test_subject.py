"""The object under review as the rules see it (policies/model/subject.py), built by the engine from
real-shaped objects: how messages name it and its containers, where it lives, the pods it makes, the
GPU resources it names, the labels a grant's selector matches, which exemptions (annotation and
grants) set which rules aside, and the cluster state it may or may not trust."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.admission.engine import Engine
from policies.model.cluster import Availability
from policies.model.grants import StaticNamespaces
from policies.model.subject import StateUnavailable, Subject
from tests.support.cluster_objects import node, state_of
from tests.support.manifests import CORE, MEM, container, pod_spec, received, workload
from webhook.settings import Settings

DATA = Path(__file__).parents[1] / "data"
REASON = "vendor image reads GPU memory in bytes"
GRANTS = {"grants": [
    {"name": "legacy", "namespace": "team-a", "names": "legacy-*", "rules": ["GS003", "gs004"], "reason": "old image",
     "expires": "2999-12-31"},
    {"name": "by-label", "namespace": "team-a", "selector": {"matchLabels": {"app": "legacy"}}, "rules": ["GS007"],
     "reason": "vendor names", "expires": "2999-12-31"},
    {"name": "lapsed", "namespace": "team-a", "names": "*",
     "rules": ["GS001"], "reason": "was needed", "expires": "2020-01-01"},
    {"name": "elsewhere", "namespace": "team-b", "names": "*",
     "rules": ["GS002"], "reason": "other team", "expires": "2999-12-31"},
]}


def _subject(engine: Engine, obj: dict[str, Any], **review: Any) -> Subject:
    return engine.subject(received(obj["kind"]), received(obj), **review)


@pytest.fixture(scope="module")
def granting() -> Engine:
    return Engine(Settings(exemptions={**GRANTS, "annotation_namespaces": ["team-a"]}))


def _legacy(kind: str = "Deployment", name: str = "legacy-0", labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    obj = workload(kind, pod_spec(container("c", limits={MEM: "2Gi"})), name=name, namespace="team-a")
    template = obj["metadata"] if kind == "Pod" else obj["spec"]["template"]["metadata"]
    template.setdefault("labels", {}).update(labels or {})
    if annotations:
        template["annotations"] = annotations
    return obj


@pytest.mark.parametrize(("metadata", "namespace", "label"), [
    ({"name": "train", "namespace": "team-a"}, "", "Job team-a/train"),
    ({"name": "train"}, "team-b", "Job team-b/train"),  # the request's namespace
    ({"name": "train", "namespace": ""}, "team-b", "Job team-b/train"),
    ({"name": "train", "namespace": 7}, "team-b", "Job team-b/train"),
    ({"generateName": "train-", "namespace": "team-a"}, "", "Job team-a/train-*"),
    ({"name": "", "generateName": "train-"}, "team-a", "Job team-a/train-*"),
    ({"name": 5, "generateName": 5}, "team-a", "Job team-a/<unnamed>"),
    ({"generateName": ""}, "team-a", "Job team-a/<unnamed>"),
    ({"name": "train"}, "", "Job train"),
], ids=str)
def test_how_messages_name_the_object(engine, metadata, namespace, label):
    obj = workload("Job", pod_spec(container("c", limits={MEM: 2})))
    obj["metadata"] = metadata
    assert _subject(engine, obj, namespace=namespace).label == label
    malformed = {**obj, "metadata": "x"}
    assert _subject(engine, malformed, namespace="team-a").label == "Job team-a/<unnamed>"


def test_a_node_has_no_namespace():
    subject = _subject(Engine(Settings()), node("gpu-1"))
    assert (subject.label, subject.namespace, subject.template_kind) == ("Node gpu-1", "", "Node")


def test_a_custom_workload_is_named_by_its_group_where_kubernetes_has_its_kind_too(engine):
    volcano = yaml.safe_load((DATA / "workloads" / "volcanojob.yaml").read_text())
    subject = _subject(engine, volcano)
    assert subject.workload is not None and subject.template_kind == ""
    assert subject.label.startswith("Job.batch.volcano.sh ")
    pytorch = _subject(engine, yaml.safe_load((DATA / "workloads" / "pytorchjob.yaml").read_text()))
    assert pytorch.label == "PyTorchJob kubeflow/pytorch-simple"
    assert [pod.label for pod in pytorch.pods] == [
        "PyTorchJob kubeflow/pytorch-simple spec.pytorchReplicaSpecs.Master.template",
        "PyTorchJob kubeflow/pytorch-simple spec.pytorchReplicaSpecs.Worker.template"]
    assert pytorch.containers == [c for pod in pytorch.pods for c in pod.containers]


def test_how_messages_name_a_container(engine):
    pod = workload("Pod", pod_spec(container("app", limits={MEM: 2}), init=[container("warm", limits={MEM: 1})]),
                   name="p")
    subject = _subject(engine, pod)
    assert [subject.where(c) for c in subject.containers] == [
        'Pod default/p init container "warm"', 'Pod default/p container "app"']
    pytorch = _subject(engine, yaml.safe_load((DATA / "workloads" / "pytorchjob.yaml").read_text()))
    worker = pytorch.pods[1].containers[0]
    assert pytorch.where(worker) == ('PyTorchJob kubeflow/pytorch-simple spec.pytorchReplicaSpecs.Worker.template'
                                     '.spec.containers[0] (container "pytorch")')
    path = ("spec", "trainer", "resourcesPerNode")
    assert pytorch.naming("resources", "node", path) == (
        "PyTorchJob kubeflow/pytorch-simple spec.trainer.resourcesPerNode")
    assert pytorch.naming("initContainers", "init", path) == (
        'PyTorchJob kubeflow/pytorch-simple spec.trainer.resourcesPerNode (init container "init")')


def test_the_pods_and_gpu_resources_the_object_makes(engine):
    spec = pod_spec(container("app", limits={MEM: 2, CORE: 0}, requests={"aliyun.com/gpu": 1}),
                    init=[container("warm", requests={MEM: 1})])
    subject = _subject(engine, workload("Deployment", spec, name="d"))
    [pod] = subject.pods
    assert (pod.label, pod.spec_path, pod.labels) == ("Deployment default/d", ("spec", "template", "spec"),
                                                       {"app": "d"})
    assert pod.containers is subject.containers and len(pod.containers) == 2
    assert subject.asked == {MEM, CORE, "aliyun.com/gpu"}  # a zero is named too
    assert subject.pod_spec[1] == ("spec", "template", "spec")
    assert subject.label is subject.label  # worked out once


@pytest.mark.parametrize(("kind", "labels"), [
    ("Pod", {"app": "legacy", "tier": "gpu"}), ("Deployment", {"app": "legacy", "tier": "gpu"}),
    ("CronJob", {"app": "legacy", "tier": "gpu"}),
])
def test_a_grant_selector_matches_the_pods_labels(engine, kind, labels):
    obj = workload(kind, pod_spec(container("c", limits={MEM: 2})), name="legacy")
    meta = (obj["metadata"] if kind == "Pod" else obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
            if kind == "CronJob" else obj["spec"]["template"]["metadata"])
    meta["labels"] = {**labels, "replicas": 3}  # a value that is no string is no label
    obj["metadata"].setdefault("labels", {}) if kind == "Pod" else obj["metadata"].update(labels={"owner": "x"})
    assert _subject(engine, obj).pod_labels == labels


def test_pod_labels_of_a_malformed_template_are_none(engine):
    obj = workload("Deployment", pod_spec(container("c")))
    obj["spec"]["template"]["metadata"] = {"labels": ["app=x"]}
    assert _subject(engine, obj).pod_labels == {}
    obj["spec"]["template"] = "x"
    assert _subject(engine, obj).pod_labels == {}


def test_grants_and_the_annotation_set_rules_aside(granting):
    today = date(2026, 6, 1)
    subject = _subject(granting, _legacy(labels={"app": "legacy"}, annotations={
        "gpushare.io/exempt": "GS005", "gpushare.io/exempt-reason": REASON}))
    subject.today = today
    assert [(o.grant.name, sorted(o.ids), o.expired) for o in subject.grants] == [
        ("legacy", ["GS003", "GS004"], False), ("by-label", ["GS007"], False), ("lapsed", [], True)]
    assert subject.set_aside == {"GS003", "GS004", "GS005", "GS007"}
    assert subject.exempted_by({"GS003"}) == [("grant:legacy", "old image")]
    assert subject.exempted_by({"GS005", "GS007"}) == [("annotation", REASON), ("grant:by-label", "vendor names")]
    assert subject.exempted_by({"GS001", "GS002"}) == []
    # the annotation and a grant setting the same rule aside: set aside once, named by both
    both = _subject(granting, _legacy(annotations={"gpushare.io/exempt": "GS003", "gpushare.io/exempt-reason": REASON}))
    assert both.set_aside == {"GS003", "GS004"}
    assert both.exempted_by({"GS003"}) == [("annotation", REASON), ("grant:legacy", "old image")]


def test_without_an_honoured_annotation_only_grants_set_rules_aside(engine, granting):
    annotated = {"gpushare.io/exempt": "GS005", "gpushare.io/exempt-reason": REASON}
    # the annotation in a namespace an admin did not allow: not honoured
    strict = Engine(Settings(exemptions=GRANTS))
    subject = _subject(strict, _legacy(name="other", annotations=annotated),
                       namespaces=StaticNamespaces({"team-a": {}}))
    assert subject.exemption is not None and not subject.exemption.honoured
    assert subject.set_aside == set() and subject.exempted_by({"GS005"}) == []
    # no reason: not honoured either, though allowed
    reasonless = _subject(granting, _legacy(name="other", annotations={"gpushare.io/exempt": "GS005"}))
    assert reasonless.exemption.allowed and reasonless.set_aside == set()
    # no exemption and no grant covering it
    plain = _subject(engine, _legacy(name="other"))
    assert (plain.exemption, plain.grants, plain.set_aside, plain.exempted_by({"GS003"})) == (None, [], set(), [])


def test_grants_are_judged_only_in_a_namespace_with_grants(granting):
    cluster_wide = _subject(granting, node("legacy-1"))
    assert cluster_wide.grants == []
    no_grants = Engine(Settings())
    assert _subject(no_grants, _legacy()).grants == []
    assert _subject(granting, _legacy()).today is None  # judged against today's UTC date
    assert [o.grant.name for o in _subject(granting, _legacy()).grants] == ["legacy", "lapsed"]


def test_an_annotation_exemption_asks_the_namespace_labels(engine):
    annotated = {"gpushare.io/exempt": "GS003", "gpushare.io/exempt-reason": REASON}
    allowed = _subject(engine, _legacy(annotations=annotated),
                       namespaces=StaticNamespaces({"team-a": {"gpushare.io/exemptions": "allowed"}}))
    assert allowed.exemption.honoured
    assert allowed.exemption.permission == "namespace label gpushare.io/exemptions=allowed"
    assert allowed.set_aside == {"GS003"}
    unknown = _subject(engine, _legacy(annotations=annotated))
    assert not unknown.exemption.allowed


def test_a_stateful_rule_is_told_why_the_state_cannot_be_trusted(engine):
    pod = workload("Pod", pod_spec(container("c", limits={MEM: 2})))
    with pytest.raises(StateUnavailable) as raised:
        _subject(engine, pod).usable_state("placement", "GB001")
    assert (raised.value.switch, raised.value.what, raised.value.reason) == ("placement", "GB001",
                                                                           "no cluster state was given")
    assert str(raised.value) == "GB001: no cluster state was given"

    class Syncing:
        def __init__(self, base):
            self.base = base

        def availability(self):
            return Availability(False, "the watch has not listed pods yet", "the cluster state is syncing",
                                "the pods are listed")

    state = state_of(Settings(), [node("gpu-1")], [])
    with pytest.raises(StateUnavailable) as raised:
        _subject(engine, pod, state=Syncing(state)).usable_state("capacity", "GC001")
    assert (raised.value.reason, raised.value.cause, raised.value.retry_when) == (
        "the watch has not listed pods yet", "the cluster state is syncing", "the pods are listed")
    assert _subject(engine, pod, state=state).usable_state("capacity", "GC001") is state
