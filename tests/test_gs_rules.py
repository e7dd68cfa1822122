"""GS001-GS006 word for word: the exact message and hint for each value, and pods with several
containers (a valid one before an invalid one, sidecars first, request and limit both written)."""

from __future__ import annotations

import pytest

from policies.engine import Engine

from .manifests import ALL_KINDS, CORE, MEM, container, pod_spec, received, workload
from .near_miss_cases import deployment_with, pod_with

TOPOLOGY, EXCLUSIVE = "aliyun.com/gpu", "nvidia.com/gpu"


def found(engine: Engine, obj, operation: str = "CREATE") -> list[tuple[str, str, str]]:
    """(rule, message, path) of every finding, in the engine's order."""
    sent = received(obj)
    subject = engine.subject(sent["kind"], sent, operation=received(operation), namespace="default")
    return [(f.rule, f.message, f.path_text) for f in engine.validate(subject).findings]


def pod(*containers, init=None):
    return workload("Pod", pod_spec(*containers, init=init), name="p")


LIMITS = "spec.containers[{i}].resources.limits"
REQUESTS = "spec.containers[{i}].resources.requests"


# ---- GS001: the compute percentage -------------------------------------------------------------

@pytest.mark.parametrize(
    ("value", "why", "hint"),
    [
        (33, "is not a multiple of 5 in 5..100", "use 30 or 35"),
        (30.4, "is not a multiple of 5 in 5..100", "use 30 or 35"),  # fractional, even if it rounds to 30
        ("30400m", "is not a multiple of 5 in 5..100", "use 30 or 35"),
        ("30.6", "is not a multiple of 5 in 5..100", "use 30 or 35"),  # fractional, even if it rounds to 31
        ("-1e29", "is not a multiple of 5 in 5..100", "use 5"),  # far below: no division past Decimal's precision
        (0, "is not a multiple of 5 in 5..100", "use 5"),
        (4, "is not a multiple of 5 in 5..100", "use 5"),
        (-5, "is not a multiple of 5 in 5..100", "use 5"),
        (101, "is not a multiple of 5 in 5..100", "use 100"),
        (105, "is not a multiple of 5 in 5..100", "use 100"),
        (97, "is not a multiple of 5 in 5..100", "use 95 or 100"),
        (6, "is not a multiple of 5 in 5..100", "use 5 or 10"),
        ("abc", "is not a quantity ('abc' is not a quantity)",
         "use an integer multiple of 5 from 5 to 100, e.g. 30"),
    ],
)
def test_gs001_message_and_hint(engine, value, why, hint):
    assert found(engine, pod(container("cuda", limits={MEM: 2, CORE: value}))) == [
        ("GS001", f'GS001: Pod default/p container "cuda": {CORE}={value} {why}; {hint}',
         f'{LIMITS.format(i=0)}["{CORE}"]')]


@pytest.mark.parametrize("value", [5, 10, 30, 95, 100, "100", "30000m", 30.0, "3e1"])
def test_gs001_accepts_whole_multiples_of_5_from_5_to_100(engine, value):
    assert found(engine, pod(container(limits={MEM: 2, CORE: value}))) == []


def test_gs001_checks_the_request_when_it_differs_from_the_limit(engine):
    obj = pod(container("cuda", limits={MEM: 2, CORE: 30}, requests={MEM: 2, CORE: 33}))
    assert found(engine, obj) == [
        ("GS001", f'GS001: Pod default/p container "cuda": {CORE}=33 is not a multiple of 5 in 5..100; '
                  "use 30 or 35", f'{REQUESTS.format(i=0)}["{CORE}"]'),
        ("GS004", f'GS004: Pod default/p container "cuda": requests.{CORE}=33 differs from limits.{CORE}=30; '
                  "set the request to 30 or leave it out", f'{REQUESTS.format(i=0)}["{CORE}"]'),
    ]


def test_gs001_reports_limit_and_request_once_each(engine):
    obj = pod(container("cuda", limits={MEM: 2, CORE: 33}, requests={MEM: 2, CORE: 33}))
    assert [(rule, path) for rule, _, path in found(engine, obj)] == [("GS001", f'{LIMITS.format(i=0)}["{CORE}"]')]


def test_gs001_a_valid_container_before_an_invalid_one(engine):
    obj = pod(container("ok", limits={MEM: 1, CORE: 30}), container("bad", limits={MEM: 1, CORE: 33}))
    assert found(engine, obj) == [
        ("GS001", f'GS001: Pod default/p container "bad": {CORE}=33 is not a multiple of 5 in 5..100; '
                  "use 30 or 35", f'{LIMITS.format(i=1)}["{CORE}"]')]


def test_gs001_every_invalid_container_is_named(engine):
    obj = pod(container("a", limits={MEM: 1, CORE: 33}), container("b", limits={MEM: 1, CORE: 7}))
    assert [message.split(": ", 2)[1] for _, message, _ in found(engine, obj)] == [
        'Pod default/p container "a"', 'Pod default/p container "b"']


