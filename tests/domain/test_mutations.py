"""GM001-GM003: one JSON patch, applied with jsonpatch to the object as sent, idempotent."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from policies.admission.engine import Engine
from tests.support.helpers import load_json
from tests.support.manifests import CORE, MEM, container, pod, pod_spec, received, workload
from webhook.settings import Settings

CORE_MEM_NODE = "cn-beijing.192.168.1.10"


def mutate(engine: Engine, obj, state=None, operation="CREATE"):
    sent = received(obj)
    verdict = engine.mutate(engine.subject(sent["kind"], sent, operation=received(operation), namespace="default",
                                           state=state))
    patched = jsonpatch.apply_patch(obj, verdict.patch) if verdict.patch else copy.deepcopy(obj)
    return verdict, patched


def env_of(c):
    return {e["name"]: e["value"] for e in c.get("env", [])}


def test_gm001_sets_scheduler_when_unset(engine):
    verdict, patched = mutate(engine, pod(pod_spec(container(limits={MEM: 3}))))
    assert patched["spec"]["schedulerName"] == "ack-co-scheduler"
    assert "GM001" in verdict.patch_ids


def test_gm001_replaces_default_scheduler(engine):
    obj = pod(pod_spec(container(limits={MEM: 3}), schedulerName="default-scheduler"))
    _, patched = mutate(engine, obj)
    assert patched["spec"]["schedulerName"] == "ack-co-scheduler"


def test_gm001_keeps_a_scheduler_the_user_chose(engine):
    obj = pod(pod_spec(container(limits={MEM: 3}), schedulerName="volcano"))
    verdict, patched = mutate(engine, obj)
    assert patched["spec"]["schedulerName"] == "volcano"
    assert "GM001" not in verdict.patch_ids


def test_gm001_ignores_pods_without_gpu_mem(engine):
    verdict, _ = mutate(engine, pod(pod_spec(container(limits={"nvidia.com/gpu": 1}))))
    assert verdict.patch == []


def test_gm003_env_without_known_card(engine):
    obj = pod(pod_spec(container("a", limits={MEM: 3}), container("b")))
    _, patched = mutate(engine, obj)
    assert env_of(patched["spec"]["containers"][0]) == {"ALIYUN_COM_GPU_MEM_CONTAINER": "3"}
    assert "env" not in patched["spec"]["containers"][1]


def test_gm003_never_writes_dev_even_on_a_pinned_node(engine, demo_state):
    obj = pod(pod_spec(container("a", limits={MEM: 4, CORE: 30}), nodeName=CORE_MEM_NODE))
    _, patched = mutate(engine, obj, state=demo_state)
    # The device plugin measures the card; a value written here would override its own.
    assert env_of(patched["spec"]["containers"][0]) == {"ALIYUN_COM_GPU_MEM_CONTAINER": "4"}


def test_gm003_unknown_node_gives_no_dev(engine, demo_state):
    obj = pod(pod_spec(container("a", limits={MEM: 4}), nodeName="not-a-node"))
    _, patched = mutate(engine, obj, state=demo_state)
    assert env_of(patched["spec"]["containers"][0]) == {"ALIYUN_COM_GPU_MEM_CONTAINER": "4"}


def test_gm003_appends_to_existing_env_and_keeps_user_values(engine):
    existing = [{"name": "FOO", "value": "1"}, {"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "99"}]
    obj = pod(pod_spec(container("a", limits={MEM: 4}, env=existing), nodeName=CORE_MEM_NODE))
    verdict, patched = mutate(engine, obj)
    assert patched["spec"]["containers"][0]["env"] == existing  # nothing missing without a known card
    assert all(op["path"] != "/spec/containers/0/env" for op in verdict.patch)


def test_gm003_sets_app_containers_only(engine):
    # The device plugin finds a pod by its app containers' sum; what an init container gets is not known
    # at admission (rule GS008 warns), so nothing is written there.
    obj = pod(pod_spec(container("main", limits={MEM: 2}), init=[container("warm", limits={MEM: 1})]))
    _, patched = mutate(engine, obj)
    assert env_of(patched["spec"]["initContainers"][0]) == {}
    assert env_of(patched["spec"]["containers"][0]) == {"ALIYUN_COM_GPU_MEM_CONTAINER": "2"}


def test_gm003_gives_a_pod_spread_over_several_cards_its_share_of_each(engine):
    # ACK "Use cGPU to achieve GPU sharing based on multiple GPUs": gpu-mem 8 over 4 GPUs sets
    # ALIYUN_COM_GPU_MEM_CONTAINER=2.
    spread = pod(pod_spec(container("main", limits={MEM: 8})))
    spread["metadata"]["labels"] = {"aliyun.com/gpu-count": "4"}
    _, patched = mutate(engine, spread)
    assert env_of(patched["spec"]["containers"][0]) == {"ALIYUN_COM_GPU_MEM_CONTAINER": "2"}
    spread["metadata"]["labels"] = {"aliyun.com/gpu-count": "3"}  # 8/3 is not whole: GS009 refuses it
    _, patched = mutate(engine, spread)
    assert "env" not in patched["spec"]["containers"][0]


def test_gm003_skips_invalid_memory_values(engine):
    _, patched = mutate(engine, pod(pod_spec(container("a", limits={MEM: "2Gi"}))))
    assert "env" not in patched["spec"]["containers"][0]


def test_mutation_is_idempotent(engine, demo_state):
    obj = pod(pod_spec(container("a", limits={MEM: 4}, env=[{"name": "X", "value": "y"}]),
                       container("b", limits={MEM: 2}), nodeName=CORE_MEM_NODE))
    first, once = mutate(engine, obj, state=demo_state)
    assert first.patch
    second, twice = mutate(engine, once, state=demo_state)
    assert second.patch == []
    assert twice == once
    names = [e["name"] for e in once["spec"]["containers"][0]["env"]]
    assert names == ["X", "ALIYUN_COM_GPU_MEM_CONTAINER"]


def test_gm002_daemonset_gets_system_node_critical(engine):
    ds = workload("DaemonSet", pod_spec(container("plugin")), name="gpushare-device-plugin-ds",
                  namespace="kube-system")
    verdict, patched = mutate(engine, ds)
    assert patched["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"
    assert verdict.patch_ids == ["GM002"]
    again, _ = mutate(engine, patched, operation="UPDATE")
    assert again.patch == []


def test_gm002_other_daemonsets_are_left_alone(engine):
    verdict, _ = mutate(engine, workload("DaemonSet", pod_spec(container("x")), name="fluentd"))
    assert verdict.patch == []


def test_gm002_keeps_a_priority_class_the_user_set(engine):
    ds = workload("DaemonSet", pod_spec(container("x"), priorityClassName="custom"),
                  name="gpushare-device-plugin-ds")
    verdict, _ = mutate(engine, ds)
    assert verdict.patch == []


def test_gm002_pods_of_the_daemonset_and_stale_priority(engine):
    owner = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gpushare-device-plugin-ds",
              "uid": "1", "controller": True}]
    obj = pod(pod_spec(container("plugin"), priority=0), name="gpushare-device-plugin-ds-x8k2",
              namespace="kube-system", ownerReferences=owner)
    _, patched = mutate(engine, obj)
    assert patched["spec"]["priorityClassName"] == "system-node-critical"
    assert "priority" not in patched["spec"]


def test_daemonset_names_are_configurable():
    from webhook.settings import Settings

    engine = Engine(Settings(names={"gpushare_daemonsets": ["my-gpu-plugin"]}))
    verdict, _ = mutate(engine, workload("DaemonSet", pod_spec(container("x")), name="my-gpu-plugin"))
    assert verdict.patch_ids == ["GM002"]


@pytest.mark.parametrize("operation", ["UPDATE"])
def test_pods_are_not_mutated_on_update(engine, operation):
    verdict, _ = mutate(engine, pod(pod_spec(container(limits={MEM: 3}))), operation=operation)
    assert verdict.patch == []


def test_realistic_pod_patch_applies_and_escapes_paths(engine):
    obj = load_json("pod-realistic.json")
    verdict, patched = mutate(engine, obj)
    assert verdict.patch_ids == ["GM001", "GM003"]
    assert patched["spec"]["schedulerName"] == "ack-co-scheduler"
    assert env_of(patched["spec"]["containers"][0]) == {"ALIYUN_COM_GPU_MEM_CONTAINER": "4"}
    assert patched["spec"]["tolerations"] == obj["spec"]["tolerations"]


def test_json_pointer_escapes_special_characters():
    from policies.rules.mutations import pointer

    assert pointer(("metadata", "annotations", "a/b~c")) == "/metadata/annotations/a~1b~0c"


def test_workload_templates_are_not_given_scheduler_or_env(engine):
    verdict, _ = mutate(engine, workload("Deployment", pod_spec(container(limits={MEM: 3}))))
    assert verdict.patch == []


# ---- exact operations ---------------------------------------------------------------------------

DS_NAME = "gpushare-device-plugin-ds"
SIDECAR = container("istio-proxy", limits={"cpu": "100m"})


@pytest.mark.parametrize(("spec_extra", "op"), [
    ({}, "add"), ({"schedulerName": "default-scheduler"}, "replace"), ({"schedulerName": ""}, "replace"),
    ({"schedulerName": None}, "replace"),
])
def test_gm001_exact_operation(engine, spec_extra, op):
    verdict, _ = mutate(engine, pod(pod_spec(SIDECAR, container("app", limits={MEM: 2}), **spec_extra)))
    assert verdict.patch[0] == {"op": op, "path": "/spec/schedulerName", "value": "ack-co-scheduler"}


def test_gm001_needs_gpu_memory_not_just_compute(engine):
    verdict, _ = mutate(engine, pod(pod_spec(container("app", limits={CORE: 30}))))
    assert verdict.patch == []


def test_gm001_finds_gpu_memory_in_a_request_only_container(engine):
    verdict, _ = mutate(engine, pod(pod_spec(SIDECAR, container("app", requests={MEM: 2}))))
    assert verdict.patch_ids[0] == "GM001"


def test_gm003_gpu_container_after_a_sidecar(engine):
    obj = pod(pod_spec(SIDECAR, container("app", limits={MEM: 3}), container("log")))
    verdict, patched = mutate(engine, obj)
    assert verdict.patch == [
        {"op": "add", "path": "/spec/schedulerName", "value": "ack-co-scheduler"},
        {"op": "add", "path": "/spec/containers/1/env",
         "value": [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "3"}]},
    ]
    assert [("env" in c) for c in patched["spec"]["containers"]] == [False, True, False]


def test_gm003_every_gpu_container_gets_its_own_share(engine, demo_state):
    obj = pod(pod_spec(container("a", limits={MEM: 2}), SIDECAR, container("b", limits={MEM: 5}),
                       nodeName=CORE_MEM_NODE))
    _, patched = mutate(engine, obj, state=demo_state)
    containers = patched["spec"]["containers"]
    assert env_of(containers[0]) == {"ALIYUN_COM_GPU_MEM_CONTAINER": "2"}
    assert "env" not in containers[1]
    assert env_of(containers[2]) == {"ALIYUN_COM_GPU_MEM_CONTAINER": "5"}


# How GM003 writes the env it adds, by what the container already has (an easy table to update).
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ("absent", [{"op": "add", "path": "/spec/containers/0/env",
                     "value": [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "4"}]}]),
        (None, [{"op": "replace", "path": "/spec/containers/0/env",
                 "value": [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "4"}]}]),
        ([], [{"op": "add", "path": "/spec/containers/0/env/-",
               "value": {"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "4"}}]),
        (["junk", {"name": "OTHER", "value": "1"}],
         [{"op": "add", "path": "/spec/containers/0/env/-",
           "value": {"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "4"}}]),
        ([{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "1"}], []),
    ],
)
def test_gm003_operations_by_existing_env(engine, demo_state, env, expected):
    extra = {} if env == "absent" else {"env": env}
    obj = pod(pod_spec(container("a", limits={MEM: 4}, **extra), nodeName=CORE_MEM_NODE, schedulerName="volcano"))
    verdict, _ = mutate(engine, obj, state=demo_state)
    assert verdict.patch == expected


def test_gm003_a_pod_without_spec_gets_nothing(engine):
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}}
    verdict, _ = mutate(engine, obj)
    assert verdict.patch == []


def test_mutations_an_exemption_sets_aside_are_not_planned():
    # Annotation exemptions count only where an admin allows them: here, the namespace "default".
    engine = Engine(Settings(exemptions={"annotation_namespaces": ["default"]}))
    obj = pod(pod_spec(container("a", limits={MEM: 4})),
              annotations={"gpushare.io/exempt": "GM001", "gpushare.io/exempt-reason": "own scheduler"})
    verdict, _ = mutate(engine, obj)
    assert verdict.patch_ids == ["GM003"]


# ---- workloads -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["PodTemplate", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet",
                                  "ReplicationController", "Job", "CronJob"])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_mutations_leave_every_workload_kind_alone(engine, kind, operation):
    """Scheduler and env are for pods; a workload's template gets them when its pods are created."""
    spec = pod_spec(container("a", limits={MEM: 4}), nodeName=CORE_MEM_NODE)
    obj = workload(kind, spec) if kind != "PodTemplate" else {
        "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "w", "namespace": "default"},
        "template": {"spec": spec}}
    verdict, _ = mutate(engine, obj, operation=operation)
    assert verdict.patch == []


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_gm002_daemonset_exact_operations(engine, operation):
    ds = workload("DaemonSet", pod_spec(container("plugin"), priority=1000), name=DS_NAME, namespace="kube-system")
    verdict, _ = mutate(engine, ds, operation=operation)
    assert verdict.patch == [
        {"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "system-node-critical"},
        {"op": "remove", "path": "/spec/template/spec/priority"},
    ]


def test_gm002_a_daemonset_without_template_gets_nothing(engine):
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": DS_NAME}, "spec": {}}
    verdict, _ = mutate(engine, ds)
    assert verdict.patch == []


@pytest.mark.parametrize("owners", [
    [{"kind": "ReplicaSet", "name": DS_NAME}],
    [{"kind": "ControllerRevision", "name": DS_NAME}],
    [{"kind": "DaemonSet", "name": "fluentd"}],
    "not-a-list",
    ["not-an-object"],
])
def test_gm002_pods_of_other_owners_are_left_alone(engine, owners):
    obj = pod(pod_spec(container("x")), ownerReferences=owners)
    verdict, _ = mutate(engine, obj)
    assert verdict.patch == []


def test_gm002_pod_owned_among_other_owners(engine):
    owners = [{"kind": "Node", "name": "n1"}, {"kind": "DaemonSet", "name": DS_NAME}]
    verdict, _ = mutate(engine, pod(pod_spec(container("x"), priorityClassName=""), ownerReferences=owners))
    assert verdict.patch == [{"op": "add", "path": "/spec/priorityClassName", "value": "system-node-critical"}]


def test_gm002_pods_are_not_changed_on_update(engine):
    owners = [{"kind": "DaemonSet", "name": DS_NAME}]
    verdict, _ = mutate(engine, pod(pod_spec(container("x")), ownerReferences=owners), operation="UPDATE")
    assert verdict.patch == []


@pytest.mark.parametrize("first", [
    container("sidecar", limits={"nvidia.com/gpu": 1}),  # a GPU resource, but no GPU memory
    container("sidecar", limits={CORE: 30}),
    container("sidecar", limits={MEM: "1Gi"}),  # GPU memory that is not a whole GiB count (GS003)
])
def test_gm003_a_container_it_skips_does_not_stop_it(engine, first):
    """The mutating webhook runs before validation: a container GM003 has nothing for comes first,
    and the GPU container after it still gets its share."""
    verdict, patched = mutate(engine, pod(pod_spec(first, container("app", limits={MEM: 3}))))
    assert {"op": "add", "path": "/spec/containers/1/env",
            "value": [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "3"}]} in verdict.patch
    assert "env" not in patched["spec"]["containers"][0]


