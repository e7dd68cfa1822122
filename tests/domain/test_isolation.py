"""What a pod sets in the variables the GPU-sharing device plugin and cGPU own, read in process from
real pod specs (policies/model/isolation.py): which containers and entries are kept and where, each
value as the runtimes read it (NVIDIA Container Toolkit's exact strings, cGPU's true and false), how
an entry is shown in a message, envFrom sources that may set a judged name, the ephemeral containers
``kubectl debug`` adds, values after the kubelet's expansion, and a malformed env named by its path.
The rules' words: tests/domain/test_isolation_findings.py; the real server: tests/server/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policies.model.env_expansion import RawEnv
from policies.model.isolation import (
    ContainerEnv,
    EnvEntry,
    EnvSource,
    added_ephemeral_envs,
    container_envs,
    env_from_gpu_free,
    envs_of,
    judged_names,
    service_links,
)
from policies.model.resources import ShapeError
from policies.model.settings import EnvNames
from tests.support.manifests import MEM, container, pod_spec
from webhook.settings import Settings

NAMES = Settings().names
DATA = Path(__file__).parents[1] / "data" / "kubectl-debug"


def _envs(spec: dict[str, Any]) -> tuple[ContainerEnv, ...]:
    return container_envs(spec, ("spec",), NAMES)


def _entries(env: list[dict[str, Any]], **more: Any) -> tuple[EnvEntry, ...]:
    [found] = _envs(pod_spec(container("app", limits={MEM: 2}, env=env, **more)))
    return found.entries


def test_every_judged_name_comes_from_the_settings():
    assert judged_names(NAMES.env) == {
        "ALIYUN_COM_GPU_MEM_DEV", "ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_MEM_IDX", "ALIYUN_COM_GPU_MEM_POD",
        "ALIYUN_COM_GPU_VISIBLE_DEVICES", "ALIYUN_COM_GPU_SCHD_WEIGHT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "CUDA_MPS_PIPE_DIRECTORY", "NVIDIA_VISIBLE_DEVICES", "CGPU_DISABLE"}
    other = EnvNames(device_plugin=("DP",), mps=("M",), visible_devices="V", disable_isolation="D")
    assert judged_names(other) == {"DP", "M", "V", "D"}
    assert judged_names(NAMES.env) == judged_names(Settings().names.env)  # settings read again: the same


def test_only_containers_that_set_a_judged_name_or_may_are_kept_in_order():
    spec = pod_spec(
        container("plain", env=[{"name": "LANG", "value": "C"}]),
        container("forged", limits={MEM: 2}, env=[{"name": "LANG", "value": "C"},
                                                   {"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "16"},
                                                   {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
        {"image": "busybox", "envFrom": [{"configMapRef": {"name": "cfg"}}]},
        container("prefixed", envFrom=[{"prefix": "APP_", "configMapRef": {"name": "app"}}]),
        init=[container("warm", env=[{"name": "CGPU_DISABLE", "value": "1"}])],
        ephemeralContainers=[{"name": "debugger", "image": "busybox", "env": [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}])
    found = _envs(spec)
    assert [(c.group, c.index, c.name, c.noun, c.path) for c in found] == [
        ("initContainers", 0, "warm", "init container", ("spec", "initContainers", 0)),
        ("containers", 1, "forged", "container", ("spec", "containers", 1)),
        ("containers", 2, "containers[2]", "container", ("spec", "containers", 2)),
        ("ephemeralContainers", 0, "debugger", "ephemeral container", ("spec", "ephemeralContainers", 0))]
    forged = found[1]
    assert forged.entries == (EnvEntry(1, "ALIYUN_COM_GPU_MEM_DEV", "16"), EnvEntry(2, "NVIDIA_VISIBLE_DEVICES", "all"))
    assert [e.index for e in forged.entries] == [1, 2] and forged.env_from == ()
    assert found[2].entries == () and found[2].env_from == (EnvSource("configMapRef", "cfg"),)
    assert (forged.context, forged.other_prefixes) == ((), ())
    # a prefix no judged name starts with cannot set one: nothing kept
    assert _envs(pod_spec(container("p", envFrom=[{"prefix": "APP_", "secretRef": {"name": "s"}}]))) == ()


@pytest.mark.parametrize("spec", [None, {}, {"containers": "x"}, {"containers": ["x", {"name": "a"}]},
                                  {"containers": [{"name": "a", "env": [], "envFrom": []}]}], ids=str)
def test_a_spec_without_judged_env_has_none(spec):
    assert container_envs(spec, ("spec",), NAMES) == ()


@pytest.mark.parametrize(("env", "shown"), [
    ([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], "NVIDIA_VISIBLE_DEVICES=all"),
    ([{"name": "NVIDIA_VISIBLE_DEVICES"}], "NVIDIA_VISIBLE_DEVICES="),
    ([{"name": "NVIDIA_VISIBLE_DEVICES", "value": None}], "NVIDIA_VISIBLE_DEVICES="),
    ([{"name": "CGPU_DISABLE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}],
     "CGPU_DISABLE=<from configMapKeyRef>"),
    ([{"name": "CGPU_DISABLE", "valueFrom": {}}], "CGPU_DISABLE=<from valueFrom>"),
    ([{"name": "ALIYUN_COM_GPU_MEM_IDX", "value": "x" * 64}], "ALIYUN_COM_GPU_MEM_IDX=" + "x" * 64),
    ([{"name": "ALIYUN_COM_GPU_MEM_IDX", "value": "x" * 65}], "ALIYUN_COM_GPU_MEM_IDX=<65 characters>"),
    ([{"name": "F", "value": "true"}, {"name": "CGPU_DISABLE", "value": "$(F)"}],
     "CGPU_DISABLE=$(F) (expands to true)"),
    ([{"name": "CGPU_DISABLE", "value": "$(UNSET)"}], "CGPU_DISABLE=$(UNSET)"),
    ([{"name": "CGPU_DISABLE", "value": "$$1"}], "CGPU_DISABLE=$$1 (expands to $1)"),
    ([{"name": "F", "value": "!x"}, {"name": "CGPU_DISABLE", "value": "$(F)"}], "CGPU_DISABLE=$(F) (expands to !x)"),
    ([{"name": "S", "valueFrom": {"secretKeyRef": {}}}, {"name": "CGPU_DISABLE", "value": "$(S)"}],
     "CGPU_DISABLE=$(S) (expands to <S from secretKeyRef>)"),
    ([{"name": "L", "value": "y" * 70}, {"name": "CGPU_DISABLE", "value": "$(L)"}],
     "CGPU_DISABLE=$(L) (expands to <70 characters>)"),
    ([{"name": "CGPU_DISABLE", "value": "$(X)" + "z" * 61}], "CGPU_DISABLE=<65 characters>"),
], ids=str)
def test_an_entry_is_shown_as_written_and_as_expanded(env, shown):
    assert _entries(env)[-1].shown == shown


@pytest.mark.parametrize(("value", "exposes"), [
    ("all", True), ("0", True), ("0,1", True), ("GPU-5c3b1a2e", True), ("", False), ("void", False),
    ("none", False), ("None", True), ("VOID", True), (" none", True),  # the toolkit compares the exact strings
])
def test_visible_devices_expose_gpus_unless_exactly_hidden(value, exposes):
    [entry] = _entries([{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}])
    assert entry.exposes_gpus is exposes


def test_a_value_read_at_run_time_is_judged_as_the_worst():
    [entry] = _entries([{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}])
    assert entry.value is None and entry.source == "fieldRef"
    assert entry.exposes_gpus and entry.true and not entry.undocumented


@pytest.mark.parametrize(("value", "true", "undocumented"), [
    ("true", True, False), ("1", True, False), ("TRUE", True, False), (" True\n", True, False),
    ("\t1 ", True, False), ("false", False, False), ("0", False, False), ("", False, False),
    (" FALSE ", False, False), ("\r\n", False, False), ("on", False, True), ("yes", False, True),
    ("t", False, True), ("11", False, True), ("true1", False, True), ("10", False, True), ("00", False, True),
    ("x true", False, True), ("false false", False, True),
], ids=repr)
def test_cgpu_disable_is_true_false_or_undocumented(value, true, undocumented):
    [entry] = _entries([{"name": "CGPU_DISABLE", "value": value}])
    assert (entry.true, entry.undocumented) == (true, undocumented)


def test_entries_compare_by_what_they_set_not_where():
    assert EnvEntry(0, "CGPU_DISABLE", "1") == EnvEntry(5, "CGPU_DISABLE", "1")
    assert EnvEntry(0, "CGPU_DISABLE", "1") != EnvEntry(0, "CGPU_DISABLE", "true")


def test_env_from_sources_that_may_set_a_judged_name():
    env_from = [{"configMapRef": {"name": "cfg"}}, {"prefix": "ALIYUN_", "secretRef": {"name": "s"}},
                {"prefix": "APP_", "configMapRef": {"name": "app"}}, {"prefix": "", "configMapRef": "x"},
                {"prefix": None, "configMapRef": {}}, {"prefix": "CUDA_MPS_"}, {"prefix": "NVIDIA_VISIBLE_DEVICES"}]
    [found] = _envs(pod_spec(container("app", envFrom=env_from)))
    assert found.env_from == (EnvSource("configMapRef", "cfg"), EnvSource("secretRef", "s", "ALIYUN_"),
                              EnvSource("source", ""), EnvSource("configMapRef", ""),
                              EnvSource("source", "", "CUDA_MPS_"),
                              EnvSource("source", "", "NVIDIA_VISIBLE_DEVICES"))
    assert [s.shown for s in found.env_from[:3]] == ['configMapRef "cfg"', 'secretRef "s"', 'source ""']
    assert found.other_prefixes == ()  # only kept beside an expanded value


def test_what_a_gpu_free_container_envfrom_may_do():
    assert env_from_gpu_free("NVIDIA_VISIBLE_DEVICES") == (
        "may set NVIDIA_VISIBLE_DEVICES, exposing the node's GPUs to a container that requests none, or what the "
        "GPU-sharing device plugin sets, unseen at admission; give the source a prefix, or set "
        "NVIDIA_VISIBLE_DEVICES=void in env")


@pytest.mark.parametrize(("spec", "links"), [
    (None, True), ({}, True), ({"enableServiceLinks": True}, True), ({"enableServiceLinks": None}, True),
    ({"enableServiceLinks": False}, False), ({"enableServiceLinks": "false"}, True),
    ({"enableServiceLinks": 0}, True),  # only false itself turns them off (the API server refuses a 0)
], ids=str)
def test_service_links_are_on_unless_turned_off(spec, links):
    assert service_links(spec) is links


def test_an_expanded_value_keeps_the_whole_env_it_was_read_from():
    env = [{"name": "LANG", "value": "C"}, {"name": "FLAG", "valueFrom": {"configMapKeyRef": {}}},
           {"name": "odd"}, {"name": 7, "value": "x"}, {"name": "N", "value": 3},
           {"name": "CGPU_DISABLE", "value": "$(FLAG)"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "$(APP_X)"}]
    spec = pod_spec(container("app", limits={MEM: 2}, env=env,
                              envFrom=[{"prefix": "APP_", "configMapRef": {"name": "a"}},
                                       {"prefix": "ZZ_", "secretRef": {"name": "z"}}]))
    [found] = container_envs(spec, ("spec",), NAMES)
    assert found.context == (RawEnv("LANG", "C"), RawEnv("FLAG", None, "configMapKeyRef"), RawEnv("odd", ""),
                             RawEnv("", ""), RawEnv("N", ""), RawEnv("CGPU_DISABLE", "$(FLAG)"),
                             RawEnv("NVIDIA_VISIBLE_DEVICES", "$(APP_X)"))
    assert found.other_prefixes == ("APP_", "ZZ_")  # neither can set a judged name, both may set APP_X
    assert [(e.index, e.value, e.source, e.written) for e in found.entries] == [
        (5, None, "<FLAG from configMapKeyRef>", "$(FLAG)"), (6, None, "<APP_X from envFrom>", "$(APP_X)")]
    # a value without "$" is not expanded, and then no context is kept
    [plain] = container_envs(pod_spec(container("app", env=[{"name": "CGPU_DISABLE", "value": "1"}],
                                                envFrom=[{"prefix": "ZZ_", "configMapRef": {"name": "z"}}])),
                             ("spec",), NAMES)
    assert (plain.context, plain.other_prefixes, plain.entries[0].written) == ((), (), None)


def test_an_expansion_reads_the_pods_service_links():
    env = [{"name": "CGPU_DISABLE", "value": "$(WEB_SERVICE_PORT)"}]
    linked = _entries(env)
    unlinked = container_envs(pod_spec(container("app", env=env), enableServiceLinks=False), ("spec",), NAMES)
    assert linked[0].value is None and linked[0].source == "<WEB_SERVICE_PORT from a service link>"
    assert unlinked[0].entries[0].value == "$(WEB_SERVICE_PORT)"


def test_a_value_read_at_run_time_beside_an_expanded_one():
    entries = _entries([{"name": "CGPU_DISABLE", "valueFrom": {"secretKeyRef": {}}}, {"name": "X", "value": "0"},
                        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "$(X)"}, {"name": "ALIYUN_COM_GPU_MEM_IDX",
                                                                               "value": "2"}])
    assert [e.shown for e in entries] == ["CGPU_DISABLE=<from secretKeyRef>",
                                          "NVIDIA_VISIBLE_DEVICES=$(X) (expands to 0)", "ALIYUN_COM_GPU_MEM_IDX=2"]


def test_containers_after_one_without_env_or_malformed_are_read():
    spec = {"containers": ["x", {"name": "quiet", "image": "busybox"}, {"name": "empty", "env": []},
                          container("app", env=[{"name": "CGPU_DISABLE", "value": "1"}])]}
    assert [(c.name, c.index) for c in _envs(spec)] == [("app", 3)]


def test_the_same_name_twice_is_kept_twice():
    entries = _entries([{"name": "CGPU_DISABLE", "value": "0"}, {"name": "CGPU_DISABLE", "value": "1"}])
    assert [(e.index, e.value) for e in entries] == [(0, "0"), (1, "1")]


@pytest.mark.parametrize(("c", "message"), [
    ({"name": "a", "env": "X=1"}, "spec.containers[0].env: must be a list, got str"),
    ({"name": "a", "env": ["X=1"]}, "spec.containers[0].env[0]: must be an object, got str"),
    ({"name": "a", "env": [{"name": "LANG"}, ["CGPU_DISABLE"]]},
     "spec.containers[0].env[1]: must be an object, got list"),
    ({"name": "a", "env": [{"name": "CGPU_DISABLE", "valueFrom": "cm"}]},
     "spec.containers[0].env[0].valueFrom: must be an object, got str"),
    ({"name": "a", "env": [{"name": "CGPU_DISABLE", "value": 1}]},
     "spec.containers[0].env[0].value: must be a string, got int"),
    ({"name": "a", "envFrom": {"configMapRef": {}}}, "spec.containers[0].envFrom: must be a list, got dict"),
    ({"name": "a", "envFrom": ["cm"]}, "spec.containers[0].envFrom[0]: must be an object, got str"),
    ({"name": "a", "envFrom": [{"prefix": 1}]}, "spec.containers[0].envFrom[0].prefix: must be a string, got int"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_malformed_env_is_named_by_its_path(c, message):
    with pytest.raises(ShapeError) as raised:
        _envs({"containers": [c]})
    assert str(raised.value) == message


def test_names_of_another_type_are_no_judged_name():
    # an unhashable name (a list) and a number: neither is a judged name, and reading does not fail
    env = [{"name": ["CGPU_DISABLE"], "value": "1"}, {"name": 1, "value": "1"},
           {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert [(e.index, e.name) for e in _entries(env)] == [(2, "NVIDIA_VISIBLE_DEVICES")]
    assert _envs(pod_spec(container("a", env=[{"name": ["CGPU_DISABLE"], "value": "1"}]))) == ()


def test_a_nameless_container_is_named_by_its_place():
    [found] = envs_of([("containers", 3, {"env": [{"name": "CGPU_DISABLE", "value": "1"}]}, ("spec", "x"), "node")],
                      NAMES)
    assert (found.name, found.index, found.path) == ("node", 3, ("spec", "x"))
    [named] = envs_of([("containers", 0, {"name": 5, "env": [{"name": "CGPU_DISABLE", "value": "1"}]}, (), "n")],
                      NAMES)
    assert named.name == "5"
    # the pod's service-link variables are assumed unless the caller says otherwise
    [linked] = envs_of([("containers", 0, {"env": [{"name": "CGPU_DISABLE", "value": "$(WEB_SERVICE_HOST)"}]}, (),
                         "c")], NAMES)
    assert linked.entries[0].source == "<WEB_SERVICE_HOST from a service link>"


def _debug_request() -> dict[str, Any]:
    """``kubectl debug --env=NVIDIA_VISIBLE_DEVICES=all`` as the API server sends it (tests/data/SOURCES.md)."""
    return json.loads((DATA / "ephemeralcontainers-review.json").read_text())["request"]


def test_kubectl_debug_adds_ephemeral_containers_only_those_are_read():
    request = _debug_request()
    spec, old = request["object"]["spec"], request["oldObject"]
    [added] = added_ephemeral_envs(spec, old, ("spec",), NAMES)
    assert (added.group, added.index, added.name, added.path) == (
        "ephemeralContainers", 0, "debugger-8ztsd", ("spec", "ephemeralContainers", 0))
    assert [(e.name, e.value) for e in added.entries] == [("NVIDIA_VISIBLE_DEVICES", "all")]
    # the pod as it was already had it: nothing added
    assert added_ephemeral_envs(spec, {"spec": spec}, ("spec",), NAMES) == ()


def test_an_ephemeral_container_is_added_when_the_old_pod_has_none_by_its_name():
    debugger = {"name": "dbg", "image": "busybox", "env": [{"name": "CGPU_DISABLE", "value": "1"}]}
    other = {"name": "old", "image": "busybox", "env": [{"name": "CGPU_DISABLE", "value": "1"}]}
    spec = {"containers": [], "ephemeralContainers": [other, debugger], "enableServiceLinks": False}
    for old in (None, {}, {"spec": "x"}, {"spec": {}}, {"spec": {"ephemeralContainers": "x"}}):
        assert [c.name for c in added_ephemeral_envs(spec, old, ("spec",), NAMES)] == ["old", "dbg"]
    had = {"spec": {"ephemeralContainers": [{"name": "old"}, "junk", {"name": 3}]}}
    [added] = added_ephemeral_envs(spec, had, ("spec",), NAMES)
    assert (added.name, added.index) == ("dbg", 1)
    # a container whose name is no string matches no container of the old pod
    nameless = {"containers": [], "ephemeralContainers": [{"name": 3, "env": debugger["env"]}]}
    assert [c.name for c in added_ephemeral_envs(nameless, had, ("spec",), NAMES)] == ["3"]
    for bare in (None, {}, {"ephemeralContainers": "x"}):
        assert added_ephemeral_envs(bare, had, ("spec",), NAMES) == ()


def test_an_added_ephemeral_container_is_expanded_with_the_pods_service_links():
    debugger = {"name": "dbg", "env": [{"name": "CGPU_DISABLE", "value": "$(WEB_SERVICE_HOST)"}]}
    for links, value in ((True, None), (False, "$(WEB_SERVICE_HOST)")):
        spec = {"containers": [], "ephemeralContainers": [debugger], "enableServiceLinks": links}
        [added] = added_ephemeral_envs(spec, None, ("spec",), NAMES)
        assert added.entries[0].value == value