# ---- GS002: compute without memory -------------------------------------------------------------

def test_gs002_after_a_sidecar(engine):
    obj = pod(container("sidecar", limits={"cpu": "1"}), container("app", limits={CORE: 30}))
    assert found(engine, obj) == [
        ("GS002", f'GS002: Pod default/p container "app": {CORE}=30 is requested without {MEM}; '
                  f"add limits.{MEM} with a whole number of GiB (1 or more)", f'{LIMITS.format(i=1)}["{CORE}"]')]


def test_gs002_names_a_request_only_core(engine):
    obj = pod(container("app", requests={CORE: 30}))
    assert [rule for rule, _, _ in found(engine, obj)] == ["GS002", "GS004"]
    assert found(engine, obj)[0][2] == f'{REQUESTS.format(i=0)}["{CORE}"]'


# ---- GS003: memory in whole GiB ----------------------------------------------------------------

UNIT = "carries a unit, but the resource already counts GiB"
NOT_WHOLE = "is not a whole number of GiB >= 1"


@pytest.mark.parametrize(
    ("value", "why", "hint"),
    [
        ("2Gi", UNIT, "use 2"),
        (" 2Gi", UNIT, "use 2"),
        ("2048Mi", UNIT, "use 2"),
        ("1536Mi", UNIT, "use 2"),  # 1.5 GiB rounds half up
        ("1Mi", UNIT, "use 1"),  # never less than 1
        ("1Ti", UNIT, "use 1024"),
        ("10G", UNIT, "use 9"),  # 10 GB is 9.3 GiB
        ("16G", UNIT, "use 15"),
        ("1E", UNIT, "use a whole number of GiB up to 1024"),  # 931322575 GiB: larger than any card
        ("1025Gi", UNIT, "use a whole number of GiB up to 1024"),
        ("4000m", UNIT, "use 4"),  # milli is not a size unit: 4000m is 4
        ("2500m", UNIT, "use 2 or 3"),
        ("500m", UNIT, "use a whole number of GiB, 1 or more"),
        ("many", "is not a quantity ('many' is not a quantity)", "use a whole number of GiB, 1 or more"),
        ("2GB", "is not a quantity ('2GB' is not a quantity)", "use a whole number of GiB, 1 or more"),
        (0, NOT_WHOLE, "use a whole number of GiB, 1 or more"),
        (-1, NOT_WHOLE, "use a whole number of GiB, 1 or more"),
        ("-2Gi", UNIT, "use a whole number of GiB, 1 or more"),
        (1.5, NOT_WHOLE, "use 1 or 2"),
        ("2.5", NOT_WHOLE, "use 2 or 3"),
        ("1023.5", NOT_WHOLE, "use 1023 or 1024"),
        ("1024.5", NOT_WHOLE, "use a whole number of GiB up to 1024"),  # 1025 would be larger than any card
    ],
)
def test_gs003_message_and_hint(engine, value, why, hint):
    assert found(engine, pod(container("cuda", limits={MEM: value}))) == [
        ("GS003", f'GS003: Pod default/p container "cuda": {MEM}={value} {why}; {hint}',
         f'{LIMITS.format(i=0)}["{MEM}"]')]


@pytest.mark.parametrize("value", [1, "1", 60, "60", 2.0, "2.0", "1e3"])
def test_gs003_accepts_whole_gib(engine, value):
    assert found(engine, pod(container(limits={MEM: value}))) == []


def test_gs003_checks_a_gpu_container_after_a_sidecar(engine):
    obj = pod(container("proxy", limits={"memory": "1Gi"}), container("app", limits={MEM: "2Gi"}))
    assert found(engine, obj) == [
        ("GS003", f'GS003: Pod default/p container "app": {MEM}=2Gi {UNIT}; use 2', f'{LIMITS.format(i=1)}["{MEM}"]')]


def test_gs003_checks_init_containers_by_their_own_path(engine):
    obj = pod(container("app", limits={MEM: 2}), init=[container("warm", limits={MEM: "1Gi"})])
    assert found(engine, obj) == [
        ("GS003", f'GS003: Pod default/p init container "warm": {MEM}=1Gi {UNIT}; use 1',
         f'spec.initContainers[0].resources.limits["{MEM}"]')]


# ---- GS004: requests equal limits --------------------------------------------------------------

@pytest.mark.parametrize("resource", [MEM, CORE, TOPOLOGY, EXCLUSIVE])
def test_gs004_request_without_limit_for_every_gpu_resource(engine, resource):
    limits = {MEM: 2} if resource == CORE else None
    obj = pod(container("c", limits=limits, requests={resource: 30 if resource == CORE else 2}))
    gs004 = [f for f in found(engine, obj) if f[0] == "GS004"]
    value = 30 if resource == CORE else 2
    assert gs004 == [("GS004", f'GS004: Pod default/p container "c": requests.{resource}={value} has no limit; '
                               f"set limits.{resource}: {value} (extended resources need a limit)",
                      f'{REQUESTS.format(i=0)}["{resource}"]')]