def test_gm003_a_container_that_has_its_env_does_not_stop_the_next(engine):
    ready = container("a", limits={MEM: 2}, env=[{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "2"}])
    verdict, _ = mutate(engine, pod(pod_spec(ready, container("b", limits={MEM: 3}), schedulerName="volcano")))
    assert verdict.patch == [{"op": "add", "path": "/spec/containers/1/env",
                              "value": [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "3"}]}]


@pytest.mark.parametrize("kind", ["CronJob", "Deployment", "Job", "ReplicaSet", "StatefulSet"])
def test_gm002_only_the_daemonset_and_its_pods(engine, kind):
    """A workload of another kind, named like the DaemonSet or owned by it, is neither."""
    obj = workload(kind, pod_spec(container("x")), name=DS_NAME)
    obj["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": DS_NAME}]
    verdict, _ = mutate(engine, obj)
    assert verdict.patch == []


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_pods_are_mutated_only_on_create(engine, operation):
    verdict, _ = mutate(engine, pod(pod_spec(container(limits={MEM: 3}))), operation=operation)
    assert verdict.patch == []


def test_plan_patch_plans_every_mutation_by_default(engine):
    from policies.rules.mutations import plan_patch

    owners = [{"kind": "DaemonSet", "name": DS_NAME}]
    subject = engine.subject("Pod", received(pod(pod_spec(container("x", limits={MEM: 2})), ownerReferences=owners)))
    assert [mutation_id for mutation_id, _ in plan_patch(subject)] == ["GM001", "GM002", "GM003"]
    assert plan_patch(subject, lambda mutation_id: mutation_id == "GM002") == [
        ("GM002", {"op": "add", "path": "/spec/priorityClassName", "value": "system-node-critical"})]


