"""What of an object an UPDATE is judged on (policies/rules/judged.py), in-process: the parts per kind,
whether an UPDATE changes them (Python and the CEL the matchConditions carry, evaluated with cel-python,
agree), and the words docs/design.md shows for them."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import celpy
import pytest

from policies.model.resources import CUSTOM_WORKLOADS
from policies.model.settings import PolicySettings
from policies.rules.judged import (
    CEL_NOT_DELETING,
    UPDATED_KINDS,
    JudgedParts,
    Part,
    deleting,
    judged_parts,
    markdown,
    parts_for,
    pod_label_keys,
)
from policies.rules.relevance import Triggers
from tests.domain.test_cel import cel_go_accepts_has
from tests.support import manifests
from tests.support.manifests import MEM, container, pod_spec, workload

_ENV = celpy.Environment()
SETTINGS = PolicySettings()
TRIGGERS = Triggers(annotations=frozenset({"gpushare.io/exempt"}), node_labels=frozenset({"ack.node.gpu.schedule"}),
                    read_keys=frozenset({"example.com/read"}))


@functools.cache
def _program(expression: str) -> Any:
    return _ENV.program(_ENV.compile(expression))


def cel(expression: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> bool:
    cel_go_accepts_has(expression)
    result = _program(expression).evaluate({"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old)})
    assert isinstance(result, celpy.celtypes.BoolType), f"{expression}: {result!r}"
    return bool(result)


def changed(kind: str, obj: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether the UPDATE changes a judged part, asked of Python and of the CEL (they must agree)."""
    parts = parts_for(kind, TRIGGERS, SETTINGS)
    python = not parts.unchanged(obj, old)
    assert cel(parts.cel_changed(), obj, old) is python, (kind, obj, old)
    return python


def deployment(**meta: Any) -> dict[str, Any]:
    obj = workload("Deployment", pod_spec(container(limits={MEM: "3"})), name="train")
    obj["metadata"].update(meta)
    return obj


def node(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return manifests.node(labels, annotations, spec={})


def _edit(obj: dict[str, Any], *path: str, value: Any) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    where = new
    for part in path[:-1]:
        where = where.setdefault(part, {})
    where[path[-1]] = value
    return new


DEPLOYMENT = deployment()


@pytest.mark.parametrize(("new", "expected"), [
    (DEPLOYMENT, False),
    (_edit(DEPLOYMENT, "spec", "replicas", value=9), False),
    (_edit(DEPLOYMENT, "metadata", "labels", value={"team": "a"}), False),
    (_edit(DEPLOYMENT, "metadata", "annotations", value={"deployment.kubernetes.io/revision": "2"}), False),
    (_edit(DEPLOYMENT, "status", value={"replicas": 2}), False),
    (_edit(DEPLOYMENT, "spec", "template", "spec", "nodeName", value="gpu-1"), True),
    (_edit(DEPLOYMENT, "spec", "template", "metadata", value={"labels": {"app": "x"}}), True),
    (_edit(DEPLOYMENT, "metadata", "annotations", value={"gpushare.io/exempt": "GS003"}), True),
    (_edit(DEPLOYMENT, "metadata", "annotations", value={"example.com/read": "1"}), True),
])
def test_a_workload_update_is_judged_on_its_template_and_the_annotations_read(new, expected):
    assert changed("Deployment", new, DEPLOYMENT) is expected


def test_an_annotation_read_is_judged_on_its_value_and_its_presence():
    with_exempt = _edit(DEPLOYMENT, "metadata", "annotations", value={"gpushare.io/exempt": "GS003"})
    assert changed("Deployment", _edit(with_exempt, "metadata", "annotations", value={"gpushare.io/exempt": "GS004"}),
                   with_exempt)
    assert changed("Deployment", DEPLOYMENT, with_exempt)  # removed
    # another annotation beside it changes nothing judged
    both = _edit(with_exempt, "metadata", "annotations", value={"gpushare.io/exempt": "GS003", "other": "x"})
    assert not changed("Deployment", both, with_exempt)
    # an empty value is still there: "" is not absent
    empty = _edit(DEPLOYMENT, "metadata", "annotations", value={"gpushare.io/exempt": ""})
    assert changed("Deployment", empty, DEPLOYMENT)


def test_a_template_that_appears_or_goes_is_a_change():
    bare = copy.deepcopy(DEPLOYMENT)
    del bare["spec"]["template"]
    assert changed("Deployment", DEPLOYMENT, bare)
    assert changed("Deployment", bare, DEPLOYMENT)
    no_spec = copy.deepcopy(DEPLOYMENT)
    del no_spec["spec"]
    assert not changed("Deployment", no_spec, no_spec)
    assert changed("Deployment", no_spec, DEPLOYMENT)


def test_a_cronjob_is_judged_on_its_job_template():
    cron = workload("CronJob", pod_spec(container(limits={MEM: "3"})), name="nightly")
    assert not changed("CronJob", _edit(cron, "spec", "schedule", value="0 1 * * *"), cron)
    assert changed("CronJob", _edit(cron, "spec", "jobTemplate", "spec", "template", "spec", "nodeName",
                                    value="gpu-1"), cron)
    # the job template's own fields above the pod template are not judged
    assert not changed("CronJob", _edit(cron, "spec", "jobTemplate", "spec", "backoffLimit", value=3), cron)


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "x"}},
       "spec": pod_spec(container(limits={MEM: "3"}))}


