"""GS007's near misses in process: which resource names narrowly miss a shared-GPU name (its domain,
its name part within one edit, the compute share's stem), which never do (the real names, the
allow-list, other domains), where each is found in a pod spec or a custom workload's pod, and the
keys the generated regexes never try. The rule's words: tests/domain/test_gs_rules.py; the
backstop's CEL: tests/deploy/test_backstop_equivalence.py."""

from __future__ import annotations

import pytest

from policies.model.near_miss import (
    NearMiss,
    canonical,
    core_stem,
    edit_distance,
    meant_resource,
    near_misses,
    near_misses_in,
    skipped_keys,
)
from tests.support.manifests import container, pod_spec
from tests.support.near_miss_cases import NEAR_MISSES, NOT_NEAR_MISSES
from webhook.settings import Settings

SETTINGS = Settings()
NAMES, NEAR = SETTINGS.names, SETTINGS.near_miss
MEM, CORE = NAMES.resources.gpu_mem, NAMES.resources.gpu_core


def meant(key: str, *, mem: str = MEM, core: str = CORE) -> str | None:
    return meant_resource(key, mem, core, NEAR.lookalike_domains, NEAR.allowed)


@pytest.mark.parametrize(("key", "expected"), [
    *[(key, meant_name) for key, _, meant_name in NEAR_MISSES],
    *[(key, None) for key in NOT_NEAR_MISSES],
    (MEM, None), (CORE, None),
    ("ALIYUN.COM/gpu-mem", MEM), ("Aliyun.Com/GPU_Memory", MEM),  # the domain read without case
    ("aliyum.com/gpu-mem", MEM), ("alyun.co/gpu-mem", MEM),  # one and two edits from the real domain
    ("alyn.co/gpu-mem", None), ("nvidia.com/gpu-mem", None), ("example.com/gpu-memory", None),  # three or more
    ("alicloud.com/gpu-mem", MEM), ("aliyuncs.com/gpumem", MEM),  # Alibaba's other names
    ("gpu-mem", MEM), ("gpu-memory", MEM), ("/gpu-mem", MEM),  # no domain at all
    ("aliyun.com/gpu-mems", MEM), ("aliyun.com/gpu-me", MEM), ("aliyun.com/gpu-mex", MEM),  # one edit
    ("aliyun.com/gpu-memss", None), ("aliyun.com/gpu-m", None),  # two edits
    ("aliyun.com/cpu-mem", MEM), ("aliyun.com/gpx-mem", MEM),  # the "gpu" prefix within one edit
    ("aliyun.com/xyz-mem", None), ("aliyun.com/xgpu-mem", None),  # "xgp" is two edits from "gpu"
    ("aliyun.com/cpx-mem", None), ("aliyun.com/mem", None),
    ("aliyun.com/gpu-core", CORE), ("aliyun.com/gpu_core_percent", CORE), ("aliyun.com/GPU.Core.Percentage", CORE),
    ("aliyun.com/gpu-core-percent-value", CORE), ("aliyun.com/gpucores", CORE),  # the compute share's stem
    ("aliyun.com/gpu-cor", None),  # not the whole stem, and two edits from gpu-mem
    ("aliyun.com/gpu", None), ("aliyun.com/gpu-count", None), ("aliyun.com/gpus", None),  # the allow-list, far
])
def test_which_names_narrowly_miss_a_shared_gpu_name(key, expected):
    assert meant(key) == expected


def test_the_compute_share_stem_counts_only_when_long_enough():
    # a compute share named gpu-percentage: its stem is "gpu", too short to stand for it
    core = "example.com/gpu-percentage"
    assert core_stem(core) == "gpu"
    assert meant("aliyun.com/gpu-xyzw", core=core) is None
    assert meant("aliyun.com/gpu-percent", core=core) == core
    # a stem of exactly four characters counts
    core4 = "example.com/gpux-percentage"
    assert core_stem(core4) == "gpux"
    assert meant("aliyun.com/gpux-anything", core=core4) == core4


def test_a_name_part_is_compared_without_case_punctuation_or_long_words():
    assert canonical("GPU-Memory") == "gpumem"
    assert canonical("gpu_core.percentage") == "gpucorepercent"
    assert canonical("memorypercentage") == "mempercent"
    assert core_stem("aliyun.com/gpu-core.percentage") == "gpucore"
    assert core_stem("gpu-core") == "gpucore"


@pytest.mark.parametrize(("a", "b", "limit", "distance"), [
    ("gpumem", "gpumem", 1, 0), ("gpumem", "gpumems", 1, 1), ("gpumem", "cpumem", 1, 1), ("gpumem", "gpmem", 2, 1),
    ("kitten", "sitting", 3, 3), ("kitten", "sitting", 2, 3), ("", "abc", 3, 3), ("abc", "", 5, 3),
    ("abc", "abcdef", 2, 3), ("abcdef", "abc", 2, 3), ("abcd", "wxyz", 2, 3), ("abcd", "wxyz", 4, 4),
    ("ab", "ba", 2, 2), ("", "abcd", 1, 2), ("abcd", "", 0, 1),
    ("flaw", "lawn", 2, 2), ("aliyum.com", "aliyun.com", 2, 1), ("xyz", "gpu", 1, 2),
])
def test_the_edit_distance_stops_once_past_its_limit(a, b, limit, distance):
    assert edit_distance(a, b, limit) == distance