def test_mutation_records_cannot_be_changed():
    import dataclasses

    from policies.rules.mutations import MUTATIONS

    with pytest.raises(dataclasses.FrozenInstanceError):
        MUTATIONS["GM001"].title = "changed"  # type: ignore[misc]


def test_every_object_a_mutation_patches_is_sent_to_the_mutating_webhook(engine):
    # The mutating webhooks' matchConditions send what the mutations declare relevant
    # (policies/generate/match_conditions.py): an object a planner patches must be among them.
    from policies.rules.mutations import MUTATIONS
    from policies.rules.relevance import resolve

    owner = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gpushare-device-plugin-ds", "uid": "1",
              "controller": True}]
    patched = [("GM001", pod(pod_spec(container(limits={MEM: 2})))),
               ("GM002", workload("DaemonSet", pod_spec(container("plugin")), name="gpushare-device-plugin-ds")),
               ("GM002", pod(pod_spec(container("plugin")), name="gpushare-device-plugin-ds-x8k2",
                             ownerReferences=owner)),
               ("GM003", pod(pod_spec(container(limits={MEM: 2}))))]
    for mutation_id, obj in patched:
        verdict, _ = mutate(engine, obj)
        assert mutation_id in verdict.patch_ids
        triggers = resolve([MUTATIONS[mutation_id].relevance], engine.settings)
        assert triggers.sends(obj["kind"], obj, engine.settings), (mutation_id, obj["kind"])
    unrelated = workload("DaemonSet", pod_spec(container("x")), name="fluentd")
    assert not resolve([m.relevance for m in MUTATIONS.values()], engine.settings).sends("DaemonSet", unrelated,
                                                                                         engine.settings)
