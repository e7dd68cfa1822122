"""GS010 and GS011, round two, through the real server (default and hardened settings) and
``gpushare check``: debug containers added by ``kubectl debug`` (the API server's real review of the
pods/ephemeralcontainers subresource, tests/data/kubectl-debug), values judged after the kubelet's
``$(VAR)`` expansion in a Pod, a workload template, an init container, a native sidecar and an
ephemeral container; envFrom in a GPU-free container reported by check only; CGPU_DISABLE values
cGPU does not document warned."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.check_helpers import check_json, write_yaml
from tests.support.helpers import admission_review, gpushare_server
from tests.support.manifests import MEM, container, pod_spec, workload

pytestmark = pytest.mark.processes

DATA = Path(__file__).parents[1] / "data" / "kubectl-debug"
OVERRIDES = "overrides what the GPU-sharing device plugin sets; remove it"
EXPOSES = "GPUs the device plugin did not assign to this container; remove it or set none or void"
UNASKED = "the node's GPUs to a container that requests none; set none or void, or have an admin exempt the pod"
DISABLES = ("off cGPU memory isolation: the container can use all of its card's memory; remove it, or have an "
            "admin exempt the pod")
HARDENED = {"rules": {"GS011": {"severity": "deny"}}, "isolation": {"env_from": "deny"},
            "exemptions": {"grants": [{"name": "sre-debugging", "namespace": "sre", "names": "*", "rules": ["GS011"],
                                       "reason": "SREs run nvidia-smi in debug containers",
                                       "expires": "2999-12-31"}]}}
DEBUGGED = 'Pod team-a/cuda-train-6b9c7f5d8-x2kqp ephemeral container "debugger-8ztsd"'


@pytest.fixture(scope="module")
def hardened(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("hardened")
    config = write_yaml(workdir / "config.yaml", HARDENED)
    with gpushare_server(workdir, "--config", str(config)) as running, running.session() as session:
        yield running, session


def _answer(server, session, review: dict[str, Any]) -> dict[str, Any]:
    reply = server.post_json("/validate", review, session)
    assert reply.status_code == 200, reply.text
    return reply.json()["response"]


def _warned(response: dict[str, Any]) -> list[str]:
    """The warnings whole: one past the API server's 256 characters is sent shortened, and whole in the
    review's audit annotations."""
    whole = [text for key, texts in response["auditAnnotations"].items() if key.startswith("warning.")
             for text in texts.split(" | ")]
    return [w for w in response.get("warnings", []) if "…" not in w] + whole