def test_gs004_unparseable_values_are_left_to_gs001_and_gs003(engine):
    obj = pod(container("c", limits={MEM: "x"}, requests={MEM: 2}))
    assert [rule for rule, _, _ in found(engine, obj)] == ["GS003"]


def test_gs004_a_valid_container_before_an_invalid_one(engine):
    obj = pod(container("a", limits={MEM: 2}, requests={MEM: 2}), container("b", limits={MEM: 4}, requests={MEM: 2}))
    assert found(engine, obj) == [
        ("GS004", f'GS004: Pod default/p container "b": requests.{MEM}=2 differs from limits.{MEM}=4; '
                  "set the request to 4 or leave it out", f'{REQUESTS.format(i=1)}["{MEM}"]')]


# ---- GS005: job types ------------------------------------------------------------------------

def test_gs005_exact_message_names_every_container(engine):
    obj = pod(container("m1", limits={MEM: 1}), container("c1", limits={MEM: 1, CORE: 30}),
              container("m2", limits={MEM: 1}), container("plain", limits={"cpu": "1"}))
    assert found(engine, obj) == [
        ("GS005", 'GS005: Pod default/p mixes mem-only containers ("m1", "m2") with core+mem containers ("c1"); '
                  f"give every GPU container {CORE} or none of them", "spec.containers[0]")]


def test_gs005_core_only_containers_are_not_a_job_type(engine):
    obj = pod(container("m", limits={MEM: 1}), container("c", limits={CORE: 30}))
    assert [rule for rule, _, _ in found(engine, obj)] == ["GS002"]


# ---- GS006: whole and shared GPUs ---------------------------------------------------------------

@pytest.mark.parametrize(("whole", "shared", "asked"), [
    (EXCLUSIVE, MEM, f"{EXCLUSIVE} and {MEM}"),
    (TOPOLOGY, MEM, f"{TOPOLOGY} and {MEM}"),
])
def test_gs006_in_one_container(engine, whole, shared, asked):
    obj = pod(container("side", limits={"cpu": "1"}), container("x", limits={shared: 2, whole: 1}))
    assert found(engine, obj) == [
        ("GS006", f'GS006: Pod default/p container "x": requests {asked} together; use whole GPUs '
                  f"({EXCLUSIVE} or {TOPOLOGY}) or shared GPU ({MEM}), not both", "spec.containers[1]")]


def test_gs006_core_counts_as_shared(engine):
    obj = pod(container("x", limits={TOPOLOGY: 1, MEM: 2, CORE: 30}))
    assert found(engine, obj)[0][1].startswith(
        f'GS006: Pod default/p container "x": requests {TOPOLOGY} and {MEM} and {CORE} together;')


def test_gs006_across_containers_names_each_side(engine):
    obj = pod(container("s", limits={MEM: 2}), container("w1", limits={EXCLUSIVE: 1}),
              container("w2", limits={TOPOLOGY: 1}))
    assert found(engine, obj) == [
        ("GS006", 'GS006: Pod default/p has containers with whole GPUs ("w1", "w2") and containers with shared '
                  'GPU ("s"); a node runs one GPU mode, so use one kind', "spec.containers[1]")]


def test_gs006_whole_gpus_alone_pass(engine):
    assert found(engine, pod(container("a", limits={EXCLUSIVE: 1}), container("b", limits={TOPOLOGY: 2}))) == []


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_rule_runs_on_every_kind(engine, kind):
    obj = workload(kind, pod_spec(container("a", limits={MEM: "2Gi", CORE: 33})), name="w")
    assert sorted(rule for rule, _, _ in found(engine, obj)) == ["GS001", "GS003"]


# ---- GS007: near misses of the resource names (added with the ACK-fidelity work; pinned as written) --------

@pytest.mark.parametrize(("obj", "where", "section"), [
    (pod_with("aliyun.com/gpu-memory", 4), 'Pod default/near-miss container "app"', "limits"),
    (pod_with("aliyun.com/gpu-memory", 4, section="requests"), 'Pod default/near-miss container "app"', "requests"),
    (pod_with("aliyun.com/gpu-memory", 4, init=True), 'Pod default/near-miss init container "app"', "limits"),
    (deployment_with("aliyun.com/gpu-memory", 4), 'Deployment default/near-miss container "app"', "limits"),
])
def test_gs007_word_for_word(engine, obj, where, section):
    [(_, message, _)] = [f for f in found(engine, obj) if f[0] == "GS007"]
    assert message == (
        f"GS007: {where}: {section}.aliyun.com/gpu-memory is not a resource any node offers, so the pod would stay "
        f"Pending forever; did you mean {MEM}? (accepted: {MEM}, {CORE}; a real resource of that name can be "
        "listed in near_miss.allowed)")
