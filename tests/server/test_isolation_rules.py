"""GS010 and GS011 through the real server and ``gpushare check``: every variable the device plugin
and cGPU own, set in a Pod, a Deployment template and an init container, by value and from valueFrom,
alone and as the second entry of its name, denied word for word; GM003's own value admitted again
after the mutating webhook; CGPU_DISABLE warned, denied when configured, admitted where an admin
grants it; NVIDIA_VISIBLE_DEVICES judged by value; envFrom warned (denied when configured); and the
shapes a manifest can get wrong, with their file and line."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from policies.admission.engine import Engine
from tests.support.check_helpers import check_json, run_gpushare, write_yaml
from tests.support.helpers import admission_review, gpushare_server
from tests.support.manifests import MEM, container, pod_spec, received, workload
from webhook.settings import Settings

pytestmark = pytest.mark.processes

WHOLE = "nvidia.com/gpu"
OVERRIDES = "overrides what the GPU-sharing device plugin sets; remove it"
EXPOSES = "GPUs the device plugin did not assign to this container; remove it or set none or void"
UNASKED = "the node's GPUs to a container that requests none; set none or void, or have an admin exempt the pod"
DISABLES = ("off cGPU memory isolation: the container can use all of its card's memory; remove it, or have an "
            "admin exempt the pod")
ENV_FROM = ("may override what the GPU-sharing device plugin and cGPU set, unseen at admission; give the source "
            "a prefix, or list GPU variables in env")

# Each variable GS010 refuses in a container asking for gpu-mem: a value it refuses, and a value it
# admits when it judges by value (None: it refuses every value).
REFUSED = [
    ("ALIYUN_COM_GPU_MEM_DEV", "16", None),
    ("ALIYUN_COM_GPU_MEM_CONTAINER", "15", "2"),  # 2: the container's gpu-mem, what GM003 writes
    ("ALIYUN_COM_GPU_MEM_IDX", "1", None),
    ("ALIYUN_COM_GPU_MEM_POD", "15", None),
    ("ALIYUN_COM_GPU_VISIBLE_DEVICES", "0,1", None),
    ("ALIYUN_COM_GPU_SCHD_WEIGHT", "10", None),
    ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100", None),
    ("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps", None),
    ("NVIDIA_VISIBLE_DEVICES", "all", "none"),
]
FROM_CONFIG_MAP = {"configMapKeyRef": {"name": "gpu-settings", "key": "value"}}


def _tail(name: str, shown: str, read_later: bool) -> str:
    if name == "NVIDIA_VISIBLE_DEVICES":
        return f"env {shown} {'may expose' if read_later else 'exposes'} {EXPOSES}"
    if name.startswith("CUDA_MPS_"):
        return f"env {shown} {OVERRIDES.replace('; ', ' on mps nodes; ')}"
    return f"env {shown} {OVERRIDES}"


def _case(name: str, value: str, admitted: str | None, where: str, source: str, twice: bool) -> tuple[
        str, dict[str, Any], list[tuple[str, str]]]:
    """(id, manifest, [(message, field)]) for one variable set one way in one place."""
    if where == "init container" and name == "ALIYUN_COM_GPU_MEM_CONTAINER":
        admitted = None  # GM003 writes nothing on init containers: every value is the pod's own
    entry: dict[str, Any] = {"name": name, "value": value} if source == "value" else {"name": name,
                                                                                      "valueFrom": FROM_CONFIG_MAP}
    shown = f"{name}={value}" if source == "value" else f"{name}=<from configMapKeyRef>"
    env = [entry]
    if twice:  # first an entry of the same name it admits (or refuses alike), the last one wins at run time
        env = [{"name": name, "value": admitted if admitted is not None else value}, entry]
    gpu = {MEM: 2}
    if where == "init container":
        spec = pod_spec(container("app", limits=gpu), init=[container("init", limits=gpu, env=env)])
    else:
        spec = pod_spec(container("app", limits=gpu, env=env))
    kind = "Deployment" if where == "Deployment" else "Pod"
    obj = workload(kind, spec, name="d" if kind == "Deployment" else "p")
    label = 'Deployment default/d container "app"' if kind == "Deployment" else (
        'Pod default/p init container "init"' if where == "init container" else 'Pod default/p container "app"')
    base = "spec.template.spec" if kind == "Deployment" else "spec"
    group = "initContainers" if where == "init container" else "containers"
    expected = []
    if twice and admitted is None:
        expected.append((f"GS010: {label}: {_tail(name, f'{name}={value}', False)}", f"{base}.{group}[0].env[0]"))
    expected.append((f"GS010: {label}: {_tail(name, shown, source != 'value')}",
                     f"{base}.{group}[0].env[{len(env) - 1}]"))
    return f"{name}-{where.replace(' ', '-')}-{source}-{'second' if twice else 'alone'}", obj, expected


CASES = [_case(name, value, admitted, where, source, twice)
         for name, value, admitted in REFUSED for where in ("Pod", "Deployment", "init container")
         for source in ("value", "valueFrom") for twice in (False, True)]


def test_every_case_is_distinct_and_named():
    assert len(CASES) == len(REFUSED) * 12 == len({case_id for case_id, _, _ in CASES})


def test_check_denies_each_variable_in_each_place_word_for_word(tmp_path):
    files = {case_id: write_yaml(tmp_path / f"{case_id}.yaml", obj) for case_id, obj, _ in CASES}
    code, report = check_json(tmp_path)
    assert code == 1 and report["errors"] == []
    found: dict[str, list[tuple[str, str]]] = {}
    for finding in report["findings"]:
        found.setdefault(Path(finding["file"]).stem, []).append((finding["message"], finding["field"]))
    for case_id, _, expected in CASES:
        assert found.get(case_id) == expected, case_id
        assert all(f["severity"] == "deny" for f in report["findings"] if Path(f["file"]) == files[case_id])


def _validate(server, session, obj: dict[str, Any], **review: Any) -> dict[str, Any]:
    reply = server.post_json("/validate", admission_review(obj, **review), session)
    assert reply.status_code == 200, reply.text
    return reply.json()["response"]


def test_the_server_denies_each_variable_in_each_place_word_for_word(server, session):
    for case_id, obj, expected in CASES:
        response = _validate(server, session, obj, group="apps" if obj["kind"] == "Deployment" else "",
                             resource="deployments" if obj["kind"] == "Deployment" else "pods")
        assert response["allowed"] is False, case_id
        assert response["status"]["message"] == "; ".join(message for message, _ in expected), case_id
        assert response["auditAnnotations"]["denied"] == "GS010"


def _mutated(server, session, obj: dict[str, Any]) -> dict[str, Any]:
    reply = server.post_json("/mutate", admission_review(obj), session)
    response = reply.json()["response"]
    patch = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(obj, patch)


@pytest.mark.parametrize(("limits", "labels", "written"), [
    ({MEM: 2}, {}, "2"),
    ({MEM: 8}, {"aliyun.com/gpu-count": "4"}, "2"),  # ACK's multi-GPU page: 8 over 4 cards is 2 on each
    ({MEM: "1k"}, {}, "1000"),  # canonical 1k is 1000 GiB, written as GM003 writes it
])
def test_gm003_own_value_is_admitted_again_after_the_mutating_webhook(server, session, limits, labels, written):
    pod = workload("Pod", pod_spec(container("app", limits=limits)), name="p")
    pod["metadata"]["labels"] = labels
    mutated = _mutated(server, session, pod)
    env = mutated["spec"]["containers"][0]["env"]
    assert env == [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": written}]
    response = _validate(server, session, mutated)
    assert response["allowed"] is True and "GS010" not in response["auditAnnotations"]["rules"]
    assert not [w for w in response.get("warnings", []) if w.startswith("GS010")]
    # A value other than GM003's is the pod's own, and refused; in an init container every value is.
    mutated["spec"]["containers"][0]["env"][0]["value"] = str(int(written) + 1)
    assert _validate(server, session, mutated)["allowed"] is False
    own = [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": written}]
    init = workload("Pod", pod_spec(container("app", limits=limits), init=[container("init", env=own)]), name="p")
    init["metadata"]["labels"] = labels
    assert _validate(server, session, init)["status"]["message"] == (
        f'GS010: Pod default/p init container "init": env ALIYUN_COM_GPU_MEM_CONTAINER={written} {OVERRIDES}')


CGPU_DISABLE = [{"name": "CGPU_DISABLE", "value": "true"}]
DISABLE_WARNING = f'GS011: Pod {{ns}}/p container "app": env CGPU_DISABLE=true turns {DISABLES}'
GRANTING = {"rules": {"GS011": {"severity": "deny"}},
            "exemptions": {"grants": [{"name": "no-isolation-benchmarks", "namespace": "bench", "names": "*",
                                       "rules": ["GS011"], "reason": "benchmarks measure whole cards",
                                       "expires": "2999-12-31"}]}}


def _disabled(namespace: str) -> dict[str, Any]:
    return workload("Pod", pod_spec(container("app", limits={MEM: 3}, env=CGPU_DISABLE)), name="p",
                    namespace=namespace)


def test_cgpu_disable_is_warned_by_default(server, session):
    response = _validate(server, session, _disabled("team-a"))
    assert response["allowed"] is True
    assert response["warnings"] == [DISABLE_WARNING.format(ns="team-a")]
    assert response["auditAnnotations"]["warned"] == "GS011"


def test_cgpu_disable_is_denied_when_configured_and_admitted_where_an_admin_grants_it(tmp_path):
    config = write_yaml(tmp_path / "config.yaml", GRANTING)
    with gpushare_server(tmp_path, "--config", str(config)) as server, server.session() as session:
        denied = _validate(server, session, _disabled("team-a"))
        assert denied["allowed"] is False and denied["status"]["message"] == DISABLE_WARNING.format(ns="team-a")
        granted = _validate(server, session, _disabled("bench"))
        assert granted["allowed"] is True and "warnings" not in granted
        assert granted["auditAnnotations"]["exempted_by"] == "grant:no-isolation-benchmarks"
        assert granted["auditAnnotations"]["exemption_reason"] == "benchmarks measure whole cards"
    # check with the same config reaches the same verdicts.
    files = [write_yaml(tmp_path / f"{ns}.yaml", _disabled(ns)) for ns in ("team-a", "bench")]
    assert check_json(files[0], "--config", config)[0] == 1
    code, report = check_json(files[1], "--config", config)
    assert code == 0 and [f["rule"] for f in report["exempted"]] == ["GS011"]


@pytest.mark.parametrize("value", ["none", "void", ""])
@pytest.mark.parametrize("limits", [{MEM: 2}, {WHOLE: 1}, None], ids=["gpu-mem", "whole GPU", "GPU-free"])
def test_visible_devices_that_hide_gpus_pass_everywhere(server, session, value, limits):
    pod = workload("Pod", pod_spec(container("app", limits=limits, env=[
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": value}])), name="p")
    response = _validate(server, session, pod)
    assert response["allowed"] is True and not [w for w in response.get("warnings", []) if w[:5] in ("GS010",
                                                                                                     "GS011")]


@pytest.mark.parametrize("value", ["all", "0", "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "0,1"])
def test_visible_devices_exposing_gpus_are_denied_in_a_gpu_pod_and_warned_in_a_gpu_free_pod(server, session, value):
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]
    for limits in ({MEM: 2}, {WHOLE: 1}):
        denied = _validate(server, session, workload("Pod", pod_spec(container("app", limits=limits, env=env)),
                                                     name="p"))
        assert denied["status"]["message"] == \
            f'GS010: Pod default/p container "app": env NVIDIA_VISIBLE_DEVICES={value} exposes {EXPOSES}'
    monitor = workload("DaemonSet", pod_spec(container("exporter", env=env)), name="dcgm-exporter",
                       namespace="monitoring")
    warned = _validate(server, session, monitor, group="apps", resource="daemonsets")
    assert warned["allowed"] is True and warned["warnings"] == [
        f'GS011: DaemonSet monitoring/dcgm-exporter container "exporter": env NVIDIA_VISIBLE_DEVICES={value} '
        f"exposes {UNASKED}"]


def test_env_from_in_a_gpu_container_is_warned_and_denied_when_configured(server, session, tmp_path):
    spec = pod_spec(container("app", limits={MEM: 2}, envFrom=[
        {"configMapRef": {"name": "gpu-env"}}, {"prefix": "APP_", "secretRef": {"name": "app-secrets"}},
        {"secretRef": {"name": "tokens"}}]))
    job = workload("Job", spec, name="train")
    warning = f'GS010: Job default/train container "app": envFrom configMapRef "gpu-env" and 1 more {ENV_FROM}'
    response = _validate(server, session, job, group="batch", resource="jobs")
    assert response["allowed"] is True and response["warnings"] == [warning]
    # A prefix no judged name starts with cannot set one; a GPU-free container's envFrom is not judged.
    quiet = pod_spec(container("app", limits={MEM: 2}, envFrom=[{"prefix": "APP_", "configMapRef": {"name": "c"}}]),
                     container("sidecar", envFrom=[{"configMapRef": {"name": "c"}}]))
    assert "warnings" not in _validate(server, session, workload("Pod", quiet, name="p"))
    path = write_yaml(tmp_path / "job.yaml", job)
    code, report = check_json(path)
    assert code == 0 and [(f["severity"], f["message"], f["field"]) for f in report["findings"]] == [
        ("warn", warning, "spec.template.spec.containers[0].envFrom")]
    config = write_yaml(tmp_path / "config.yaml", {"isolation": {"env_from": "deny"}})
    code, report = check_json(path, "--config", config)
    assert code == 1 and [f["severity"] for f in report["findings"]] == ["deny"]


def test_dry_run_shows_both_rules(server, session):
    body = json.dumps(workload("Pod", pod_spec(container("app", limits={MEM: 2}, env=[
        {"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "16"}, {"name": "CGPU_DISABLE", "value": "1"}])), name="p"))
    reply = session.post(server.url + "/dry-run", data=body, headers={"Content-Type": "application/json"}, timeout=15)
    [result] = reply.json()["results"]
    assert result["allowed"] is False
    assert [v["message"] for v in result["violations"]] == [
        f'GS010: Pod default/p container "app": env ALIYUN_COM_GPU_MEM_DEV=16 {OVERRIDES}']
    assert [w["message"] for w in result["warnings"]] == [
        f'GS011: Pod default/p container "app": env CGPU_DISABLE=1 turns {DISABLES}']


# -- engine details: what is judged and how ------------------------------------------------------

ENGINE = Engine(Settings())


def findings(obj: dict[str, Any], engine: Engine = ENGINE) -> list[tuple[str, str, str]]:
    sent = received(obj)
    verdict = engine.validate(engine.subject(sent["kind"], sent, namespace="default"))
    return [(f.rule, f.severity, f.message) for f in verdict.findings if f.rule in ("GS010", "GS011")]


def _pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return workload("Pod", pod_spec(*containers, **spec), name="p")


UNDOCUMENTED = ("is not a value cGPU documents (true or 1 turn its memory isolation off, false or 0 leave it on) "
                "and cGPU's parser is not published, so it may take it as true; write one of those four")


@pytest.mark.parametrize(("value", "judged"), [("true", "true"), ("1", "true"), ("TRUE", "true"), (" True\n", "true"),
                                               ("false", "false"), ("0", "false"), ("", "false"), (" FALSE ", "false"),
                                               ("yes", "undocumented"), ("t", "undocumented"), ("on", "undocumented"),
                                               ("y", "undocumented"), ("T", "undocumented"), ("2", "undocumented")])
def test_cgpu_disable_values_true_and_1_in_any_case_false_and_0_pass_others_are_warned(value, judged):
    pod = _pod(container("app", limits={MEM: 2}, env=[{"name": "CGPU_DISABLE", "value": value}]))
    strict = Engine(Settings(rules={"GS011": {"severity": "deny"}}))
    for engine, severity in ((ENGINE, "warn"), (strict, "deny")):
        found = findings(pod, engine)
        if judged == "true":
            assert found == [("GS011", severity, f'GS011: Pod default/p container "app": env CGPU_DISABLE={value} '
                                                 f"turns {DISABLES}")]
        elif judged == "false":
            assert found == []
        else:  # a warning naming the value, under deny too: cGPU's parser cannot be read
            assert found == [("GS011", "warn", f'GS011: Pod default/p container "app": env CGPU_DISABLE={value} '
                                               f"{UNDOCUMENTED}")]


def test_cgpu_disable_matters_only_where_cgpu_isolates_gpu_memory():
    env = [{"name": "CGPU_DISABLE", "value": "true"}]
    assert findings(_pod(container("app", limits={WHOLE: 1}, env=env), container("web", env=env))) == []
    assert findings(_pod(container("app", limits={MEM: 2}, env=[
        {"name": "CGPU_DISABLE", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]))) == [
        ("GS011", "warn", f'GS011: Pod default/p container "app": env CGPU_DISABLE=<from secretKeyRef> may turn '
                          f"{DISABLES}")]


def test_mps_variables_are_judged_where_the_pod_may_run_on_mps_nodes():
    env = [{"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/tmp/nvidia-mps"}]
    assert findings(_pod(container("app", limits={MEM: 2}, env=env)))  # no nodeSelector: any sharing node
    assert findings(_pod(container("app", limits={MEM: 2}, env=env), nodeSelector={"ack.node.gpu.schedule": "mps"}))
    assert findings(_pod(container("app", limits={MEM: 2}, env=env),
                         nodeSelector={"ack.node.gpu.schedule": "cgpu"})) == []
    assert findings(_pod(container("app", limits={WHOLE: 1}, env=env))) == []  # the device plugin sets them for gpu-mem
    assert findings(_pod(container("mps-client", env=env))) == []  # e.g. a GPU-free tool beside the MPS daemon


def test_a_long_value_is_shown_by_its_length():
    [(_, _, message)] = findings(_pod(container("app", limits={MEM: 2}, env=[
        {"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "9" * 100_000}])))
    assert message == \
        f'GS010: Pod default/p container "app": env ALIYUN_COM_GPU_MEM_DEV=<100000 characters> {OVERRIDES}'


def test_device_plugin_variables_are_refused_in_a_gpu_free_container_too():
    assert findings(_pod(container("app", limits={MEM: 2}), container("helper", env=[
        {"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "2"}]))) == [
        ("GS010", "deny", f'GS010: Pod default/p container "helper": env ALIYUN_COM_GPU_MEM_CONTAINER=2 {OVERRIDES}')]


def test_names_follow_the_config():
    engine = Engine(Settings(names={"env": {"device_plugin": ["VENDOR_GPU_SLICE"], "visible_devices": "GPU_DEVS"}}))
    pod = _pod(container("app", limits={MEM: 2}, env=[{"name": "VENDOR_GPU_SLICE", "value": "1"},
                                                      {"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "1"},
                                                      {"name": "GPU_DEVS", "value": "all"}]))
    assert [m.split(": env ")[1].split(" ")[0] for _, _, m in findings(pod, engine)] == ["VENDOR_GPU_SLICE=1",
                                                                                        "GPU_DEVS=all"]


def test_a_name_listed_twice_in_the_config_is_refused(tmp_path):
    config = write_yaml(tmp_path / "config.yaml", {"names": {"env": {"mps": ["CGPU_DISABLE"]}}})
    done = run_gpushare("check", "--config", config, tmp_path)
    assert done.returncode == 2 and "each variable is judged one way, so it is listed once: CGPU_DISABLE" in done.stderr


@pytest.mark.parametrize(("env", "field", "why"), [
    ({"name": "CGPU_DISABLE", "value": True}, "env[0].value", "must be a string, got bool"),
    ({"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": "all"}, "env[0].valueFrom", "must be an object, got str"),
    ("CGPU_DISABLE=true", "env[0]", "must be an object, got str"),
])
def test_a_malformed_env_is_a_clean_error_with_its_line(tmp_path, env, field, why):
    path = write_yaml(tmp_path / "pod.yaml", _pod(container("app", limits={MEM: 2}, env=[env])))
    done = run_gpushare("check", path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"spec.containers[0].{field}: {why}" in done.stderr and f"{path}:" in done.stderr
