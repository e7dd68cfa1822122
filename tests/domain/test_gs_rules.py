"""GS001-GS006 word for word: the exact message and hint for each value, and pods with several
containers (a valid one before an invalid one, sidecars first, request and limit both written)."""

from __future__ import annotations

import pytest

from policies.admission.engine import Engine
from tests.support.manifests import ALL_KINDS, CORE, MEM, container, pod_spec, received, workload
from tests.support.near_miss_cases import deployment_with, pod_with
from webhook.settings import Settings

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


def test_gs001_leaves_a_request_beside_a_limit_to_gs004(engine):
    # One fix per value: GS004 names the request's only accepted value (the limit), so GS001 does
    # not offer "30 or 35" for the same request.
    obj = pod(container("cuda", limits={MEM: 2, CORE: 30}, requests={MEM: 2, CORE: 33}))
    assert found(engine, obj) == [
        ("GS004", f'GS004: Pod default/p container "cuda": requests.{CORE}=33 differs from limits.{CORE}=30; '
                  "set the request to 30 or leave it out", f'{REQUESTS.format(i=0)}["{CORE}"]'),
    ]


def test_gs004_names_the_value_gs001_accepts_when_the_limit_is_refused(engine):
    obj = pod(container("cuda", limits={MEM: 2, CORE: 33}, requests={MEM: 2, CORE: 50}))
    assert [message for _, message, _ in found(engine, obj)] == [
        f'GS001: Pod default/p container "cuda": {CORE}=33 is not a multiple of 5 in 5..100; use 30 or 35',
        f'GS004: Pod default/p container "cuda": requests.{CORE}=50 differs from limits.{CORE}=33; '
        "set the request to 30 or 35 or leave it out"]


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

BYTES = "looks like bytes, but the resource counts GiB"
NOT_WHOLE = "is not a whole number of GiB"
NOT_POSITIVE = "is not 1 or more GiB"
TOO_LARGE = "is more than any card holds (at most 1024 GiB)"
LIKE_MIB = "is more than any card holds (at most 1024 GiB) and looks like MiB ({gib} GiB rounded up)"
MIB_FIX = "use {gib}, or set names.memory_unit: MiB if the device plugin counts MiB"


@pytest.mark.parametrize(
    ("value", "why", "hint"),
    [
        ("2Gi", BYTES, "use 2"),
        (" 2Gi", BYTES, "use 2"),
        ("2048Mi", BYTES, "use 2"),
        ("1536Mi", BYTES, "use 2"),  # 1.5 GiB: never rounded down
        ("1Mi", BYTES, "use 1"),  # 2**20 bytes: the smallest count taken for bytes
        ("1Ti", BYTES, "use 1024"),
        ("10G", BYTES, "use 10"),  # 10 GB is 9.3 GiB: 10, not 9
        ("16G", BYTES, "use 15"),
        ("1E", TOO_LARGE, "use a whole number of GiB up to 1024"),  # 931322575 GiB
        ("1025Gi", TOO_LARGE, "use a whole number of GiB up to 1024"),
        ("2500m", NOT_WHOLE, "use 3"),
        ("500m", NOT_WHOLE, "use 1"),
        ("many", "is not a quantity ('many' is not a quantity)", "use a whole number of GiB, 1 or more"),
        ("2GB", "is not a quantity ('2GB' is not a quantity)", "use a whole number of GiB, 1 or more"),
        (0, NOT_POSITIVE, "use a whole number of GiB, 1 or more"),
        (-1, NOT_POSITIVE, "use a whole number of GiB, 1 or more"),
        ("-2Gi", NOT_POSITIVE, "use a whole number of GiB, 1 or more"),
        (1.5, NOT_WHOLE, "use 2"),
        ("2.5", NOT_WHOLE, "use 3"),
        ("5.5", NOT_WHOLE, "use 6"),  # a real Deployment's value (tests/data/corpus, file 37)
        ("1023.5", NOT_WHOLE, "use 1024"),
        # GiB counts that look like MiB: the open-source extender's own old sample, a canonical 16000, 2000.
        (16276, LIKE_MIB.format(gib=16), MIB_FIX.format(gib=16)),
        ("16k", LIKE_MIB.format(gib=16), MIB_FIX.format(gib=16)),
        ("2k", LIKE_MIB.format(gib=2), MIB_FIX.format(gib=2)),
        ("1024.5", LIKE_MIB.format(gib=2), MIB_FIX.format(gib=2)),
    ],
)
def test_gs003_message_and_hint(engine, value, why, hint):
    assert found(engine, pod(container("cuda", limits={MEM: value}))) == [
        ("GS003", f'GS003: Pod default/p container "cuda": {MEM}={value} {why}; {hint}',
         f'{LIMITS.format(i=0)}["{MEM}"]')]


