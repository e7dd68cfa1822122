"""The generated matchConditions send an UPDATE only when it changes what the rules judge
(policies/rules/judged.py), evaluated with cel-python exactly as shipped, in the style of
tests/deploy/test_match_conditions.py: what the CEL answers is what ``Triggers.sends`` answers, and every
UPDATE the engine would deny is sent.

Workloads: label, replica, finalizer, status and bookkeeping-annotation changes, and any change to an
object being deleted, are never sent. Nodes: a cordon (spec.unschedulable), taints (the node
lifecycle controller's, the autoscaler's, an admin's), labels and annotations no node rule reads,
status (conditions, heartbeats), finalizers: never sent, on every generated GPU node; every change
of the GPU scheduling mode is.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import celpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.rules.judged import deleting
from tests.deploy.test_match_conditions import (
    CRONJOBS,
    ENGINE,
    MODES,
    NODES,
    SETTINGS,
    STATE,
    TRIGGERS,
    WORKLOADS,
    as_cronjob,
    as_deployment,
    pods,
    sent,
)
from tests.support.cluster_builders import gpu_node
from tests.support.profiles import examples

EXAMPLES = examples(60)
Change = Callable[[dict[str, Any]], None]


def _label(obj: dict[str, Any]) -> None:
    obj["metadata"].setdefault("labels", {})["team"] = "vision"


def _scale(obj: dict[str, Any]) -> None:
    obj["spec"]["replicas"] = 7
    obj["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/desired-replicas"] = "7"


def _finalizer_removed(obj: dict[str, Any]) -> None:
    obj["metadata"]["finalizers"] = []


def _status(obj: dict[str, Any]) -> None:
    obj["status"] = {"observedGeneration": 9, "replicas": 2, "conditions": [{"type": "Available", "status": "True"}]}


def _bookkeeping(obj: dict[str, Any]) -> None:
    obj["metadata"]["resourceVersion"] = "99"
    obj["metadata"]["generation"] = 4
    obj["metadata"].setdefault("annotations", {})["kubectl.kubernetes.io/last-applied-configuration"] = "{}"


WORKLOAD_CHANGES: list[Change] = [_label, _scale, _finalizer_removed, _status, _bookkeeping]


def _being_deleted(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].update({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["foregroundDeletion"]})
    return out


def _denies(kind: str, new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether the engine denies the UPDATE, with and without the cluster."""
    namespace = new["metadata"].get("namespace", "")
    return any(not ENGINE.validate(ENGINE.subject(kind, new, namespace=namespace, operation="UPDATE", old=old,
                                                  state=state)).allowed for state in (None, STATE))


def _workloads(pod: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    deployment = as_deployment(pod)
    deployment["spec"]["replicas"] = 2
    deployment["metadata"]["finalizers"] = ["example.com/keep"]
    cronjob = as_cronjob(pod)
    cronjob["metadata"]["finalizers"] = ["example.com/keep"]
    cronjob["spec"]["replicas"] = 2  # not a CronJob field: stands for any unjudged spec field here
    return [(WORKLOADS, deployment, "deployments"), (CRONJOBS, cronjob, "cronjobs")]


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), changes=st.lists(st.sampled_from(WORKLOAD_CHANGES), min_size=1, max_size=3),
       deleted=st.booleans())
def test_a_workload_update_that_changes_nothing_judged_is_not_sent_and_is_admitted(pod, changes, deleted):
    for webhook, old, resource in _workloads(pod):
        if deleted:
            old = _being_deleted(old)
        new = copy.deepcopy(old)
        for change in changes:
            change(new)
        assert not sent(webhook, new, resource=resource, operation="UPDATE", old=old)
        assert not TRIGGERS[webhook].sends(new["kind"], new, SETTINGS, operation="UPDATE", old=old)
        assert not _denies(new["kind"], new, old), "an UPDATE the conditions do not send is denied"


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(before=pods(), after=pods(), deleted=st.booleans())
def test_a_workload_update_is_sent_when_it_changes_a_judged_part_and_every_denial_is_sent(before, after, deleted):
    after["metadata"]["namespace"] = before["metadata"]["namespace"]
    for (webhook, old, resource), (_, new, _) in zip(_workloads(before), _workloads(after), strict=True):
        if deleted:
            old, new = _being_deleted(old), _being_deleted(new)
        verdict = sent(webhook, new, resource=resource, operation="UPDATE", old=old)
        assert verdict == TRIGGERS[webhook].sends(new["kind"], new, SETTINGS, operation="UPDATE", old=old)
        relevant = TRIGGERS[webhook].sends(new["kind"], new, SETTINGS)
        assert verdict == (relevant and not deleted and ENGINE.judged(new["kind"]).unchanged(new, old) is False)
        assert verdict or not _denies(new["kind"], new, old), f"{new['kind']} denied but not sent"