@pytest.mark.parametrize(("new", "expected"), [
    (_edit(POD, "metadata", "labels", value={"app": "y"}), False),
    (_edit(POD, "metadata", "labels", value={"app": "x", "aliyun.com/gpu-count": "2"}), True),
    (_edit(POD, "metadata", "annotations", value={"scheduler.framework.gpushare.allocation": "{}"}), False),
    (_edit(POD, "spec", "nodeName", value="gpu-1"), True),
])
def test_a_pod_update_is_judged_on_its_spec_and_the_labels_read(new, expected):
    assert changed("Pod", new, POD) is expected


def test_a_custom_workload_is_judged_on_its_whole_spec():
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
           "spec": {"runPolicy": {"suspend": False}}}
    assert changed(CUSTOM_WORKLOADS, _edit(job, "spec", "runPolicy", "suspend", value=True), job)
    assert not changed(CUSTOM_WORKLOADS, _edit(job, "status", value={"x": 1}), job)


@pytest.mark.parametrize(("new", "old", "expected"), [
    (node({"ack.node.gpu.schedule": "cgpu"}), node({"ack.node.gpu.schedule": "share"}), True),
    (node({"ack.node.gpu.schedule": "cgpu"}), node({"ack.node.gpu.schedule": "cgpu", "zone": "a"}), False),
    (node({"ack.node.gpu.schedule": "cgpu"}), node(), True),
    (node(), node({"zone": "a"}), False),
    # node rules read their keys as labels or annotations
    (node(annotations={"ack.node.gpu.schedule": "cgpu"}), node(), True),
    (node(annotations={"example.com/read": "1"}), node(annotations={"example.com/read": "2"}), True),
    (node(annotations={"gpushare.io/exempt": "GN001"}), node(), True),
    (node(annotations={"node.alpha.kubernetes.io/ttl": "0"}), node(), False),
])
def test_a_node_update_is_judged_on_the_keys_node_rules_read(new, old, expected):
    assert changed("Node", new, old) is expected


def test_a_kind_judged_on_create_only_is_compared_whole():
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "gpu-1"}}
    assert changed("Binding", _edit(binding, "target", "name", value="gpu-2"), binding)
    assert changed("Binding", _edit(binding, "metadata", "labels", value={"a": "b"}), binding)
    assert not changed("Binding", copy.deepcopy(binding), binding)


def test_nothing_is_unchanged_without_an_old_object():
    assert not parts_for("Pod", TRIGGERS, SETTINGS).unchanged(POD, None)


def test_a_part_reads_what_the_cel_reads():
    assert Part(("spec", "replicas")).value({"spec": {"replicas": 0}}) == [0]
    assert Part(("spec", "replicas")).value({"spec": {}}) == []
    assert Part(("spec", "replicas")).value({"spec": "not a map"}) == []
    keyed = Part(("metadata", "labels"), frozenset({"b", "a"}))
    assert keyed.value({"metadata": {"labels": {"a": "1", "c": "3"}}}) == [["1"], []]
    assert keyed.value({"metadata": {}}) == [[], []]
    assert keyed.value({"metadata": {"labels": ["not", "a", "map"]}}) == [[], []]
    assert Part(()).value({"a": 1}) == [{"a": 1}]


def test_no_keys_read_leaves_nothing_to_compare():
    parts = JudgedParts("Node", (Part(("metadata", "labels"), frozenset()), Part(("metadata", "annotations"),
                                                                                  frozenset())))
    assert parts.cel_changed() == "false"
    assert parts.unchanged(node({"a": "1"}), node({"a": "2"}))
    assert parts.describe() == ""
    assert Part(("metadata", "labels"), frozenset()).describe() == ""


def test_deleting_objects_are_recognised_alike_by_python_and_cel():
    gone = _edit(POD, "metadata", "deletionTimestamp", value="2026-01-01T00:00:00Z")
    assert deleting(gone) and not deleting(POD)
    assert not deleting({"metadata": "broken"}) and not deleting({})
    assert not deleting(_edit(POD, "metadata", "deletionTimestamp", value=""))
    assert cel(CEL_NOT_DELETING, POD) and not cel(CEL_NOT_DELETING, gone)


