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
from tests.support.manifests import MEM, container, pod_spec, received, workload
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