# -- nodes ------------------------------------------------------------------------------------------------

GPU_MODES = MODES[:6]  # the modes ACK defines
OTHER_KEYS = ["kubernetes.io/hostname", "node.kubernetes.io/instance-type", "team", "aliyun.accelerator/nvidia_name",
              "ack.aliyun.com/nvidia-driver-version", "node.alpha.kubernetes.io/ttl",
              "cluster-autoscaler.kubernetes.io/scale-down-disabled", "example.com/ack.node.gpu.schedule"]
TAINTS = [
    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},  # kubectl cordon / drain
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},  # node lifecycle controller
    {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
    {"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"},  # cluster autoscaler
    {"key": "DeletionCandidateOfClusterAutoscaler", "value": "1700000000", "effect": "PreferNoSchedule"},
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},  # an admin's
]


@st.composite
def gpu_nodes(draw: st.DrawFn) -> dict[str, Any]:
    """A GPU node of any mode, placement or none, with or without the keys node rules read, and some
    taints and other labels already."""
    mode = draw(st.sampled_from(GPU_MODES))
    labels = {k: draw(st.sampled_from(["a", "b"])) for k in draw(st.lists(st.sampled_from(OTHER_KEYS), max_size=3))}
    read = {"gpushare.io/cpu-manager-policy": ["none", "static"], "topology.kubernetes.io/region": ["cn-beijing"],
            "gpushare.io/mps-control-daemon": ["true"]}
    for key in draw(st.lists(st.sampled_from(sorted(read)), max_size=3)):
        labels[key] = draw(st.sampled_from(read[key]))
    node = gpu_node(draw(st.sampled_from(["cn-beijing.10.0.0.1", "share-1", "cgpu-1"])), mode,
                    placement=draw(st.sampled_from([None, "binpack", "spread"])), labels=labels)
    if draw(st.booleans()):
        node["spec"]["taints"] = draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=lambda t: t["key"]))
    node["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]
    return node


def _cordon(node: dict[str, Any], draw: st.DrawFn) -> None:
    node["spec"]["unschedulable"] = not node["spec"].get("unschedulable", False)


def _taint(node: dict[str, Any], draw: st.DrawFn) -> None:
    taints = node["spec"].setdefault("taints", [])
    taint = draw(st.sampled_from(TAINTS))
    if taint in taints:
        taints.remove(taint)
    else:
        taints.append({**taint, "timeAdded": "2026-01-01T00:00:05Z"} if taint["effect"] == "NoExecute" else taint)


def _other_label(node: dict[str, Any], draw: st.DrawFn) -> None:
    key = draw(st.sampled_from(OTHER_KEYS))
    labels = node["metadata"]["labels"]
    labels[key] = labels.get(key, "") + "x"


def _other_annotation(node: dict[str, Any], draw: st.DrawFn) -> None:
    key = draw(st.sampled_from([*OTHER_KEYS, "csi.volume.kubernetes.io/nodeid"]))
    annotations = node["metadata"].setdefault("annotations", {})
    annotations[key] = annotations.get(key, "") + "x"


def _status_heartbeat(node: dict[str, Any], draw: st.DrawFn) -> None:
    node["status"]["conditions"] = [{"type": "Ready", "status": draw(st.sampled_from(["True", "False", "Unknown"])),
                                     "lastHeartbeatTime": "2026-01-01T00:00:40Z"}]


def _node_finalizer(node: dict[str, Any], draw: st.DrawFn) -> None:
    node["metadata"]["finalizers"] = [] if node["metadata"].get("finalizers") else ["example.com/drain"]


NODE_CHANGES = [_cordon, _taint, _other_label, _other_annotation, _status_heartbeat, _node_finalizer]


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(old=gpu_nodes(), data=st.data())
def test_no_cordon_taint_unread_label_or_status_update_of_a_gpu_node_is_sent(old, data):
    new = copy.deepcopy(old)
    for change in data.draw(st.lists(st.sampled_from(NODE_CHANGES), min_size=1, max_size=4)):
        change(new, data.draw)
    assert not sent(NODES, new, resource="nodes", operation="UPDATE", old=old)
    assert not TRIGGERS[NODES].sends("Node", new, SETTINGS, operation="UPDATE", old=old)
    assert not _denies("Node", new, old)


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(old=gpu_nodes(), data=st.data())
def test_every_mode_change_of_a_gpu_node_is_sent(old, data):
    new = copy.deepcopy(old)
    before = old["metadata"]["labels"]["ack.node.gpu.schedule"]
    after = data.draw(st.sampled_from([m for m in [*MODES, None] if m != before]))
    if after is None:
        del new["metadata"]["labels"]["ack.node.gpu.schedule"]
    else:
        new["metadata"]["labels"]["ack.node.gpu.schedule"] = after
    for change in data.draw(st.lists(st.sampled_from(NODE_CHANGES), max_size=2)):  # with a cordon, a taint...
        change(new, data.draw)
    assert sent(NODES, new, resource="nodes", operation="UPDATE", old=old)
    assert TRIGGERS[NODES].sends("Node", new, SETTINGS, operation="UPDATE", old=old)


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(old=gpu_nodes(), new=gpu_nodes())
def test_a_node_update_is_sent_exactly_when_it_changes_a_key_a_node_rule_reads(old, new):
    new["metadata"]["name"] = old["metadata"]["name"]
    verdict = sent(NODES, new, resource="nodes", operation="UPDATE", old=old)
    assert verdict == TRIGGERS[NODES].sends("Node", new, SETTINGS, operation="UPDATE", old=old)
    assert verdict == (not deleting(new) and not ENGINE.judged("Node").unchanged(new, old))
    assert verdict or not _denies("Node", new, old), "a node UPDATE denied but not sent"


# -- the backstop ValidatingAdmissionPolicy: it cannot ratchet, so it does not judge such UPDATEs at all -------

def _backstop_condition() -> Any:
    from policies.generate.backstop import backstop_policy

    (condition,) = backstop_policy(SETTINGS, ENGINE.known_ids)[0]["spec"]["matchConditions"]
    env = celpy.Environment()
    return env.program(env.compile(condition["expression"]))


BACKSTOP = _backstop_condition()


def backstop_matches(obj: dict[str, Any], old: dict[str, Any] | None) -> bool:
    request = {"operation": "UPDATE" if old is not None else "CREATE"}
    result = BACKSTOP.evaluate({"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
                                "request": celpy.json_to_cel(request)})
    assert isinstance(result, celpy.celtypes.BoolType), f"CEL evaluation failed: {result!r}"
    return bool(result)


def _scheduler_annotates(pod: dict[str, Any]) -> None:
    # What the GPU-sharing scheduler writes on a pod it placed (gpushare-scheduler-extender
    # pkg/utils/pod.go, PatchPodAnnotationSpec), and the device plugin's flip of the assigned flag.
    pod["metadata"].setdefault("annotations", {}).update({
        "ALIYUN_COM_GPU_MEM_IDX": "0", "ALIYUN_COM_GPU_MEM_POD": "2", "ALIYUN_COM_GPU_MEM_DEV": "15",
        "ALIYUN_COM_GPU_MEM_ASSIGNED": "true", "ALIYUN_COM_GPU_MEM_ASSUME_TIME": "1700000000000000000"})


def _job_tracking_finalizer_removed(pod: dict[str, Any]) -> None:
    # The Job controller removes batch.kubernetes.io/job-tracking from its finished pods.
    pod["metadata"]["finalizers"] = []


POD_CHANGES: list[Change] = [_scheduler_annotates, _job_tracking_finalizer_removed, _status, _bookkeeping]


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), changes=st.lists(st.sampled_from(POD_CHANGES), min_size=1, max_size=3), deleted=st.booleans())
def test_the_backstop_does_not_judge_a_pod_update_that_changes_nothing_judged(pod, changes, deleted):
    pod["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    old = _being_deleted(pod) if deleted else pod
    new = copy.deepcopy(old)
    for change in changes:
        change(new)
    assert backstop_matches(old, None)  # every CREATE is judged
    assert not backstop_matches(new, old)
    assert not _denies("Pod", new, old)


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), changes=st.lists(st.sampled_from(WORKLOAD_CHANGES), min_size=1, max_size=3))
def test_the_backstop_judges_a_workload_update_exactly_when_the_webhook_would_be_sent_a_change(pod, changes):
    for _, old, _ in _workloads(pod):
        new = copy.deepcopy(old)
        for change in changes:
            change(new)
        assert not backstop_matches(new, old)
        changed = copy.deepcopy(new)
        changed["metadata"]["annotations"] = {**new["metadata"].get("annotations", {}), "gpushare.io/exempt": "GS001"}
        assert backstop_matches(changed, old)
        assert backstop_matches(_being_deleted(changed), _being_deleted(old)) is False
