"""What makes an object worth sending to the webhook (policies/rules/relevance.py), in-process: rules'
declarations resolved under a configuration, and ``Triggers.sends`` (what the generated matchConditions
answer, checked against the CEL itself in tests/deploy/test_match_conditions.py) on real objects."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from policies.model.settings import PolicySettings
from policies.rules.relevance import NOTHING, Relevance, Triggers, resolve
from tests.support.manifests import CORE, MEM, container, node, pod_spec, workload

SETTINGS = PolicySettings()
NAMES = SETTINGS.names


def pod(*containers: dict[str, Any], meta: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", **(meta or {})},
            "spec": pod_spec(*containers, **spec)}


def env(*names: str) -> list[dict[str, str]]:
    return [{"name": n, "value": "1"} for n in names]


MEM_ONLY = Triggers(resources=frozenset({MEM}))


# --- declarations -------------------------------------------------------------------------------

@pytest.mark.parametrize("declaration", [
    {"resources": ("gpu_memory",)},
    {"placed_resources": ("nope",)},
    {"env_from": ("gpu",)},
    {"custom_requests": ("mem",)},
    {"patch_mentions": ("gpu_mems",)},
    {"node_labels": ("gpu_schedule",)},
    {"annotations": ("exempt",)},
    {"env_names": ("visible",)},
    {"reads": ("labels.region",)},
    {"reads": ("resources.gpu_mem",)},
])
def test_a_declaration_naming_an_unknown_settings_field_is_refused(declaration):
    with pytest.raises(ValueError, match="relevance names unknown settings fields"):
        Relevance(**declaration)


def test_declarations_naming_settings_fields_are_accepted():
    Relevance(resources=("gpu_mem",), placed_resources=("gpu_count",), env_from=("gpu_core",),
              custom_requests=("gpu_topology",), patch_mentions=("gpu_exclusive",), node_labels=("schedule",),
              annotations=("exempt_annotation",), env_names=("device_plugin",),
              reads=("names.labels.region", "nodes.mps_daemon_keys"))


def test_resolve_turns_fields_into_the_configured_names():
    triggers = resolve([
        Relevance(resources=("gpu_mem",), env=("LITERAL",), env_names=("visible_devices", "mps")),
        Relevance(placed_resources=("gpu_mem", "gpu_exclusive"), custom_requests=("gpu_mem", "gpu_core"),
                  env_from=("gpu_count",), patch_mentions=("gpu_topology",), node_labels=("schedule",),
                  annotations=("exempt_annotation",), reads=("names.labels.region", "nodes.mps_daemon_keys")),
    ], SETTINGS)
    assert triggers.resources == {MEM}
    # a resource that counts anyway is not also a placed or custom trigger
    assert triggers.placed_resources == {"nvidia.com/gpu"}
    assert triggers.custom_requests == {CORE}
    assert triggers.env == {"LITERAL", "NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                            "CUDA_MPS_PIPE_DIRECTORY"}
    assert triggers.env_from == {"aliyun.com/gpu-count"}
    assert triggers.patch_mentions == {"aliyun.com/gpu"}
    assert triggers.node_labels == {"ack.node.gpu.schedule"}
    assert triggers.annotations == {"gpushare.io/exempt"}
    assert triggers.read_keys == {"topology.kubernetes.io/region", "gpushare.io/mps-control-daemon"}
    assert not triggers.near_miss and not triggers.gpushare_daemonsets and not triggers.gpu_quotas


def test_resolve_follows_the_configuration():
    renamed = PolicySettings.model_validate({"names": {"resources": {"gpu_mem": "example.com/vram"},
                                                       "gpushare_daemonsets": ["my-plugin"]}})
    triggers = resolve([Relevance(resources=("gpu_mem",), gpushare_daemonsets=True)], renamed)
    assert triggers.resources == {"example.com/vram"}
    assert triggers.gpushare_daemonsets == {"my-plugin"}


@pytest.mark.parametrize(("declarations", "flag"), [
    ([Relevance(near_miss=True), NOTHING], "near_miss"),
    ([NOTHING, Relevance(gpu_quotas=True)], "gpu_quotas"),
])
def test_flags_are_any_of_the_declarations(declarations, flag):
    assert getattr(resolve(declarations, SETTINGS), flag) is True
    assert getattr(resolve([NOTHING], SETTINGS), flag) is False


def test_reads_must_name_a_label_or_annotation():
    with pytest.raises(ValueError, match=r"relevance reads names\.resources, which holds no label"):
        resolve([Relevance(reads=("names.labels.region",)), Relevance(reads=("names.resources",))], SETTINGS)


def test_reads_may_hold_a_list_of_names():
    with pytest.raises(ValueError, match="which holds no label or annotation name"):
        resolve([Relevance(reads=("names.card_annotations",))], SETTINGS)
    assert resolve([Relevance(reads=("nodes.driver_version_labels",))], SETTINGS).read_keys == {
        "ack.aliyun.com/nvidia-driver-version", "aliyun.accelerator/nvidia_driver_version"}


@pytest.mark.parametrize("field", ["resources", "placed_resources", "annotations", "env", "node_labels",
                                   "gpushare_daemonsets", "env_from", "custom_requests", "patch_mentions"])
def test_triggers_send_something_when_any_field_is_set(field):
    assert Triggers(**{field: frozenset({"x"})})
    assert not Triggers()
    # keys read alone make nothing relevant
    assert not Triggers(read_keys=frozenset({"x"}))


def test_flag_triggers_send_something():
    assert Triggers(near_miss=True) and Triggers(gpu_quotas=True)


# --- pods and built-in workloads ----------------------------------------------------------------

@pytest.mark.parametrize(("obj", "expected"), [
    (pod(container(limits={MEM: "3"})), True),
    (pod(container(requests={MEM: "3"})), True),
    (pod(container(limits={"cpu": "1"})), False),
    (pod(container()), False),
    (pod(container(), init=[container("init", limits={MEM: "1"})]), True),
    (pod(container(resources="not a map")), False),
    (pod(container(), container("second", limits={MEM: "1"})), True),
    ({"kind": "Pod", "metadata": {}, "spec": "not a map"}, False),
    ({"kind": "Pod", "metadata": {}}, False),
    ({"kind": "Pod", "metadata": {}, "spec": {"containers": ["not a map", container(limits={MEM: "1"})]}}, True),
    ({"kind": "Pod", "metadata": {}, "spec": {"containers": "not a list"}}, False),
])
def test_a_pod_is_sent_when_a_container_names_a_trigger_resource(obj, expected):
    assert MEM_ONLY.sends("Pod", obj, SETTINGS) is expected


@pytest.mark.parametrize("kind", ["Deployment", "CronJob", "Job", "StatefulSet", "DaemonSet"])
def test_a_workload_is_sent_when_its_template_names_a_trigger_resource(kind):
    assert MEM_ONLY.sends(kind, workload(kind, pod_spec(container(limits={MEM: "2"}))), SETTINGS)
    assert not MEM_ONLY.sends(kind, workload(kind, pod_spec(container(limits={"cpu": "2"}))), SETTINGS)


def test_kinds_without_a_pod_spec_are_not_sent():
    assert not MEM_ONLY.sends("Service", {"kind": "Service", "metadata": {}, "spec": {"containers": [
        container(limits={MEM: "1"})]}}, SETTINGS)


def test_env_triggers_are_variables_set_by_name():
    triggers = Triggers(env=frozenset({"NVIDIA_VISIBLE_DEVICES"}))
    assert triggers.sends("Pod", pod(container(env=env("NVIDIA_VISIBLE_DEVICES"))), SETTINGS)
    assert not triggers.sends("Pod", pod(container(env=env("OTHER"))), SETTINGS)
    assert not triggers.sends("Pod", pod(container(env="not a list")), SETTINGS)
    assert not triggers.sends("Pod", pod(container(env=["not a map"])), SETTINGS)
    assert not MEM_ONLY.sends("Pod", pod(container(env=env("NVIDIA_VISIBLE_DEVICES"))), SETTINGS)


def test_env_from_counts_only_beside_a_named_resource():
    triggers = Triggers(env_from=frozenset({MEM}))
    env_from = [{"configMapRef": {"name": "gpu"}}]
    assert triggers.sends("Pod", pod(container(limits={MEM: "1"}, envFrom=env_from)), SETTINGS)
    assert not triggers.sends("Pod", pod(container(limits={MEM: "1"})), SETTINGS)
    assert not triggers.sends("Pod", pod(container(limits={MEM: "1"}, envFrom=[])), SETTINGS)
    assert not triggers.sends("Pod", pod(container(envFrom=env_from)), SETTINGS)


def test_placed_resources_count_only_on_a_pod_created_on_a_node():
    triggers = Triggers(placed_resources=frozenset({"nvidia.com/gpu"}))
    whole = container(limits={"nvidia.com/gpu": "1"})
    assert triggers.sends("Pod", pod(whole, nodeName="gpu-1"), SETTINGS)
    assert not triggers.sends("Pod", pod(whole), SETTINGS)
    assert not triggers.sends("Pod", pod(container(limits={MEM: "1"}), nodeName="gpu-1"), SETTINGS)
    assert not triggers.sends("Deployment", workload("Deployment", pod_spec(whole, nodeName="gpu-1")), SETTINGS)


def test_annotation_triggers_on_the_object_or_its_template():
    triggers = Triggers(annotations=frozenset({"gpushare.io/exempt"}))
    exempt = {"annotations": {"gpushare.io/exempt": "GS003"}}
    assert triggers.sends("Pod", pod(container(), meta=exempt), SETTINGS)
    deployment = workload("Deployment", pod_spec(container()))
    assert not triggers.sends("Deployment", deployment, SETTINGS)
    on_template = copy.deepcopy(deployment)
    on_template["spec"]["template"]["metadata"]["annotations"] = {"gpushare.io/exempt": "GS003"}
    assert triggers.sends("Deployment", on_template, SETTINGS)
    own = copy.deepcopy(deployment)
    own["metadata"]["annotations"] = {"gpushare.io/exempt": "GS003"}
    assert triggers.sends("Deployment", own, SETTINGS)
    # even when the template has no spec to read
    del own["spec"]["template"]["spec"]
    assert triggers.sends("Deployment", own, SETTINGS)
    own["metadata"]["annotations"] = ["not", "a", "map"]
    assert not triggers.sends("Deployment", own, SETTINGS)
    assert not MEM_ONLY.sends("Pod", pod(container(), meta=exempt), SETTINGS)


def test_near_misses_are_sent_only_when_declared():
    typo = pod(container(limits={"aliyun.com/gpu-memory": "3"}))
    assert Triggers(near_miss=True).sends("Pod", typo, SETTINGS)
    assert not Triggers(near_miss=True).sends("Pod", pod(container(limits={"cpu": "1"})), SETTINGS)
    assert not MEM_ONLY.sends("Pod", typo, SETTINGS)


# --- the GPU-sharing DaemonSets, nodes, quotas ---------------------------------------------------

DAEMONSETS = Triggers(gpushare_daemonsets=frozenset({"gpushare-device-plugin-ds"}))


def test_the_gpu_sharing_daemonsets_and_their_pods_are_sent():
    ds = workload("DaemonSet", pod_spec(container()), name="gpushare-device-plugin-ds")
    assert DAEMONSETS.sends("DaemonSet", ds, SETTINGS)
    assert not DAEMONSETS.sends("DaemonSet", workload("DaemonSet", pod_spec(container()), name="other"), SETTINGS)
    assert not MEM_ONLY.sends("DaemonSet", ds, SETTINGS)
    owned = pod(container(), meta={"ownerReferences": [{"kind": "DaemonSet", "name": "gpushare-device-plugin-ds"}]})
    assert DAEMONSETS.sends("Pod", owned, SETTINGS)
    for owners in ([{"kind": "ReplicaSet", "name": "gpushare-device-plugin-ds"}],
                   [{"kind": "DaemonSet", "name": "other"}], ["not a map"], "not a list"):
        assert not DAEMONSETS.sends("Pod", pod(container(), meta={"ownerReferences": owners}), SETTINGS)
    assert not MEM_ONLY.sends("Pod", owned, SETTINGS)
    # their mutation patches every UPDATE, changed or not
    assert DAEMONSETS.sends("DaemonSet", ds, SETTINGS, operation="UPDATE", old=copy.deepcopy(ds))


NODES = Triggers(node_labels=frozenset({"ack.node.gpu.schedule"}), annotations=frozenset({"gpushare.io/exempt"}))


def test_a_node_is_sent_when_it_carries_a_trigger_label_or_annotation_or_loses_one():
    assert NODES.sends("Node", node({"ack.node.gpu.schedule": "cgpu"}), SETTINGS)
    assert NODES.sends("Node", node(annotations={"gpushare.io/exempt": "GN001"}), SETTINGS)
    assert not NODES.sends("Node", node({"zone": "a"}), SETTINGS)
    assert not NODES.sends("Node", node(), SETTINGS)
    # the label removed by an UPDATE: the mode changed
    assert NODES.sends("Node", node(), SETTINGS, operation="UPDATE", old=node({"ack.node.gpu.schedule": "cgpu"}))
    assert not NODES.sends("Node", node(), SETTINGS, operation="UPDATE", old=node({"zone": "a"}))
    # an UPDATE that changes no key read is not sent
    labelled = node({"ack.node.gpu.schedule": "cgpu"})
    assert not NODES.sends("Node", node({"ack.node.gpu.schedule": "cgpu", "zone": "b"}), SETTINGS,
                           operation="UPDATE", old=labelled)
    assert NODES.sends("Node", node({"ack.node.gpu.schedule": "share"}), SETTINGS, operation="UPDATE", old=labelled)
    assert not MEM_ONLY.sends("Node", labelled, SETTINGS)


def test_quota_objects_are_sent_when_declared_and_naming_a_gpu():
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
             "spec": {"hard": {f"requests.{MEM}": "8"}}}
    plain = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"}, "spec": {"hard": {"cpu": "8"}}}
    quotas = Triggers(gpu_quotas=True)
    assert quotas.sends("ResourceQuota", quota, SETTINGS)
    assert not quotas.sends("ResourceQuota", plain, SETTINGS)
    assert not MEM_ONLY.sends("ResourceQuota", quota, SETTINGS)


# --- UPDATEs, deletions, ephemeral containers ----------------------------------------------------

def test_an_update_is_sent_only_when_it_changes_a_judged_part():
    before = workload("Deployment", pod_spec(container(limits={MEM: "2"})))
    scaled = copy.deepcopy(before)
    scaled["spec"]["replicas"] = 5
    assert not MEM_ONLY.sends("Deployment", scaled, SETTINGS, operation="UPDATE", old=before)
    changed = workload("Deployment", pod_spec(container(limits={MEM: "3"})))
    assert MEM_ONLY.sends("Deployment", changed, SETTINGS, operation="UPDATE", old=before)
    # without the old object (an older registration) it is judged as created
    assert MEM_ONLY.sends("Deployment", scaled, SETTINGS, operation="UPDATE")
    # a CREATE is never compared
    assert MEM_ONLY.sends("Deployment", scaled, SETTINGS, old=before)
    # an object being deleted: only finalizers change, nothing is sent
    deleted = copy.deepcopy(changed)
    deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not MEM_ONLY.sends("Deployment", deleted, SETTINGS, operation="UPDATE", old=before)


def test_an_ephemeral_container_is_sent_when_a_new_one_sets_a_trigger_variable():
    triggers = Triggers(env=frozenset({"NVIDIA_VISIBLE_DEVICES"}))
    debug = {"name": "debug", "image": "busybox", "env": env("NVIDIA_VISIBLE_DEVICES")}
    old = pod(container())
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [debug]
    eph = {"sub_resource": "ephemeralcontainers", "operation": "UPDATE"}
    assert triggers.sends("Pod", new, SETTINGS, old=old, **eph)
    # already there before: not this request's
    assert not triggers.sends("Pod", new, SETTINGS, old=copy.deepcopy(new), **eph)
    # a second, new one beside the old
    second = copy.deepcopy(new)
    second["spec"]["ephemeralContainers"].append({**debug, "name": "debug-2"})
    assert triggers.sends("Pod", second, SETTINGS, old=new, **eph)
    plain = copy.deepcopy(old)
    plain["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox"}]
    assert not triggers.sends("Pod", plain, SETTINGS, old=old, **eph)
    # a resource trigger does not matter here: ephemeral containers take no resources
    assert not MEM_ONLY.sends("Pod", new, SETTINGS, old=old, **eph)
    # unreadable shapes hold nothing, and an old pod without the list had none
    assert triggers.sends("Pod", new, SETTINGS, old={"spec": {"ephemeralContainers": "x"}}, **eph)
    assert triggers.sends("Pod", new, SETTINGS, old=None, **eph)
    nameless = copy.deepcopy(old)
    nameless["spec"]["ephemeralContainers"] = [{"env": env("NVIDIA_VISIBLE_DEVICES")}]
    assert triggers.sends("Pod", nameless, SETTINGS, old=nameless, **eph)
    assert not triggers.sends("Pod", {"spec": {"ephemeralContainers": "x"}}, SETTINGS, old=old, **eph)
    assert not triggers.sends("Pod", {"spec": {"ephemeralContainers": ["x"]}}, SETTINGS, old=old, **eph)


# --- custom workloads ---------------------------------------------------------------------------

def pytorchjob(*containers: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j", **(meta or {})},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [container("pytorch")]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": list(containers)}}}}}}


def argo(patch: str) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"},
            "spec": {"podSpecPatch": patch, "templates": [{"name": "main", "container": container()}]}}


def test_a_custom_workload_is_sent_when_any_replica_names_a_trigger():
    assert MEM_ONLY.sends("PyTorchJob", pytorchjob(container(limits={MEM: "2"})), SETTINGS)
    assert MEM_ONLY.sends("PyTorchJob", pytorchjob(container(requests={MEM: "2"})), SETTINGS)
    assert not MEM_ONLY.sends("PyTorchJob", pytorchjob(container(limits={"cpu": "2"})), SETTINGS)
    # the group decides: a PyTorchJob of another API group is not the workload
    other = pytorchjob(container(limits={MEM: "2"}))
    assert not MEM_ONLY.sends("PyTorchJob", other, SETTINGS, group="example.com")
    assert MEM_ONLY.sends("PyTorchJob", other, SETTINGS, group="kubeflow.org")


def test_a_custom_workloads_env_env_from_and_annotations():
    visible = Triggers(env=frozenset({"NVIDIA_VISIBLE_DEVICES"}))
    assert visible.sends("PyTorchJob", pytorchjob(container(env=env("NVIDIA_VISIBLE_DEVICES"))), SETTINGS)
    assert not visible.sends("PyTorchJob", pytorchjob(container(env=env("OTHER"))), SETTINGS)
    env_from = Triggers(env_from=frozenset({MEM}))
    refs = [{"secretRef": {"name": "s"}}]
    assert env_from.sends("PyTorchJob", pytorchjob(container(limits={MEM: "1"}, envFrom=refs)), SETTINGS)
    assert not env_from.sends("PyTorchJob", pytorchjob(container(limits={MEM: "1"}, envFrom=[])), SETTINGS)
    assert not env_from.sends("PyTorchJob", pytorchjob(container(limits={MEM: "1"}, envFrom="x")), SETTINGS)
    assert not env_from.sends("PyTorchJob", pytorchjob(container(envFrom=refs)), SETTINGS)
    exempt = Triggers(annotations=frozenset({"gpushare.io/exempt"}))
    assert exempt.sends("PyTorchJob", pytorchjob(container(), meta={"annotations": {"gpushare.io/exempt": "GS1"}}),
                        SETTINGS)
    assert not exempt.sends("PyTorchJob", pytorchjob(container()), SETTINGS)


def test_a_custom_workloads_requests_are_sent_for_what_the_api_server_would_refuse_in_a_pod():
    requested = Triggers(custom_requests=frozenset({CORE}))
    assert requested.sends("PyTorchJob", pytorchjob(container(requests={CORE: "30"})), SETTINGS)
    assert not requested.sends("PyTorchJob", pytorchjob(container(limits={CORE: "30"})), SETTINGS)
    assert not requested.sends("PyTorchJob", pytorchjob(container(resources={"requests": "x"})), SETTINGS)
    assert not requested.sends("PyTorchJob", pytorchjob(container(resources="x")), SETTINGS)
    # only custom workloads: a Pod's requests are the API server's to refuse
    assert not requested.sends("Pod", pod(container(requests={CORE: "30"})), SETTINGS)


def test_a_custom_workloads_near_misses_and_patches():
    typo = pytorchjob(container(limits={"aliyun.com/gpu-memory": "3"}))
    assert Triggers(near_miss=True).sends("PyTorchJob", typo, SETTINGS)
    assert not Triggers(near_miss=True).sends("PyTorchJob", pytorchjob(container()), SETTINGS)
    assert not MEM_ONLY.sends("PyTorchJob", typo, SETTINGS)
    mentions = Triggers(patch_mentions=frozenset({MEM}))
    patch = '{"containers": [{"name": "main", "resources": {"limits": {"aliyun.com/gpu-mem": 3}}}]}'
    assert mentions.sends("Workflow", argo(patch), SETTINGS)
    assert not mentions.sends("Workflow", argo('{"containers": []}'), SETTINGS)
    assert not MEM_ONLY.sends("Workflow", argo(patch), SETTINGS)


# --- what a review brings: strings parsed from its JSON, shapes judged leniently ----------------

def test_kinds_operations_and_subresources_read_from_a_review_are_matched_by_value():
    # The names come from the AdmissionReview's JSON: equal to the code's, never the same objects.
    review = json.loads('{"kind": "Node", "pod": "Pod", "ds": "DaemonSet", "update": "UPDATE", '
                        '"ephemeral": "ephemeralcontainers"}')
    labelled = node({"ack.node.gpu.schedule": "cgpu"})
    assert NODES.sends(review["kind"], labelled, SETTINGS)
    assert NODES.sends(review["kind"], node(), SETTINGS, operation=review["update"], old=labelled)
    before = workload("Deployment", pod_spec(container(limits={MEM: "2"})))
    scaled = copy.deepcopy(before)
    scaled["spec"]["replicas"] = 5
    assert not MEM_ONLY.sends("Deployment", scaled, SETTINGS, operation=review["update"], old=before)
    ds = workload("DaemonSet", pod_spec(container()), name="gpushare-device-plugin-ds")
    assert DAEMONSETS.sends(review["ds"], ds, SETTINGS)
    owned = json.loads(json.dumps(pod(container(), meta={"ownerReferences": [
        {"kind": "DaemonSet", "name": "gpushare-device-plugin-ds"}]})))
    assert DAEMONSETS.sends(review["pod"], owned, SETTINGS)
    whole = pod(container(limits={"nvidia.com/gpu": "1"}), nodeName="gpu-1")
    assert Triggers(placed_resources=frozenset({"nvidia.com/gpu"})).sends(review["pod"], whole, SETTINGS)
    triggers = Triggers(env=frozenset({"NVIDIA_VISIBLE_DEVICES"}))
    new = pod(container())
    new["spec"]["ephemeralContainers"] = [{"name": "debug", "env": env("NVIDIA_VISIBLE_DEVICES")}]
    assert triggers.sends("Pod", new, SETTINGS, operation="UPDATE", old=pod(container()),
                          sub_resource=review["ephemeral"])


def test_another_subresource_is_judged_as_the_object():
    gpu = pod(container(limits={MEM: "3"}))
    assert MEM_ONLY.sends("Pod", gpu, SETTINGS, sub_resource="status")
    assert MEM_ONLY.sends("Pod", gpu, SETTINGS, sub_resource="resize")


@pytest.mark.parametrize("kind", ["CronJob", "Deployment", "Job", "StatefulSet"])
def test_only_a_daemonset_is_sent_for_its_name(kind):
    named = workload(kind, pod_spec(container()), name="gpushare-device-plugin-ds")
    assert not DAEMONSETS.sends(kind, named, SETTINGS)


@pytest.mark.parametrize("kind", ["Deployment", "Job", "ReplicaSet", "StatefulSet"])
def test_only_pods_are_sent_for_their_gpu_sharing_daemonset_owner(kind):
    obj = workload(kind, pod_spec(container()))
    obj["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "gpushare-device-plugin-ds"}]
    assert not DAEMONSETS.sends(kind, obj, SETTINGS)


@pytest.mark.parametrize("owner", ["CloneSet", "Job", "ReplicaSet", "StatefulSet"])
def test_a_pod_owned_by_another_kind_of_the_same_name_is_not_the_daemonsets(owner):
    obj = pod(container(), meta={"ownerReferences": [{"kind": owner, "name": "gpushare-device-plugin-ds"}]})
    assert not DAEMONSETS.sends("Pod", obj, SETTINGS)


@pytest.mark.parametrize("kind", ["StatefulSet", "ReplicaSet", "Job", "DaemonSet"])
def test_placed_resources_never_count_in_a_template(kind):
    triggers = Triggers(placed_resources=frozenset({"nvidia.com/gpu"}))
    assert not triggers.sends(kind, workload(kind, pod_spec(container(limits={"nvidia.com/gpu": "1"}),
                                                            nodeName="gpu-1")), SETTINGS)


def test_a_node_update_that_changes_a_read_key_but_carries_no_trigger_is_not_sent():
    triggers = Triggers(node_labels=frozenset({"ack.node.gpu.schedule"}), read_keys=frozenset({"example.com/read"}))
    old = node({"example.com/read": "1"})
    new = node({"example.com/read": "2"})
    assert not triggers.sends("Node", new, SETTINGS, operation="UPDATE", old=old)
    assert triggers.sends("Node", node({"example.com/read": "2", "ack.node.gpu.schedule": "cgpu"}), SETTINGS,
                          operation="UPDATE", old=old)


def test_an_old_ephemeral_list_with_unreadable_entries_hides_nothing():
    triggers = Triggers(env=frozenset({"NVIDIA_VISIBLE_DEVICES"}))
    new = pod(container())
    new["spec"]["ephemeralContainers"] = ["x", {"name": "debug", "env": env("NVIDIA_VISIBLE_DEVICES")}]
    old = pod(container())
    old["spec"]["ephemeralContainers"] = ["x", {"name": 7}]
    assert triggers.sends("Pod", new, SETTINGS, operation="UPDATE", old=old, sub_resource="ephemeralcontainers")


def test_a_resource_that_counts_anyway_is_neither_placed_nor_custom_and_others_are_not_added():
    triggers = resolve([Relevance(resources=("gpu_mem", "gpu_count")),
                        Relevance(placed_resources=("gpu_mem", "gpu_exclusive"),
                                  custom_requests=("gpu_mem", "gpu_core"))], SETTINGS)
    assert triggers.placed_resources == {"nvidia.com/gpu"}
    assert triggers.custom_requests == {CORE}


def test_reads_must_name_strings():
    # names.assignment.pairs holds pairs of names, not names
    with pytest.raises(ValueError, match="which holds no label or annotation name"):
        resolve([Relevance(reads=("names.assignment.pairs",))], SETTINGS)


def test_a_custom_workload_with_an_unreadable_part_is_still_read_where_it_can_be():
    job = pytorchjob(container(limits={MEM: "2"}))
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"] = "not a map"
    assert MEM_ONLY.sends("PyTorchJob", job, SETTINGS)
    patch = '{"containers": [{"name": "main", "resources": {"limits": {"aliyun.com/gpu-mem": 3}}}]}'
    workflow = argo(patch)
    workflow["spec"]["templates"].insert(0, "not a map")
    workflow["spec"]["templateDefaults"] = "not a map"
    assert Triggers(patch_mentions=frozenset({MEM})).sends("Workflow", workflow, SETTINGS)


def test_declarations_and_their_resolution_cannot_be_changed_once_made():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        NOTHING.near_miss = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        MEM_ONLY.resources = frozenset()  # type: ignore[misc]
