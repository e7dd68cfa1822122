"""GS010 and GS011 in process, word for word: what each rule reports of one pod, which of a pod's
findings the webhooks leave to ``check`` (envFrom in a GPU-free container is never sent to them),
``isolation.env_from: deny``, a custom workload's pods, and ``kubectl debug``'s review of the
pods/ephemeralcontainers subresource (only the containers it adds are judged). The real server and
``check`` are in tests/server/test_isolation_rules.py and tests/server/test_isolation_round_two.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.admission.engine import Engine
from tests.support.manifests import CORE, MEM, container, pod_spec, received, workload
from webhook.settings import Settings

DATA = Path(__file__).parents[1] / "data"
APP, SIDE = 'GS010: Pod default/w container "app"', 'GS011: Pod default/w container "side"'
SPEC = pod_spec(
    container("app", limits={MEM: 2}, env=[{"name": "ALIYUN_COM_GPU_MEM_IDX", "value": "1"},
                                           {"name": "CGPU_DISABLE", "value": "true"}],
              envFrom=[{"configMapRef": {"name": "cfg"}}]),
    container("side", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
              envFrom=[{"configMapRef": {"name": "c2"}}]))
FORGED = ("GS010", "deny", f"{APP}: env ALIYUN_COM_GPU_MEM_IDX=1 overrides what the GPU-sharing device plugin sets; "
          "remove it", "spec.containers[0].env[0]")
ENV_FROM = (f"{APP}: envFrom configMapRef \"cfg\" may override what the GPU-sharing device plugin and cGPU set, "
            "unseen at admission; give the source a prefix, or list GPU variables in env", "spec.containers[0].envFrom")
DISABLED = ("GS011", "warn", 'GS011: Pod default/w container "app": env CGPU_DISABLE=true turns off cGPU memory '
            "isolation: the container can use all of its card's memory; remove it, or have an admin exempt the pod",
            "spec.containers[0].env[1]")
EXPOSED = ("GS011", "warn", f"{SIDE}: env NVIDIA_VISIBLE_DEVICES=all exposes the node's GPUs to a container that "
           "requests none; set none or void, or have an admin exempt the pod", "spec.containers[1].env[0]")
GPU_FREE_ENV_FROM = ("GS011", "warn", f"{SIDE}: envFrom configMapRef \"c2\" may set NVIDIA_VISIBLE_DEVICES, exposing "
                     "the node's GPUs to a container that requests none, or what the GPU-sharing device plugin sets, "
                     "unseen at admission; give the source a prefix, or set NVIDIA_VISIBLE_DEVICES=void in env",
                     "spec.containers[1].envFrom")


def findings(engine: Engine, kind: str, obj: dict[str, Any], **review: Any) -> list[tuple[str, str, str, str]]:
    subject = engine.subject(received(kind), received(obj), **review)
    return [(f.rule, f.severity, f.message, f.path_text) for f in engine.validate(subject).findings]


def test_each_rule_reports_its_own_variables_of_one_pod(engine):
    assert findings(engine, "Pod", workload("Pod", SPEC)) == [
        FORGED, ("GS010", "warn", *ENV_FROM), DISABLED, EXPOSED, GPU_FREE_ENV_FROM]


def test_the_webhooks_leave_envfrom_in_a_gpu_free_container_to_check(engine):
    assert findings(engine, "Pod", workload("Pod", SPEC), admission=True) == [
        FORGED, ("GS010", "warn", *ENV_FROM), DISABLED, EXPOSED]


def test_env_from_deny_refuses_it_in_a_gpu_container_only():
    strict = Engine(Settings(isolation={"env_from": "deny"}))
    assert findings(strict, "Pod", workload("Pod", SPEC)) == [
        FORGED, ("GS010", "deny", *ENV_FROM), DISABLED, EXPOSED, GPU_FREE_ENV_FROM]


@pytest.mark.parametrize("kind", ["Deployment", "CronJob"])
def test_a_template_is_judged_at_its_own_path(engine, kind):
    base = "spec.template.spec" if kind == "Deployment" else "spec.jobTemplate.spec.template.spec"
    found = findings(engine, kind, workload(kind, SPEC), admission=True)
    assert [(rule, severity, path) for rule, severity, _, path in found] == [
        ("GS010", "deny", f"{base}.containers[0].env[0]"), ("GS010", "warn", f"{base}.containers[0].envFrom"),
        ("GS011", "warn", f"{base}.containers[0].env[1]"), ("GS011", "warn", f"{base}.containers[1].env[0]")]
    assert found[0][2] == (f'GS010: {kind} default/w container "app": env ALIYUN_COM_GPU_MEM_IDX=1 overrides what the '
                           "GPU-sharing device plugin sets; remove it")


def test_a_custom_workload_is_judged_in_each_replica_it_makes(engine):
    job = yaml.safe_load((DATA / "workloads" / "pytorchjob.yaml").read_text())
    assert findings(engine, "PyTorchJob", job) == []
    worker = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]"
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "16"}]
    assert findings(engine, "PyTorchJob", job) == [(
        "GS010", "deny", f'GS010: PyTorchJob kubeflow/pytorch-simple {worker} (container "pytorch"): env '
                         "ALIYUN_COM_GPU_MEM_DEV=16 overrides what the GPU-sharing device plugin sets; remove it",
        f"{worker}.env[0]")]


def _debug_review() -> dict[str, Any]:
    """``kubectl debug --env=NVIDIA_VISIBLE_DEVICES=all`` as the API server sends it (tests/data/SOURCES.md)."""
    return json.loads((DATA / "kubectl-debug" / "ephemeralcontainers-review.json").read_text())["request"]


def _debug(engine: Engine, request: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    assert request["subResource"] == "ephemeralcontainers"  # decoded from JSON: not the interned literal
    return findings(engine, "Pod", request["object"], operation="UPDATE", old=request["oldObject"],
                    sub_resource=received(request["subResource"]), admission=True)


def test_kubectl_debug_is_judged_on_the_container_it_adds(engine):
    request = _debug_review()
    assert _debug(engine, request) == [(
        "GS011", "warn", 'GS011: Pod team-a/cuda-train-6b9c7f5d8-x2kqp ephemeral container "debugger-8ztsd": env '
                         "NVIDIA_VISIBLE_DEVICES=all exposes the node's GPUs to a container that requests none; set "
                         "none or void, or have an admin exempt the pod", "spec.ephemeralContainers[0].env[0]")]


def test_kubectl_debug_does_not_judge_the_pods_own_containers_again(engine):
    request = _debug_review()
    for pod in (request["object"], request["oldObject"]):
        pod["spec"]["containers"][0].setdefault("env", []).append({"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "16"})
    added = request["object"]["spec"]["ephemeralContainers"][-1]
    added["env"] = [{"name": "TERM", "value": "xterm"}]
    assert _debug(engine, request) == []
    # the same pod, created: its own container is what is judged
    created = copy.deepcopy(request["object"])
    del created["spec"]["ephemeralContainers"]
    assert [f[0] for f in findings(engine, "Pod", created, admission=True)] == ["GS010"]


def test_gs011_configured_to_deny_refuses_what_lifts_isolation():
    # rules: {GS011: {severity: deny}} (docs/isolation.md): both findings of GS011 become denials, GS010's do not change
    hardened = Engine(Settings(rules={"GS011": {"severity": "deny"}}))
    assert findings(hardened, "Pod", workload("Pod", SPEC), admission=True) == [
        FORGED, ("GS010", "warn", *ENV_FROM), ("GS011", "deny", *DISABLED[2:]), ("GS011", "deny", *EXPOSED[2:])]


# -- env_problems and the audit's record, called directly -------------------------------------------------

NAMES = Settings().names


def _problems(spec: dict[str, Any], labels: dict[str, str] | None = None, mps: bool | None = None,
              names: Any = NAMES) -> list[tuple[str, str, bool, bool, bool]]:
    """(container, text, lifts, advisory, offline) of every problem of the pod spec, as GS010/GS011 read them."""
    from policies.model.isolation import container_envs
    from policies.model.isolation_findings import env_problems, may_run_on_mps
    from policies.model.resources import container_requests

    envs = container_envs(spec, ("spec",), names)
    requests = container_requests(spec, ("spec",), names)
    may = may_run_on_mps(spec, names) if mps is None else mps
    return [(p.container.name, p.text, p.lifts, p.advisory, p.offline)
            for p in env_problems(envs, requests, labels or {}, may, names)]


OVERRIDES_TEXT = "overrides what the GPU-sharing device plugin sets; remove it"


@pytest.mark.parametrize(("limits", "labels", "value", "reported"), [
    ({MEM: 4}, {}, "4", False),  # GM003's own value: the mutated pod again
    ({MEM: 4}, {}, "5", True),
    ({MEM: 4}, {}, "10", True), ({MEM: 4}, {}, "1", True),  # compared as values, not as sorted text
    ({MEM: 4}, {"aliyun.com/gpu-count": "2"}, "2", False),  # spread over 2 cards: 4 / 2 on each
    ({MEM: 4}, {"aliyun.com/gpu-count": "2"}, "4", True),
    ({MEM: 5}, {"aliyun.com/gpu-count": "2"}, "2", True),  # not whole on each card: no share GM003 writes
    ({"aliyun.com/gpu": 1}, {}, "0", True),  # no gpu-mem: no share
    ({}, {}, "4", True),  # a GPU-free container
], ids=str)
def test_gm003_own_share_is_the_one_value_admitted(limits, labels, value, reported):
    spec = pod_spec(container("app", limits=limits, env=[{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": value}]))
    expected = [("app", f"env ALIYUN_COM_GPU_MEM_CONTAINER={value} {OVERRIDES_TEXT}", False, False, False)]
    assert _problems(spec, labels) == (expected if reported else [])


def test_another_device_plugin_variable_is_never_admitted_even_with_the_share():
    spec = pod_spec(container("app", limits={MEM: 4}, env=[{"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "4"}]))
    assert _problems(spec) == [("app", f"env ALIYUN_COM_GPU_MEM_DEV=4 {OVERRIDES_TEXT}", False, False, False)]


@pytest.mark.parametrize(("limits", "selector", "reported"), [
    ({MEM: 2}, None, True), ({MEM: 2}, "mps", True), ({MEM: 2}, "cgpu", False), ({"aliyun.com/gpu": 1}, None, False),
    ({MEM: 0}, None, False), ({}, None, False),
], ids=str)
def test_mps_variables_are_judged_in_gpu_memory_containers_that_may_run_on_mps(limits, selector, reported):
    extra = {"nodeSelector": {"ack.node.gpu.schedule": selector}} if selector else {}
    spec = pod_spec(container("app", limits=limits, env=[{"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/tmp/x"}]),
                    **extra)
    found = _problems(spec)
    assert found == ([("app", "env CUDA_MPS_PIPE_DIRECTORY=/tmp/x overrides what the GPU-sharing device plugin sets "
                               "on mps nodes; remove it", False, False, False)] if reported else [])


@pytest.mark.parametrize(("spec", "mps"), [
    (None, True), ({}, True), ({"nodeSelector": {}}, True), ({"nodeSelector": "mps"}, True),
    ({"nodeSelector": {"ack.node.gpu.schedule": "mps"}}, True), ({"nodeSelector": {"ack.node.gpu.schedule": 1}}, True),
    ({"nodeSelector": {"ack.node.gpu.schedule": "cgpu"}}, False),
    ({"nodeSelector": {"ack.node.gpu.schedule": "share"}}, False),
], ids=str)
def test_a_pod_may_run_on_mps_nodes_unless_its_node_selector_names_another_mode(spec, mps):
    from policies.model.isolation_findings import may_run_on_mps

    assert may_run_on_mps(spec, NAMES) is mps


@pytest.mark.parametrize(("limits", "value", "expected"), [
    ({MEM: 2}, "all", [("exposes", "GPUs the device plugin did not assign to this container; remove it or set none "
                                    "or void", False, False)]),
    ({"aliyun.com/gpu": 1}, "0", [("exposes", "GPUs the device plugin did not assign to this container; remove it "
                                              "or set none or void", False, False)]),
    ({MEM: 0}, "all", [("exposes", "the node's GPUs to a container that requests none; set none or void, or have "
                                   "an admin exempt the pod", True, False)]),  # zero: no GPU assigned
    ({}, "all", [("exposes", "the node's GPUs to a container that requests none; set none or void, or have an admin "
                             "exempt the pod", True, False)]),
    ({MEM: 2}, "void", []), ({}, "none", []), ({}, "", []),
], ids=str)
def test_visible_devices_are_judged_by_whether_the_container_was_assigned_gpus(limits, value, expected):
    spec = pod_spec(container("app", limits=limits, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]))
    assert _problems(spec) == [("app", f"env NVIDIA_VISIBLE_DEVICES={value} {verb} {text}", lifts, advisory, False)
                               for verb, text, lifts, advisory in expected]


def test_a_value_read_at_run_time_may_expose_or_may_turn_isolation_off():
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {}}},
           {"name": "CGPU_DISABLE", "valueFrom": {"configMapKeyRef": {}}}]
    spec = pod_spec(container("app", limits={MEM: 2}, env=env))
    assert [(" may expose " in text, " may turn " in text, lifts) for _, text, lifts, _, _ in _problems(spec)] == [
        (True, False, False), (False, True, True)]


@pytest.mark.parametrize(("limits", "value", "expected"), [
    ({MEM: 2}, "true", ("turns off cGPU memory isolation: the container can use all of its card's memory; remove it, "
                        "or have an admin exempt the pod", False)),
    ({MEM: 2}, "on", ("is not a value cGPU documents (true or 1 turn its memory isolation off, false or 0 leave it "
                      "on) and cGPU's parser is not published, so it may take it as true; write one of those four",
                      True)),
    ({MEM: 2}, "false", None),
    ({"aliyun.com/gpu": 1}, "true", None),  # cGPU isolates gpu-mem only
    ({}, "true", None),
], ids=str)
def test_cgpu_disable_is_judged_where_cgpu_isolates_gpu_memory(limits, value, expected):
    spec = pod_spec(container("app", limits=limits, env=[{"name": "CGPU_DISABLE", "value": value}]))
    assert _problems(spec) == ([] if expected is None else
                               [("app", f"env CGPU_DISABLE={value} {expected[0]}", True, expected[1], False)])


ENV_FROM_TEXT = ("may override what the GPU-sharing device plugin and cGPU set, unseen at admission; give the source "
                 "a prefix, or list GPU variables in env")


def test_env_from_sources_are_one_problem_per_container():
    sources = [{"configMapRef": {"name": "a"}}, {"secretRef": {"name": "b"}}, {"configMapRef": {"name": "c"}}]
    spec = pod_spec(container("gpu", limits={MEM: 2}, envFrom=sources), container("one", envFrom=sources[1:2]),
                    container("zero", limits={MEM: 0}, envFrom=sources[:2]))
    free = ("may set NVIDIA_VISIBLE_DEVICES, exposing the node's GPUs to a container that requests none, or what the "
            "GPU-sharing device plugin sets, unseen at admission; give the source a prefix, or set "
            "NVIDIA_VISIBLE_DEVICES=void in env")
    assert _problems(spec) == [
        ("gpu", f'envFrom configMapRef "a" and 2 more {ENV_FROM_TEXT}', False, False, False),
        ("one", f'envFrom secretRef "b" {free}', True, True, True),
        ("zero", f'envFrom configMapRef "a" and 1 more {free}', True, True, True)]


def test_every_entry_of_a_name_is_judged_and_other_containers_go_on():
    spec = pod_spec(container("a", limits={MEM: 2}, env=[{"name": "CGPU_DISABLE", "value": "0"},
                                                         {"name": "CGPU_DISABLE", "value": "1"},
                                                         {"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/x"},
                                                         {"name": "ALIYUN_COM_GPU_MEM_IDX", "value": "0"}]),
                    container("b", limits={MEM: 2}, env=[{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "2"},
                                                         {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                                                         {"name": "ALIYUN_COM_GPU_MEM_POD", "value": "2"}]))
    assert [(c, t.split(" ")[1]) for c, t, *_ in _problems(spec, mps=False)] == [
        ("a", "CGPU_DISABLE=1"), ("a", "ALIYUN_COM_GPU_MEM_IDX=0"), ("b", "ALIYUN_COM_GPU_MEM_POD=2")]
    assert [(c, t.split(" ")[1]) for c, t, *_ in _problems(spec, mps=True)] == [
        ("a", "CGPU_DISABLE=1"), ("a", "CUDA_MPS_PIPE_DIRECTORY=/x"), ("a", "ALIYUN_COM_GPU_MEM_IDX=0"),
        ("b", "ALIYUN_COM_GPU_MEM_POD=2")]


def test_an_init_container_is_matched_with_its_own_request():
    spec = pod_spec(container("app", limits={MEM: 2}),
                    init=[container("warm", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])])
    [(name, text, lifts, _, _)] = _problems(spec)
    assert (name, lifts) == ("warm", True) and "requests none" in text


def _record(spec: dict[str, Any], labels: dict[str, str] | None = None):
    from policies.model.isolation_findings import pod_env
    from policies.model.resources import container_requests

    return pod_env(spec, container_requests(spec, ("spec",), NAMES), labels or {}, NAMES)


def test_the_audit_keeps_a_record_only_of_pods_with_something_to_report():
    assert _record(pod_spec(container("app", limits={MEM: 2}))) is None
    gm003 = pod_spec(container("app", limits={MEM: 2}, env=[{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "2"}]))
    assert _record(gm003) is None  # GM003's own value: nothing to keep
    assert _record(pod_spec(container("app", env=[{"name": "CGPU_DISABLE", "value": 1}]))) is None  # malformed
    assert _record(None) is None


def test_the_audit_record_holds_what_each_container_names_and_judges_again_alike():
    from policies.model.isolation import container_envs
    from policies.model.isolation_findings import env_manifest

    spec = pod_spec(
        container("app", limits={MEM: 2, CORE: 30}, requests={MEM: "2"},
                  env=[{"name": "LANG", "value": "C"}, {"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "15"},
                       {"name": "CGPU_DISABLE", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                       {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {}}],
                  envFrom=[{"prefix": "ALIYUN_", "configMapRef": {"name": "cfg"}}]),
        container("side", env=[{"name": "F", "value": "all"}, {"name": "S", "valueFrom": {"fieldRef": {}}},
                               {"name": "Q", "valueFrom": {}},
                               {"name": "NVIDIA_VISIBLE_DEVICES", "value": "$(F)"}],
                  envFrom=[{"prefix": "APP_", "secretRef": {"name": "app"}}]),
        init=[container("warm", limits={"aliyun.com/gpu": "1"},
                        env=[{"name": "ALIYUN_COM_GPU_MEM_IDX", "value": "1"}])],
        nodeSelector={"ack.node.gpu.schedule": "cgpu"}, enableServiceLinks=False)
    record = _record(spec)
    assert record is not None and (record.mode, record.service_links) == ("cgpu", False)
    assert [c.name for c in record.containers] == ["warm", "app", "side"]
    assert record.resources == ((("aliyun.com/gpu", "1"),), ((CORE, "30"), (MEM, "2")), ())
    rebuilt = env_manifest(record)
    assert rebuilt == {
        "initContainers": [{"name": "warm", "env": [{"name": "ALIYUN_COM_GPU_MEM_IDX", "value": "1"}],
                            "resources": {"limits": {"aliyun.com/gpu": "1"}}}],
        "containers": [
            {"name": "app", "env": [{"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "15"},
                                    {"name": "CGPU_DISABLE", "valueFrom": {"secretKeyRef": {}}},
                                    {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {}}],
             "resources": {"limits": {CORE: "30", MEM: "2"}},
             "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "ALIYUN_"}]},
            {"name": "side", "env": [{"name": "F", "value": "all"}, {"name": "S", "valueFrom": {"fieldRef": {}}},
                                     {"name": "Q", "valueFrom": {}},
                                     {"name": "NVIDIA_VISIBLE_DEVICES", "value": "$(F)"}],
             "envFrom": [{"configMapRef": {"name": ""}, "prefix": "APP_"}]}]}
    # judged again from the record, the audit finds what the webhook found
    again = {**rebuilt, "nodeSelector": {"ack.node.gpu.schedule": record.mode},
             "enableServiceLinks": record.service_links}
    assert _problems(again) == _problems(spec)
    assert [c.entries for c in container_envs(again, ("spec",), NAMES)] == [c.entries for c in record.containers]


def test_a_record_without_a_gpu_request_names_no_resources():
    record = _record(pod_spec(container("monitor", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])))
    assert record is not None and record.resources == ((),) and record.mode is None and record.service_links
    from policies.model.isolation_findings import env_manifest

    assert env_manifest(record) == {"containers": [{"name": "monitor", "env": [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}


def test_configured_variable_names_are_judged_each_as_what_it_stands_for():
    names = Settings(names={"env": {"device_plugin": ["AAA_GPU_SHARE"], "mps": ["MPS_X"],
                                    "visible_devices": "GPU_DEVICES", "disable_isolation": "XCGPU_OFF"}}).names
    spec = pod_spec(container("app", limits={MEM: 2}, env=[{"name": "AAA_GPU_SHARE", "value": "2"},
                                                           {"name": "XCGPU_OFF", "value": "true"},
                                                           {"name": "GPU_DEVICES", "value": "all"}]))
    assert [(text, lifts) for _, text, lifts, _, _ in _problems(spec, names=names)] == [
        (f"env AAA_GPU_SHARE=2 {OVERRIDES_TEXT}", False),  # GM003 writes only ALIYUN_COM_GPU_MEM_CONTAINER
        ("env XCGPU_OFF=true turns off cGPU memory isolation: the container can use all of its card's memory; "
         "remove it, or have an admin exempt the pod", True),
        ("env GPU_DEVICES=all exposes GPUs the device plugin did not assign to this container; remove it or set none "
         "or void", False)]
