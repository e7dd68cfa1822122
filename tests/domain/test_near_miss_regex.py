"""GS007's near-miss test as RE2 (policies/generate/near_miss_regex.py), matched here with google-re2 (the
engine cel-python's ``matches`` runs) on a fixed list of resource keys: a key the regexes find is
exactly a key the engine (policies/model/near_miss.py) calls a near miss, under the default names
and under other names, domains and look-alikes. tests/deploy/test_backstop_equivalence.py does the
same on generated keys through the exported policy."""

from __future__ import annotations

import pytest
import re2

from policies.generate.backstop import SECTION
from policies.generate.near_miss_regex import domain_regex, name_part_regex
from policies.model.near_miss import meant_resource, skipped_keys
from tests.support.resource_keys import DOMAINS, NAMES
from webhook.settings import Settings

DEFAULT = Settings()
CUSTOM = Settings(names={"resources": {"gpu_mem": "example.com/gpu-memory-mb",
                                       "gpu_core": "example.com/gpu-core.share", "gpu_topology": "example.com/gpu"}},
                  near_miss={"lookalike_domains": ["example.org", "sample.com", "Upper.com", " spaced.com", "ex"],
                             "allowed": ["example.com/gpu-model"]})
NO_STEM = Settings(names={"resources": {"gpu_mem": "acme.io/vram", "gpu_core": "acme.io/gpu"}},
                   near_miss={"lookalike_domains": []})
# Name parts and domains people write, and edits of the names: rewritten words, case, separators,
# prefixes one edit away, the core stem with anything after it, other characters.
EXTRA_NAMES = ["gpu-memory-mb", "gpu-mem-mb", "GPU_MemoryMB", "gpu-core.share", "gpu-core-share-x", "gpu-model",
               "gpu-core", "gpucoreshare", "gpu-cores", "vram", "vrm", "gpuX", "gpux1", "gpx", "gp", "g", "",
               "gpu-memmb", "xgpu-mem", "gpu-mem!", "gpu-mém", "gpu/mem", "gpu mem", "gpu-me", "gpumemoryx",
               "gpu-percentage", "gpupercent", "gpu-core.percentag", "gpu-corepercentage-x", "gpu-kore",
               "GPU-CORE.PERCENTAGE", "gpu-memor", "memory", "gpu-memorymemory", "gpu-mempercentage", "mgpu-mem"]
EXTRA_DOMAINS = ["example.com", "example.org", "sample.com", "exampel.com", "upper.com", "Upper.com", "spaced.com",
                 " example.com", "examp.com", "acme.io", "acme.iox", "acm.i", "ex", "aliyun.com.", "ALIYUN.COM",
                 "aliyun.c", "a.aliyun.com", "alibaba.com ", "\taliyun.com", "x/aliyun.com", "aliyun.com/x"]
KEYS = sorted({*(f"{d}/{n}" for d in DOMAINS + EXTRA_DOMAINS for n in NAMES + EXTRA_NAMES),
               *NAMES, *EXTRA_NAMES, "cpu", "memory", "ephemeral-storage", "/gpu-mem", "//gpu-mem"})


def engine_meant(key: str, settings: Settings) -> str | None:
    r, near = settings.names.resources, settings.near_miss
    return meant_resource(key, r.gpu_mem, r.gpu_core, near.lookalike_domains, near.allowed)


def regex_finds(key: str, settings: Settings, before: str = "^", prefix: str = "") -> bool:
    """The matchConditions' and the backstop's test: not a skipped key, the name part and the domain match."""
    r = settings.names.resources
    name = name_part_regex(r.gpu_mem, r.gpu_core, before=before)
    domain = domain_regex(r.gpu_mem, tuple(settings.near_miss.lookalike_domains), before=before)
    return key not in skipped_keys(settings) and bool(re2.search(name, prefix + key)) and bool(
        re2.search(domain, prefix + key))


@pytest.mark.parametrize("settings", [DEFAULT, CUSTOM, NO_STEM], ids=["default", "custom", "no-stem"])
def test_the_regexes_find_exactly_the_near_misses_the_engine_finds(settings):
    wrong = [(key, engine_meant(key, settings)) for key in KEYS
             if regex_finds(key, settings) != (key not in skipped_keys(settings) and engine_meant(key, settings)
                                              is not None)]
    assert wrong == []
    found = [key for key in KEYS if regex_finds(key, settings)]
    assert len(found) > 10  # the list holds near misses of every kind, not only names the regexes pass over


@pytest.mark.parametrize("settings", [DEFAULT, CUSTOM], ids=["default", "custom"])
def test_the_memory_regex_tells_which_name_was_meant(settings):
    r = settings.names.resources
    mem_only = name_part_regex(r.gpu_mem, r.gpu_core, mem_only=True, before=SECTION)
    wrong = [key for key in KEYS if regex_finds(key, settings) and
             bool(re2.search(mem_only, f"limits.{key}")) != (engine_meant(key, settings) == r.gpu_mem)]
    assert wrong == []


@pytest.mark.parametrize(("key", "found"), [
    ("limits.aliyun.com/gpu-memory", True), ("requests.gpu_mem", True), ("requests.alibaba.com/gpu-mem", True),
    ("limits.aliyun.com/fpga", False), ("aliyun.com/gpu-memory", False), ("xlimits.gpumem", False),
    ("limits.aliyun.com/gpu-memory ", True), ("limits.aliyun.co.jp/gpu-mem", False),
])
def test_the_backstop_s_regexes_read_the_section_before_the_key(key, found):
    r = DEFAULT.names.resources
    name = name_part_regex(r.gpu_mem, r.gpu_core, before=SECTION)
    domain = domain_regex(r.gpu_mem, tuple(DEFAULT.near_miss.lookalike_domains), before=SECTION)
    assert bool(re2.search(name, key) and re2.search(domain, key)) is found


def test_a_domain_with_white_space_cannot_be_expressed():
    with pytest.raises(ValueError, match="has white space"):
        domain_regex("aliyun .com/gpu-mem", ())


def test_a_core_name_without_a_stem_matches_only_its_own_edits():
    regex = name_part_regex("acme.io/vram", "acme.io/gpu")  # "gpu" is shorter than a stem may be
    assert not re2.search(regex, "acme.io/gpu-anything")
    assert re2.search(regex, "acme.io/gpu-1") and re2.search(regex, "acme.io/gp")
    assert re2.search(name_part_regex("acme.io/vram", "acme.io/gpuX"), "acme.io/gpux-anything")