def test_near_misses_are_found_in_every_container_and_section():
    spec = pod_spec(
        container("app", limits={"aliyun.com/gpu-memory": 4, "cpu": "1", MEM: 2},
                  requests={"aliyun.com/gpu-core-percentage": 30}),
        {"image": "x", "resources": {"limits": {"gpu_mem": 1}}},
        "not a container", container("none"), {"name": "r", "resources": "x"},
        {"name": "s", "resources": {"limits": ["aliyun.com/gpumem"], "requests": None}},
        {"name": "t", "resources": {"limits": {"aliyun.com/gpu-mems": 1}}},
        init=[container("warm", requests={"alibaba.com/gpu-mem": 1, 7: 1})])
    assert near_misses(spec, ("spec", "template", "spec"), NAMES, NEAR) == [
        NearMiss("warm", "initContainers", "alibaba.com/gpu-mem", MEM,
                 ("spec", "template", "spec", "initContainers", 0, "resources", "requests", "alibaba.com/gpu-mem")),
        NearMiss("app", "containers", "aliyun.com/gpu-memory", MEM,
                 ("spec", "template", "spec", "containers", 0, "resources", "limits", "aliyun.com/gpu-memory")),
        NearMiss("app", "containers", "aliyun.com/gpu-core-percentage", CORE,
                 ("spec", "template", "spec", "containers", 0, "resources", "requests",
                  "aliyun.com/gpu-core-percentage")),
        NearMiss("containers[1]", "containers", "gpu_mem", MEM,
                 ("spec", "template", "spec", "containers", 1, "resources", "limits", "gpu_mem")),
        NearMiss("t", "containers", "aliyun.com/gpu-mems", MEM,
                 ("spec", "template", "spec", "containers", 6, "resources", "limits", "aliyun.com/gpu-mems"))]
    for malformed in (None, "x", {"containers": "x"}, {"containers": [{"name": "a", "resources": None}]}):
        assert near_misses(malformed, ("spec",), NAMES, NEAR) == []


def test_near_misses_in_a_custom_workloads_pod():
    containers = [({"resources": "x"}, "x", "containers", ()),
                  ({"resources": {"limits": {"aliyun.com/gpu-memory": 2}, "requests": {"gpumem": 1, "cpu": 2}}},
                   "trainer", "containers", ("spec", "trainer", "resources")),
                  ({"resources": {"limits": "x", "requests": {"aliyun.com/gpu": 1}}}, "y", "resources", ("r",)),
                  ({}, "z", "containers", ())]
    assert near_misses_in(containers, NAMES, NEAR) == [
        NearMiss("trainer", "containers", "aliyun.com/gpu-memory", MEM,
                 ("spec", "trainer", "resources", "limits", "aliyun.com/gpu-memory")),
        NearMiss("trainer", "containers", "gpumem", MEM, ("spec", "trainer", "resources", "requests", "gpumem"))]


def test_the_settings_decide_what_is_a_near_miss():
    spec = pod_spec(container("app", limits={"aliyun.com/gpu-memory": 4, "aliyun.com/fpga": 1}))
    assert [m.key for m in near_misses(spec, ("spec",), NAMES, NEAR)] == ["aliyun.com/gpu-memory"]
    allowing = Settings(near_miss={"allowed": ["aliyun.com/gpu-memory"]})
    assert near_misses(spec, ("spec",), allowing.names, allowing.near_miss) == []
    # and back: the verdicts kept for one settings are never those of another
    assert [m.key for m in near_misses(spec, ("spec",), NAMES, NEAR)] == ["aliyun.com/gpu-memory"]
    renamed = Settings(names={"resources": {"gpu_mem": "aliyun.com/gpu-memory"}})
    assert near_misses(spec, ("spec",), renamed.names, renamed.near_miss) == []  # the real name now
    assert [m.key for m in near_misses(pod_spec(container("a", limits={MEM: 1})), ("spec",), renamed.names,
                                       renamed.near_miss)] == [MEM]
    # the names alone change, the near-miss section is the same object: the names decide
    assert [m.key for m in near_misses(spec, ("spec",), NAMES, NEAR)] == ["aliyun.com/gpu-memory"]
    assert near_misses(spec, ("spec",), renamed.names, NEAR) == []
    # and the names the same object, the near-miss section another: the section decides
    assert [m.key for m in near_misses(spec, ("spec",), NAMES, NEAR)] == ["aliyun.com/gpu-memory"]
    assert near_misses(spec, ("spec",), NAMES, allowing.near_miss) == []
    assert [m.key for m in near_misses(spec, ("spec",), NAMES, NEAR)] == ["aliyun.com/gpu-memory"]


def test_many_distinct_keys_are_each_judged():
    keys = {f"example{i}.org/gpu-mem": 1 for i in range(5000)}
    keys["aliyun.com/gpu-memory"] = 1
    spec = pod_spec(container("app", limits=keys))
    assert [m.key for m in near_misses(spec, ("spec",), NAMES, NEAR)] == ["aliyun.com/gpu-memory"]
    spec = pod_spec(container("app", limits={"aliyun.com/gpu_mem": 1, "example9.org/gpu-mem": 2}))
    assert [m.key for m in near_misses(spec, ("spec",), NAMES, NEAR)] == ["aliyun.com/gpu_mem"]


def test_the_keys_the_regexes_never_try():
    known = sorted({*NAMES.resources.names(), *NEAR.allowed, "cpu", "memory", "ephemeral-storage"})
    assert skipped_keys(SETTINGS) == known
    # a standard resource that is a near miss under these settings is tried
    close = Settings(names={"resources": {"gpu_mem": "example.com/cpu1"}})
    assert "cpu" not in skipped_keys(close) and "memory" in skipped_keys(close)
    assert "example.com/cpu1" in skipped_keys(close)
    # a standard resource on the allow-list is skipped once, as both
    listed = Settings(near_miss={"allowed": ["cpu", "aliyun.com/fpga"]})
    assert skipped_keys(listed) == sorted({*NAMES.resources.names(), "cpu", "aliyun.com/fpga", "memory",
                                           "ephemeral-storage"})
