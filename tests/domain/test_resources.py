"""Shared-GPU requests read from pods and workload templates (policies/model/resources.py), in process, on
pod specs as the API server sends them: where each kind keeps its pod spec and labels, what a container
asks for (the limit, else the request; a zero is no request), the effective request kube-scheduler counts
(Kubernetes documentation, "Effective Pod requests and limits"), the multi-GPU label's cards (ACK "Use cGPU
to achieve GPU sharing based on multiple GPUs"), and every malformed shape named by its path."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from policies.model.resources import (
    POD_SPEC_PATHS,
    WORKLOAD_KINDS,
    ShapeError,
    cards_per_container,
    container_noun,
    container_requests,
    effective_request,
    memory_share,
    pod_labels,
    pod_spec,
    read_values,
    render_path,
    watched_resources,
    whole_gib,
)
from policies.model.settings import Names

NAMES = Names()
R = NAMES.resources
MEM, CORE, GPU, TOPOLOGY = R.gpu_mem, R.gpu_core, R.gpu_exclusive, R.gpu_topology


def requests_of(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None, names: Names = NAMES):
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    return container_requests(spec, ("spec",), names)


def c(name: str, limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
      **more: Any) -> dict[str, Any]:
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v is not None}
    return {"name": name, "image": "cuda:12", "resources": resources, **more}


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (("spec", "containers", 0, "resources", "limits", MEM),
         'spec.containers[0].resources.limits["aliyun.com/gpu-mem"]'),
        (("metadata", "labels", "ack.node.gpu.schedule"), 'metadata.labels["ack.node.gpu.schedule"]'),
        (("spec", "tasks", 1, "template"), "spec.tasks[1].template"),
        ((0, "name"), "[0].name"),
        (("a/b",), '["a/b"]'),
        ((), ""),
    ],
)
def test_render_path_as_kubectl_explains_it(path, text):
    assert render_path(path) == text


def test_container_nouns():
    assert [container_noun(g) for g in ("containers", "initContainers", "ephemeralContainers", "resources")] == [
        "container", "init container", "ephemeral container", "container"]


def test_where_each_kind_keeps_its_pod_spec_and_labels():
    template = {"metadata": {"labels": {"app": "train", "replicas": 2}}, "spec": {"containers": []}}
    objects = {
        "Pod": {"metadata": {"labels": {"app": "train"}}, "spec": {"containers": []}},
        "PodTemplate": {"template": template},
        "Deployment": {"spec": {"template": template}},
        "CronJob": {"spec": {"jobTemplate": {"spec": {"template": template}}}},
    }
    for kind, obj in objects.items():
        spec, path = pod_spec(obj, kind)
        assert spec == {"containers": []} and path == POD_SPEC_PATHS[kind], kind
        assert pod_labels(obj, kind) == {"app": "train"}, kind  # only string values are labels
    assert pod_spec({"spec": {}}, "Deployment") == (None, ("spec", "template", "spec"))
    assert pod_spec({}, "Pod") == (None, ("spec",))
    assert pod_labels({"spec": {"template": {"metadata": {"labels": ["app"]}}}}, "Deployment") == {}
    assert pod_labels({"spec": "x"}, "Deployment") == {}
    assert pod_labels({}, "Pod") == {}
    assert "Pod" not in WORKLOAD_KINDS and {"Deployment", "CronJob", "PodTemplate"} <= WORKLOAD_KINDS


@pytest.mark.parametrize(
    ("obj", "kind", "message"),
    [
        ({"spec": []}, "Pod", "spec: must be an object, got list"),
        ({"spec": {"template": "x"}}, "Deployment", "spec.template: must be an object, got str"),
        ({"spec": {"jobTemplate": {"spec": {"template": {"spec": 3}}}}}, "CronJob",
         "spec.jobTemplate.spec.template.spec: must be an object, got int"),
    ],
)
def test_a_pod_spec_of_the_wrong_shape_is_named_by_its_path(obj, kind, message):
    with pytest.raises(ShapeError) as raised:
        pod_spec(obj, kind)
    assert str(raised.value) == message


def test_what_a_container_asks_for():
    [fetch, main, side] = requests_of(  # init containers first, as the scheduler starts them
        c("main", {MEM: "4", CORE: "30"}, {MEM: "4"}),
        c("side", None, {MEM: "2", GPU: "0"}),
        init=[c("fetch", {TOPOLOGY: "1"}, {MEM: "0"}), c("plain", {"cpu": "1"})],
    )
    assert (main.name, main.group, main.index, main.path, main.is_app, main.sidecar) == (
        "main", "containers", 0, ("spec", "containers", 0), True, False)
    assert (main.count(MEM), main.count(CORE), main.count(GPU)) == (4, 30, None)
    assert (main.amount(MEM), main.amount(GPU)) == (Decimal(4), None)
    assert main.value(MEM) is main.limits[MEM] and main.value(GPU) is None
    assert main.asked() == {MEM, CORE} and main.written() == {MEM, CORE}
    # The request, when no limit is written; a zero is no request, but it is written.
    assert side.value(MEM) is side.requests[MEM] and side.count(MEM) == 2 and side.amount(MEM) == 2
    assert side.has(MEM) and not side.has(GPU) and not side.has(CORE)
    assert side.asked() == {MEM} and side.written() == {MEM, GPU}
    assert (fetch.group, fetch.is_app, fetch.asked(), fetch.written()) == ("initContainers", False, {TOPOLOGY},
                                                                          {MEM, TOPOLOGY})
    assert not fetch.has(MEM)


def test_a_value_that_is_no_quantity_counts_as_named():
    [main] = requests_of(c("main", {MEM: "lots"}))
    value = main.value(MEM)
    assert value is not None and (value.quantity, value.error, value.whole_count) == (
        None, "'lots' is not a quantity", None)
    assert main.has(MEM) and main.asked() == {MEM}
    assert (main.count(MEM), main.amount(MEM), main.memory(NAMES)) == (None, None, None)


@pytest.mark.parametrize(
    ("raw", "memory", "share_over_2", "memory_over_2"),
    [("4", 4, 2, 4), ("2000m", 2, 1, 2), ("1024", 1024, 512, 1024), ("1025", None, None, 1025),
     ("2048", None, 1024, 2048), ("2049", None, None, None), ("5.5", None, None, None), ("0", None, None, None),
     ("7", 7, None, 7)],
)
def test_the_memory_gs003_accepts_and_what_the_device_plugin_sets(raw, memory, share_over_2, memory_over_2):
    [main] = requests_of(c("main", {MEM: raw}))
    assert main.memory(NAMES) == memory
    assert memory_share(main, 1, NAMES) == memory
    # Over two cards the pod may ask up to twice the largest card, N/2 on each (when whole).
    assert main.memory(NAMES, 2) == memory_over_2
    assert memory_share(main, 2, NAMES) == share_over_2


def test_no_memory_share_for_an_init_container():
    [init] = [r for r in requests_of(c("main"), init=[c("warm", {MEM: "4"})])]
    assert init.memory(NAMES) == 4 and memory_share(init, 1, NAMES) is None


def test_containers_without_gpu_requests_are_not_kept():
    spec = {"containers": [c("cpu", {"cpu": "1"}), {"name": "bare"}, c("empty"), c("gpu", {MEM: "1"})],
            "initContainers": [c("sidecar", {MEM: "1"}, restartPolicy="Always"),
                               c("never", {MEM: "1"}, restartPolicy="Never"), {"resources": {"limits": {MEM: "2"}}}]}
    found = container_requests(spec, ("spec", "template", "spec"), NAMES)
    assert [(r.name, r.group, r.index, r.path, r.sidecar) for r in found] == [
        ("sidecar", "initContainers", 0, ("spec", "template", "spec", "initContainers", 0), True),
        ("never", "initContainers", 1, ("spec", "template", "spec", "initContainers", 1), False),
        ("initContainers[2]", "initContainers", 2, ("spec", "template", "spec", "initContainers", 2), False),
        ("gpu", "containers", 3, ("spec", "template", "spec", "containers", 3), False),
    ]
    assert container_requests(None, ("spec",), NAMES) == []
    assert container_requests({}, ("spec",), NAMES) == []
    assert container_requests({"containers": None}, ("spec",), NAMES) == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"containers": {"name": "x"}}, "spec.containers: must be a list, got dict"),
        ({"initContainers": "x"}, "spec.initContainers: must be a list, got str"),
        ({"containers": ["x"]}, "spec.containers[0]: must be an object, got str"),
        ({"containers": [{"name": "a", "resources": []}]}, "spec.containers[0].resources: must be an object, got list"),
        ({"containers": [{"name": "a", "resources": {"limits": []}}]},
         "spec.containers[0].resources.limits: must be an object, got list"),
        ({"containers": [{"name": "a", "resources": {"requests": 0}}]},
         "spec.containers[0].resources.requests: must be an object, got int"),
        ({"containers": [{"name": "a", "resources": {"limits": "4"}}]},
         "spec.containers[0].resources.limits: must be an object, got str"),
    ],
)
def test_a_malformed_container_is_named_by_its_path(spec, message):
    with pytest.raises(ShapeError) as raised:
        container_requests(spec, ("spec",), NAMES)
    assert str(raised.value) == message
    assert raised.value.path[0] == "spec"


def test_only_the_watched_resources_are_read():
    watched = watched_resources(NAMES)
    assert watched == frozenset({MEM, CORE, GPU, TOPOLOGY})  # not the node-only gpu-count
    block = {"limits": {MEM: "1", R.gpu_count: "2", "cpu": "1"}, "requests": {}}
    assert list(read_values(block, "limits", ("r",), watched)) == [MEM]
    assert read_values(block, "requests", ("r",), watched) == {}
    assert read_values(block, "claims", ("r",), watched) == {}
    renamed = Names(resources={"gpu_mem": "example.com/vmem"})
    assert MEM not in watched_resources(renamed) and "example.com/vmem" in watched_resources(renamed)
    assert watched_resources(NAMES) == watched


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        ([c("a", {GPU: "1"}), c("b", {GPU: "2"})], [], 3),
        ([c("a", {GPU: "1"})], [c("i", {GPU: "4"})], 4),
        ([c("a", {GPU: "1"})], [c("s", {GPU: "1"}, restartPolicy="Always"), c("i", {GPU: "3"})], 4),
        ([c("a", {GPU: "2"})], [c("i", {GPU: "1"}), c("s", {GPU: "1"}, restartPolicy="Always")], 3),
        ([c("a", {GPU: "2"})], [c("s", {GPU: "2"}, restartPolicy="Always"),
                                c("t", {GPU: "1"}, restartPolicy="Always")], 5),
        ([c("a", {GPU: "0"}), c("b", {MEM: "4"})], [c("i", {GPU: "0"})], 0),
        ([c("a", {GPU: "2.5"})], [], 0),  # not a whole count: its value rule refuses it
        ([c("a", {MEM: "4"}), c("b", {GPU: "2"})], [c("i", {MEM: "1"}), c("j", {GPU: "1"})], 2),
        ([], [c("i", {GPU: "2"}), c("j", {GPU: "1"})], 2),
    ],
)
def test_effective_request_as_kube_scheduler_counts_it(containers, init, expected):
    assert effective_request(requests_of(*containers, init=init), GPU) == expected


@pytest.mark.parametrize(
    ("labels", "cards"),
    [({}, None), ({"aliyun.com/gpu-count": "2"}, 2), ({"aliyun.com/gpu-count": " 3 "}, 3),
     ({"aliyun.com/gpu-count": "1"}, 1), ({"aliyun.com/gpu-count": "0"}, None),
     ({"aliyun.com/gpu-count": "two"}, None), ({"aliyun.com/gpu-count": "-2"}, None),
     ({"aliyun.com/gpu-count": "²"}, None), ({"aliyun.com/gpu-count": ""}, None), ({"gpu-count": "2"}, None)],
)
def test_the_cards_of_the_multi_gpu_label(labels, cards):
    assert cards_per_container(labels, NAMES) == cards


@pytest.mark.parametrize(
    ("value", "whole"),
    [(None, None), (Decimal(0), None), (Decimal(-3), None), (Decimal("2.5"), None), (Decimal("0.5"), None),
     (Decimal(2), 2), (Decimal("2.000"), 2), (Decimal(1), 1), (Decimal(2**40), 2**40)],
)
def test_whole_gib(value, whole):
    assert whole_gib(value) == whole
    assert whole_gib(value) == whole  # the second read is the remembered one


def test_whole_counts_are_remembered_within_a_bound():
    from policies.model import resources

    resources._WHOLE.clear()
    for i in range(resources._WHOLE_MAX + 10):
        assert whole_gib(Decimal(i) + Decimal("0.5")) is None
        assert whole_gib(Decimal(i + 1)) == i + 1
    assert 0 < len(resources._WHOLE) <= resources._WHOLE_MAX