def test_pod_labels_read_are_the_multi_gpu_label_and_every_grants_selector_key():
    assert pod_label_keys(SETTINGS) == frozenset({SETTINGS.names.labels.pod_gpu_count})
    granted = PolicySettings.model_validate({"exemptions": {"grants": [
        {"name": "a", "namespace": "ml", "rules": ["GS003"], "reason": "vendor image", "expires": "2099-01-01",
         "selector": {"matchLabels": {"team": "vision"},
                      "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}},
        {"name": "b", "namespace": "ml", "names": "*", "rules": ["GS003"], "reason": "vendor image",
         "expires": "2099-01-01"}]}})
    assert pod_label_keys(granted) == frozenset({SETTINGS.names.labels.pod_gpu_count, "team", "tier"})
    # so a label a grant selects on is judged on a Pod's UPDATE, and only on a Pod
    parts = parts_for("Pod", TRIGGERS, granted)
    assert not parts.unchanged(_edit(POD, "metadata", "labels", value={"team": "vision"}), POD)
    assert parts_for("Deployment", TRIGGERS, granted).unchanged(
        _edit(DEPLOYMENT, "metadata", "labels", value={"team": "vision"}), DEPLOYMENT)


def test_the_parts_in_words():
    assert parts_for("Pod", TRIGGERS, SETTINGS).describe() == (
        "`spec`; `metadata.labels`: `aliyun.com/gpu-count`; "
        "`metadata.annotations`: `example.com/read`, `gpushare.io/exempt`")
    assert parts_for("Node", TRIGGERS, SETTINGS).describe() == (
        "`metadata.labels` and `metadata.annotations`: `ack.node.gpu.schedule`, `example.com/read`, "
        "`gpushare.io/exempt`")
    assert judged_parts("Binding", frozenset(), frozenset()).describe() == "`the whole object`"
    assert Part(("spec", "template")).describe() == "`spec.template`"


def test_the_design_table_shares_a_row_between_kinds_judged_alike():
    table = markdown(lambda kind: parts_for(kind, TRIGGERS, SETTINGS)).splitlines()
    assert table[0] == "| kinds | judged on UPDATE (anything else an UPDATE changes is not) |"
    assert table[1] == "|---|---|"
    assert ("| Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController, Job | `spec.template`; "
            "`metadata.annotations`: `example.com/read`, `gpushare.io/exempt` |") in table
    assert table[-1].startswith("| Node | `metadata.labels` and `metadata.annotations`")
    assert len(table) == 2 + 6
    assert UPDATED_KINDS[-2:] == (CUSTOM_WORKLOADS, "Node") and UPDATED_KINDS[0] == "Pod"


def test_kinds_read_from_a_review_are_matched_by_value():
    # the kind comes from the AdmissionReview's JSON: equal to the code's names, never the same object
    review = json.loads('{"node": "Node", "pod": "Pod", "custom": "custom workloads"}')
    assert changed(review["node"], node({"ack.node.gpu.schedule": "cgpu"}), node())
    assert changed(review["pod"], _edit(POD, "metadata", "labels", value={"aliyun.com/gpu-count": "2"}), POD)
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}, "spec": {"a": 1}}
    assert changed(review["custom"], _edit(job, "spec", "a", value=2), job)


def test_a_custom_workload_without_a_spec_is_compared_without_an_error():
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}}
    assert not changed(CUSTOM_WORKLOADS, job, copy.deepcopy(job))
    assert changed(CUSTOM_WORKLOADS, _edit(job, "spec", value={"a": 1}), job)
    assert changed(CUSTOM_WORKLOADS, job, _edit(job, "spec", value={"a": 1}))


def test_a_key_declared_twice_is_judged_once_and_still_judged():
    # a key that is both a trigger annotation and a label node rules read, or read besides
    both = Triggers(annotations=frozenset({"ack.node.gpu.schedule", "example.com/read"}),
                    node_labels=frozenset({"ack.node.gpu.schedule"}), read_keys=frozenset({"example.com/read"}))
    nodes = parts_for("Node", both, SETTINGS)
    assert not nodes.unchanged(node({"ack.node.gpu.schedule": "cgpu"}), node())
    assert not nodes.unchanged(node(annotations={"example.com/read": "1"}), node())
    deployments = parts_for("Deployment", both, SETTINGS)
    with_read = _edit(DEPLOYMENT, "metadata", "annotations", value={"example.com/read": "1"})
    assert not deployments.unchanged(with_read, DEPLOYMENT)


def test_a_keyed_part_in_words():
    assert Part(("metadata", "labels"), frozenset({"b", "a"})).describe() == "`metadata.labels`: `a`, `b`"


def test_judged_parts_cannot_be_changed_once_made():
    import dataclasses

    parts = parts_for("Pod", TRIGGERS, SETTINGS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.parts = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.parts[0].path = ()  # type: ignore[misc]


def test_what_is_not_judged_stays_unjudged_for_kinds_read_from_a_review():
    review = json.loads('{"node": "Node", "pod": "Pod", "custom": "custom workloads"}')
    assert not changed(review["node"], node({"zone": "b"}), node({"zone": "a"}))
    assert not changed(review["pod"], _edit(POD, "metadata", "labels", value={"app": "y"}), POD)
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}, "spec": {"a": 1}}
    assert not changed(review["custom"], _edit(job, "status", value={"b": 2}), job)