# Whole values from 1 to 1024 however they are written: what people write and what the API server
# sends after canonicalising it (2000m arrives as "2", 1000 as "1k", 1024 written 1Ki stays "1Ki").
@pytest.mark.parametrize("value", [1, "1", 60, "60", 2.0, "2.0", "1e3", "2000m", "4000m", "1k", "1Ki", 1024,
                                   "+2", "0.002k"])
def test_gs003_accepts_whole_gib(engine, value):
    assert found(engine, pod(container(limits={MEM: value}))) == []


def test_gs003_in_mib_clusters_counts_mib():
    settings = Settings(names={"memory_unit": "MiB"})
    mib = Engine(settings)
    assert found(mib, pod(container(limits={MEM: "3500"}))) == []  # a --memory-unit=MiB cluster's pod
    assert found(mib, pod(container(limits={MEM: "1Gi"}))) == [
        ("GS003", f'GS003: Pod default/p container "main": {MEM}=1Gi looks like bytes, but the resource counts '
                  "MiB; use 1024", f'{LIMITS.format(i=0)}["{MEM}"]')]
    assert found(mib, pod(container(limits={MEM: "1048577"}))) == [
        ("GS003", f'GS003: Pod default/p container "main": {MEM}=1048577 looks like bytes, but the resource counts '
                  "MiB; use 2", f'{LIMITS.format(i=0)}["{MEM}"]')]


def test_gs003_checks_a_gpu_container_after_a_sidecar(engine):
    obj = pod(container("proxy", limits={"memory": "1Gi"}), container("app", limits={MEM: "2Gi"}))
    assert found(engine, obj) == [
        ("GS003", f'GS003: Pod default/p container "app": {MEM}=2Gi {BYTES}; use 2', f'{LIMITS.format(i=1)}["{MEM}"]')]


def test_gs003_checks_init_containers_by_their_own_path(engine):
    obj = pod(container("app", limits={MEM: 2}), init=[container("warm", limits={MEM: "1Gi"})])
    assert [f for f in found(engine, obj) if f[0] == "GS003"] == [
        ("GS003", f'GS003: Pod default/p init container "warm": {MEM}=1Gi {BYTES}; use 1',
         f'spec.initContainers[0].resources.limits["{MEM}"]')]


def test_gs003_and_gs004_suggest_one_value(engine):
    # A real manifest (tests/data/corpus, file 44): limit 2Gi, request 1Gi. GS003 judges the limit;
    # GS004 names the value GS003 accepts for it, never "2Gi" (refused) or "1" (the request's own fix).
    obj = pod(container("cgpu", limits={MEM: "2Gi"}, requests={MEM: "1Gi"}))
    assert [message for _, message, _ in found(engine, obj)] == [
        f'GS003: Pod default/p container "cgpu": {MEM}=2Gi {BYTES}; use 2',
        f'GS004: Pod default/p container "cgpu": requests.{MEM}=1Gi differs from limits.{MEM}=2Gi; '
        "set the request to 2 or leave it out"]


def test_gs004_without_a_limit_suggests_the_limit_gs003_accepts(engine):
    obj = pod(container("c", requests={MEM: "5.5"}))
    assert [message for _, message, _ in found(engine, obj)] == [
        f'GS003: Pod default/p container "c": {MEM}=5.5 {NOT_WHOLE}; use 6',
        f'GS004: Pod default/p container "c": requests.{MEM}=5.5 has no limit; set limits.{MEM}: 6 '
        "(extended resources need a limit)"]


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