def _both(server, session, hardened, review: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return _answer(server, session, review), _answer(*hardened, review)


# -- kubectl debug: the API server's review of pods/ephemeralcontainers -----------------------------------

def debug_review() -> dict[str, Any]:
    """``kubectl debug -it cuda-train-... --image=busybox:1.36 --target=cuda --env=NVIDIA_VISIBLE_DEVICES=all``
    as the API server sends it (origin and shape: tests/data/SOURCES.md)."""
    return json.loads((DATA / "ephemeralcontainers-review.json").read_text())


def _debugger(review: dict[str, Any], env: list[dict[str, Any]] | None, **more: Any) -> dict[str, Any]:
    """The review with the added debug container's env replaced (None: no env, as a plain kubectl debug)."""
    review = copy.deepcopy(review)
    added = review["request"]["object"]["spec"]["ephemeralContainers"][-1]
    if env is None:
        added.pop("env")
    else:
        added["env"] = env
    added.update(more)
    return review


def test_the_debug_review_is_the_subresource_update_with_whole_pods():
    request = debug_review()["request"]
    assert (request["operation"], request["subResource"], request["kind"]["kind"]) == ("UPDATE", "ephemeralcontainers",
                                                                                       "Pod")
    assert "ephemeralContainers" not in request["oldObject"]["spec"]
    assert request["object"]["spec"]["containers"] == request["oldObject"]["spec"]["containers"]


def test_a_debug_container_exposing_every_card_is_warned_and_denied_when_hardened(server, session, hardened):
    message = f"GS011: {DEBUGGED}: env NVIDIA_VISIBLE_DEVICES=all exposes {UNASKED}"
    default, strict = _both(server, session, hardened, debug_review())
    assert default["allowed"] is True and default["warnings"] == [message]
    assert strict["allowed"] is False and strict["status"]["message"] == message
    assert strict["auditAnnotations"]["denied"] == "GS011"


def test_a_debug_container_exposing_gpus_passes_where_an_admin_grants_it(hardened):
    review = debug_review()
    request = review["request"]
    request["namespace"] = "sre"
    for pod in (request["object"], request["oldObject"]):
        pod["metadata"]["namespace"] = "sre"
    granted = _answer(*hardened, review)
    assert granted["allowed"] is True and "warnings" not in granted
    assert granted["auditAnnotations"]["exempted_by"] == "grant:sre-debugging"
    # The grant covers GS011 only: forging the device plugin's variables is still refused.
    forged = _debugger(review, [{"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "16"}])
    assert _answer(*hardened, forged)["allowed"] is False


def test_a_debug_container_forging_its_size_is_denied(server, session, hardened):
    review = _debugger(debug_review(), [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "16"}])
    for response in _both(server, session, hardened, review):
        assert response["allowed"] is False
        assert response["status"]["message"] == \
            f"GS010: {DEBUGGED}: env ALIYUN_COM_GPU_MEM_CONTAINER=16 {OVERRIDES}"


def test_a_debug_container_with_no_judged_variable_is_admitted_without_a_word(server, session, hardened):
    for env in (None, [{"name": "TERM", "value": "xterm"}], [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]):
        for response in _both(server, session, hardened, _debugger(debug_review(), env)):
            assert response["allowed"] is True and "warnings" not in response, env
            assert response["auditAnnotations"]["rules"] == ""


def test_a_debug_container_already_in_the_pod_is_not_judged_again(server, session, hardened):
    """A second kubectl debug re-sends the first debug container (admitted under the default settings,
    or before the webhook was installed): only the one it adds is judged."""
    first = debug_review()["request"]["object"]
    review = _debugger(debug_review(), None)
    request = review["request"]
    request["oldObject"] = copy.deepcopy(first)
    request["object"] = copy.deepcopy(first)
    request["object"]["spec"]["ephemeralContainers"].append({
        "name": "debugger-q4w7n", "image": "busybox:1.36", "resources": {}, "terminationMessagePath":
        "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
        "stdin": True, "tty": True, "targetContainerName": "cuda"})
    for response in _both(server, session, hardened, review):
        assert response["allowed"] is True and "warnings" not in response
    # Its own variable is judged, the earlier container's still not.
    request["object"]["spec"]["ephemeralContainers"][-1]["env"] = [{"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "15"}]
    denied = _answer(*hardened, review)
    assert denied["status"]["message"] == (f'GS010: Pod team-a/cuda-train-6b9c7f5d8-x2kqp ephemeral container '
                                           f'"debugger-q4w7n": env ALIYUN_COM_GPU_MEM_DEV=15 {OVERRIDES}')


def test_only_the_isolation_rules_judge_a_debug_request(server, session, hardened):
    """The pod's own containers are not judged again on kubectl debug's request: a pod admitted before the
    webhook (here asking for an invalid 1.5 GiB) can still be debugged."""
    review = _debugger(debug_review(), None)
    for pod in (review["request"]["object"], review["request"]["oldObject"]):
        pod["spec"]["containers"][0]["resources"] = {"limits": {MEM: "1500m"}, "requests": {MEM: "1500m"}}
        pod["spec"]["containers"][0]["env"][0]["value"] = "15"
    for response in _both(server, session, hardened, review):
        assert response["allowed"] is True and "warnings" not in response


@pytest.mark.parametrize("spoiled", [
    {"name": {"not": "a name"}}, {"name": 7}, {}, "debugger", None,
], ids=["object name", "number name", "no name", "a string", "null"])
def test_a_malformed_debug_container_is_answered_never_a_server_error(server, session, spoiled):
    review = debug_review()
    for pod in (review["request"]["object"], review["request"]["oldObject"]):
        pod["spec"].setdefault("ephemeralContainers", []).insert(0, copy.deepcopy(spoiled))
    reply = server.post_json("/validate", review, session)
    assert reply.status_code in (200, 400), reply.text
    if reply.status_code == 200:  # the container it adds is still judged
        assert reply.json()["response"]["warnings"][0].endswith(f"exposes {UNASKED}")
    else:
        assert "Traceback" not in reply.text and reply.json()["reason"]


def test_the_mutating_webhook_leaves_a_debug_request_alone(server, session):
    reply = server.post_json("/mutate", debug_review(), session)
    response = reply.json()["response"]
    assert response["allowed"] is True and "patch" not in response


def test_an_expanded_value_in_a_debug_container_is_judged_as_expanded(server, session, hardened):
    review = _debugger(debug_review(), [{"name": "CARDS", "value": "all"},
                                        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "$(CARDS)"}])
    message = f"GS011: {DEBUGGED}: env NVIDIA_VISIBLE_DEVICES=$(CARDS) (expands to all) exposes {UNASKED}"
    default, strict = _both(server, session, hardened, review)
    assert default["warnings"] == [message] and strict["status"]["message"] == message
    harmless = _debugger(debug_review(), [{"name": "CARDS", "value": "void"},
                                          {"name": "NVIDIA_VISIBLE_DEVICES", "value": "$(CARDS)"}])
    for response in _both(server, session, hardened, harmless):
        assert response["allowed"] is True and "warnings" not in response


def test_check_reads_ephemeral_containers_of_a_pod_manifest(tmp_path):
    pod = debug_review()["request"]["object"]
    code, report = check_json(write_yaml(tmp_path / "pod.yaml", pod))
    assert code == 0 and [(f["severity"], f["message"], f["field"]) for f in report["findings"]] == [
        ("warn", f"GS011: {DEBUGGED}: env NVIDIA_VISIBLE_DEVICES=all exposes {UNASKED}",
         "spec.ephemeralContainers[0].env[0]")]


# -- the kubelet's $(VAR) expansion, in every place a container is --------------------------------------

def _places(env: list[dict[str, Any]], env_from: list[dict[str, Any]] | None = None) -> list[tuple[str, dict, str]]:
    """(label, review, how messages name the container) for a container asking for gpu-mem that sets
    ``env``, in a Pod, a Deployment's template, an init container and a native sidecar."""
    extra = {"envFrom": env_from} if env_from else {}
    gpu = {MEM: 2}
    app = container("app", limits=gpu, env=env, **extra)
    init = container("init", limits=gpu, env=env, **extra)
    sidecar = {**container("sidecar", limits=gpu, env=env, **extra), "restartPolicy": "Always"}
    plain = container("app", limits=gpu)
    return [
        ("Pod", admission_review(workload("Pod", pod_spec(app), name="p")), 'Pod default/p container "app"'),
        ("Deployment", admission_review(workload("Deployment", pod_spec(app), name="d"), group="apps",
                                        resource="deployments"), 'Deployment default/d container "app"'),
        ("init container", admission_review(workload("Pod", pod_spec(plain, init=[init]), name="p")),
         'Pod default/p init container "init"'),
        ("native sidecar", admission_review(workload("Pod", pod_spec(plain, init=[sidecar]), name="p")),
         'Pod default/p init container "sidecar"'),
    ]


EXPANDS_TRUE = [{"name": "X", "value": "true"}, {"name": "CGPU_DISABLE", "value": "$(X)"}]
FROM_CONFIG_MAP = [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "x"}}},
                   {"name": "CGPU_DISABLE", "value": "$(X)"}]


@pytest.mark.parametrize(("env", "env_from", "shown", "verb"), [
    (EXPANDS_TRUE, None, "CGPU_DISABLE=$(X) (expands to true)", "turns"),
    (FROM_CONFIG_MAP, None, "CGPU_DISABLE=$(X) (expands to <X from configMapKeyRef>)", "may turn"),
    ([{"name": "CGPU_DISABLE", "value": "$(FLAG_X)"}], [{"prefix": "FLAG_", "configMapRef": {"name": "flags"}}],
     "CGPU_DISABLE=$(FLAG_X) (expands to <FLAG_X from envFrom>)", "may turn"),
    ([{"name": "CGPU_DISABLE", "value": "$(FLAGS_SERVICE_PORT)"}], None,
     "CGPU_DISABLE=$(FLAGS_SERVICE_PORT) (expands to <FLAGS_SERVICE_PORT from a service link>)", "may turn"),
], ids=["earlier entry", "valueFrom", "envFrom", "service link"])
def test_cgpu_disable_lifted_through_expansion_in_every_place(server, session, hardened, env, env_from, shown, verb):
    for place, review, label in _places(env, env_from):
        message = f"GS011: {label}: env {shown} {verb} {DISABLES}"
        default, strict = _both(server, session, hardened, review)
        assert default["allowed"] is True and _warned(default) == [message], place
        assert strict["allowed"] is False and strict["status"]["message"] == message, place


def test_visible_devices_through_expansion_in_every_place(server, session, hardened):
    env = [{"name": "GPU_LIST", "value": "0,1"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "$(GPU_LIST)"}]
    for place, review, label in _places(env):
        message = f"GS010: {label}: env NVIDIA_VISIBLE_DEVICES=$(GPU_LIST) (expands to 0,1) exposes {EXPOSES}"
        for response in _both(server, session, hardened, review):
            assert response["allowed"] is False and response["status"]["message"] == message, place


@pytest.mark.parametrize("env", [
    [{"name": "X", "value": "false"}, {"name": "CGPU_DISABLE", "value": "$(X)"}],  # expands to false
    [{"name": "D", "value": "void"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "$(D)"}],
    [{"name": "HOME_DIR", "value": "/home/app"}, {"name": "CACHE", "value": "$(HOME_DIR)/.cache"}],
], ids=["false", "hidden devices", "unjudged names"])
def test_harmless_expansion_is_admitted_without_a_warning(server, session, hardened, env):
    for place, review, _ in _places(env):
        for response in _both(server, session, hardened, review):
            assert response["allowed"] is True and "warnings" not in response, (place, response)


@pytest.mark.parametrize(("env", "shown"), [
    ([{"name": "CGPU_DISABLE", "value": "$(X)"}, {"name": "X", "value": "true"}], "CGPU_DISABLE=$(X)"),  # set later
    ([{"name": "CGPU_DISABLE", "value": "$$(X)"}, {"name": "X", "value": "1"}], "CGPU_DISABLE=$$(X) (expands to $(X))"),
    ([{"name": "CGPU_DISABLE", "value": "$(X"}, {"name": "X", "value": "1"}], "CGPU_DISABLE=$(X"),  # unclosed
], ids=["later", "escaped", "unclosed"])
def test_a_reference_the_kubelet_leaves_as_written_is_that_text(server, session, hardened, env, shown):
    """cGPU gets the text itself, which its documentation does not name: warned, not denied."""
    undocumented = ("is not a value cGPU documents (true or 1 turn its memory isolation off, false or 0 leave it on) "
                    "and cGPU's parser is not published, so it may take it as true; write one of those four")
    for place, review, label in _places(env):
        for response in _both(server, session, hardened, review):
            assert response["allowed"] is True and _warned(response) == [
                f"GS011: {label}: env {shown} {undocumented}"], place


def test_dry_run_and_check_judge_expansion_alike(server, session, tmp_path):
    pod = workload("Pod", pod_spec(container("app", limits={MEM: 2}, env=EXPANDS_TRUE)), name="p")
    message = f'GS011: Pod default/p container "app": env CGPU_DISABLE=$(X) (expands to true) turns {DISABLES}'
    reply = session.post(server.url + "/dry-run", data=json.dumps(pod), headers={"Content-Type": "application/json"},
                         timeout=15)
    [result] = reply.json()["results"]
    assert [w["message"] for w in result["warnings"]] == [message]
    code, report = check_json(write_yaml(tmp_path / "pod.yaml", pod))
    assert code == 0 and [(f["message"], f["field"]) for f in report["findings"]] == [
        (message, "spec.containers[0].env[1]")]


# -- envFrom in a GPU-free container: check and the audit only -------------------------------------------

GPU_FREE_ENV_FROM = ('may set NVIDIA_VISIBLE_DEVICES, exposing the node\'s GPUs to a container that requests none, '
                     'or what the GPU-sharing device plugin sets, unseen at admission; give the source a prefix, or '
                     'set NVIDIA_VISIBLE_DEVICES=void in env')


def test_env_from_in_a_gpu_free_container_is_warned_by_check_and_never_by_the_webhook(server, session, hardened,
                                                                                       tmp_path):
    spec = pod_spec(container("app", limits={MEM: 2}), container("web", envFrom=[{"configMapRef": {"name": "web"}}]))
    pod = workload("Pod", spec, name="p")
    code, report = check_json(write_yaml(tmp_path / "pod.yaml", pod), "--config",
                              write_yaml(tmp_path / "config.yaml", HARDENED))
    assert code == 0 and [(f["severity"], f["message"], f["field"]) for f in report["findings"]] == [
        ("warn", f'GS011: Pod default/p container "web": envFrom configMapRef "web" {GPU_FREE_ENV_FROM}',
         "spec.containers[1].envFrom")]
    for response in _both(server, session, hardened, admission_review(pod)):
        assert response["allowed"] is True and "warnings" not in response


# -- CGPU_DISABLE values cGPU does not document -------------------------------------------------------------

def test_an_undocumented_cgpu_disable_value_is_warned_also_when_gs011_denies(server, session, hardened):
    pod = workload("Pod", pod_spec(container("app", limits={MEM: 2}, env=[{"name": "CGPU_DISABLE", "value": "on"}])),
                   name="p")
    message = ('GS011: Pod default/p container "app": env CGPU_DISABLE=on is not a value cGPU documents (true or 1 '
               "turn its memory isolation off, false or 0 leave it on) and cGPU's parser is not published, so it "
               "may take it as true; write one of those four")
    for response in _both(server, session, hardened, admission_review(pod)):
        assert response["allowed"] is True and response["warnings"] == [message]


# The expansion itself, case by case: tests/domain/test_env_expansion.py (in process).


# -- the audit: running pods, from a snapshot and from the live list/watch ---------------------------------

def _audit_objects() -> list[dict[str, Any]]:
    from tests.support.cluster_objects import gpu_pod, node, plain_pod

    debugged = gpu_pod("debugged", mem=2, node_name="gpu-1", namespace="team-a")
    debugged["spec"]["ephemeralContainers"] = [{"name": "debugger-8ztsd", "image": "busybox:1.36", "env": [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]
    expanded = gpu_pod("expanded", mem=2, node_name="gpu-1", namespace="team-a")
    expanded["spec"]["containers"][0]["env"] = [{"name": "LANG", "value": "C"}, {"name": "X", "value": "true"},
                                                {"name": "CGPU_DISABLE", "value": "$(X)"}]
    linked = gpu_pod("linked", mem=2, node_name="gpu-1", namespace="team-a")
    linked["spec"]["enableServiceLinks"] = False  # $(WEB_SERVICE_PORT) then stays as written: undocumented
    linked["spec"]["containers"][0]["env"] = [{"name": "CGPU_DISABLE", "value": "$(WEB_SERVICE_PORT)"}]
    harmless = gpu_pod("harmless", mem=2, node_name="gpu-1", namespace="team-a")
    harmless["spec"]["containers"][0]["env"] = [{"name": "D", "value": "none"},
                                                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "$(D)"}]
    configured = plain_pod("configured", node_name="gpu-1", namespace="team-a")
    configured["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "web"}}]
    return [node("gpu-1", mode="cgpu", cards=2, card_gib=15), debugged, expanded, linked, harmless, configured]


AUDITED = {
    "debugged": f'GS011: Pod team-a/debugged ephemeral container "debugger-8ztsd": env NVIDIA_VISIBLE_DEVICES=all '
                f"exposes {UNASKED}",
    "expanded": f'GS011: Pod team-a/expanded container "cuda": env CGPU_DISABLE=$(X) (expands to true) '
                f"turns {DISABLES}",
    "linked": 'GS011: Pod team-a/linked container "cuda": env CGPU_DISABLE=$(WEB_SERVICE_PORT) is not a value cGPU '
              "documents (true or 1 turn its memory isolation off, false or 0 leave it on) and cGPU's parser is not "
              "published, so it may take it as true; write one of those four",
    "configured": f'GS011: Pod team-a/configured container "cuda": envFrom configMapRef "web" {GPU_FREE_ENV_FROM}',
}


def _audited(*args: Any) -> dict[str, str]:
    from tests.support.check_helpers import run_gpushare

    done = run_gpushare("audit", "--format", "json", *args)
    assert "Traceback" not in done.stderr, done.stderr
    return {f["object"]["name"]: f["message"] for f in json.loads(done.stdout)["findings"]
            if f["rule"] in ("GS010", "GS011")}


def test_the_audit_reports_debug_containers_expansion_and_gpu_free_env_from(tmp_path):
    import yaml

    from tests.support.fake_apiserver import FakeApiServer

    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": _audit_objects()}))
    assert _audited("--snapshot", snapshot) == AUDITED
    api = FakeApiServer().start()
    try:
        api.add(*_audit_objects())
        assert _audited("--kubeconfig", api.kubeconfig(tmp_path / "kubeconfig")) == AUDITED
    finally:
        api.stop()
