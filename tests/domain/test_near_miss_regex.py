"""GS007's near-miss test as RE2 (policies/generate/near_miss_regex.py), matched here with google-re2 (the
engine cel-python's ``matches`` runs) on a fixed list of resource keys: a key the regexes find is
exactly a key the engine (policies/model/near_miss.py) calls a near miss, under the default names
and under other names, domains and look-alikes. tests/deploy/test_backstop_equivalence.py does the
same on generated keys through the exported policy."""

from __future__ import annotations

import string

import pytest
import re2

from policies.generate.backstop import SECTION
from policies.generate.near_miss_regex import _ranges, domain_regex, name_part_regex
from policies.model.near_miss import meant_resource, skipped_keys
from tests.support.resource_keys import DOMAINS, NAMES
from webhook.settings import Settings

DEFAULT = Settings()
CUSTOM = Settings(names={"resources": {"gpu_mem": "example.com/gpu-memory-mb",
                                       "gpu_core": "example.com/gpu-core.share", "gpu_topology": "example.com/gpu"}},
                  near_miss={"lookalike_domains": ["example.org", "sample.com", "Upper.com", " spaced.com",
                                                    "trail.com ", "ex"],
                             "allowed": ["example.com/gpu-model"]})
NO_STEM = Settings(names={"resources": {"gpu_mem": "acme.io/vram", "gpu_core": "acme.io/gpu"}},
                   near_miss={"lookalike_domains": []})
SHORT = Settings(names={"resources": {"gpu_mem": "acme.io/pu-mem", "gpu_core": "acme.io/pu-core"}},
                 near_miss={"lookalike_domains": []})
TINY = Settings(names={"resources": {"gpu_mem": "acme.io/mig", "gpu_core": "acme.io/gpu"}},
                near_miss={"lookalike_domains": []})
DIGITS = Settings(names={"resources": {"gpu_mem": "acme.io/gpu-mem2", "gpu_core": "acme.io/gpu-temp"}},
                  near_miss={"lookalike_domains": []})
CAPITAL = Settings(names={"resources": {"gpu_mem": "Acme.io/gpu-mem", "gpu_core": "Acme.io/gpu-core"}},
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


# -- every word within a few edits ---------------------------------------------------------------
# The lists above hold the names people write; these tests walk the whole neighbourhood of the
# shared-GPU names and domains (every insertion, deletion and replacement from a small alphabet),
# so every boundary of the edit-distance automata is crossed in both directions: one edit too many,
# a prefix one letter short, a stem one letter off, a character the strip takes or keeps.

def one_edit(text: str, alphabet: str) -> set[str]:
    """Every word one insertion, deletion or replacement away from ``text``, and ``text`` itself."""
    out = {text}
    for i in range(len(text) + 1):
        out.update(text[:i] + c + text[i:] for c in alphabet)
        if i < len(text):
            out.add(text[:i] + text[i + 1:])
            out.update(text[:i] + c + text[i + 1:] for c in alphabet)
    return out


def within(texts: list[str], alphabet: str, edits: int) -> set[str]:
    words = set(texts)
    for _ in range(edits):
        words = {w for word in words for w in one_edit(word, alphabet)}
    return words


def disagreements(keys: set[str], settings: Settings) -> tuple[list[str], dict[str, str]]:
    """The keys where the regexes (as regex_finds tries them, compiled once) and the engine differ,
    and the near misses the engine finds, with the name each means."""
    r, skipped = settings.names.resources, set(skipped_keys(settings))
    name = re2.compile(name_part_regex(r.gpu_mem, r.gpu_core))
    domain = re2.compile(domain_regex(r.gpu_mem, tuple(settings.near_miss.lookalike_domains)))
    wrong, near = [], {}
    for key in keys:
        meant = None if key in skipped else engine_meant(key, settings)
        if meant is not None:
            near[key] = meant
        if (key not in skipped and bool(name.search(key)) and bool(domain.search(key))) != (meant is not None):
            wrong.append(key)
    return sorted(wrong), near


# Name parts (no domain: the key is the name part alone). One edit from the whole alphabet of a
# name part (letters, digits, separators, capitals), two edits from the letters the automaton names
# plus one it does not ("x"), a separator and a capital.
WIDE = string.ascii_lowercase + string.digits + "-_. ~M"
NAME_CASES = {
    "default": (DEFAULT, ["gpu-mem", "gpu-memory", "gpu-core.percentage", "gpu-core", "gpu", "percentage"],
                ["gpumem", "gpucore", "gpumemory", "gp"], "gpumecorx-M"),
    "custom": (CUSTOM, ["gpu-memory-mb", "gpu-core.share", "gpu-core", "gpu"],
               ["gpumemmb", "gpucore", "gpumemorymb"], "gpumecorsx-M"),
    "no-stem": (NO_STEM, ["vram", "gpu", "gpu-mem"], ["vram", "gpu", "gpux"], "vramgpux-M"),
    # Names that do not begin with the prefix: a near miss may then begin with an insertion ("gpumem").
    "short": (SHORT, ["pu-mem", "gpu-mem", "pu-core", "gpucore"], ["pumem", "pucore"], "gpumecorx-"),
    # A name shorter than the prefix: within one edit of a short name ("mi" of "mig") but not of "gpu".
    "tiny": (TINY, ["mig", "mi", "gpu", "gp"], ["mig", "gpu"], "migpux-"),
    # Digits in the names (named characters that sort before the automaton's own letters), and a stem
    # ending in a letter that may begin a rewritten word ("p" of "percentage": held back until the end).
    "digits": (DIGITS, ["gpu-mem2", "gpu-temp", "gpu-temp-9", "gpu-memory2"], ["gpumem2", "gputemp"], "gpumet29x-"),
}


@pytest.mark.parametrize("case", NAME_CASES, ids=list(NAME_CASES))
def test_the_name_part_regexes_agree_with_the_engine_on_every_word_near_the_names(case):
    settings, seeds_one, seeds_two, alphabet = NAME_CASES[case]
    r = settings.names.resources
    keys = within(seeds_one, WIDE, 1) | within(seeds_two, alphabet, 2)
    wrong, near = disagreements(keys, settings)
    assert wrong == []
    assert 0 < len(near) < len(keys)  # both sides of the boundary are walked
    # Among the near misses, the memory regex finds exactly those the engine reads as the memory name.
    mem_only = re2.compile(name_part_regex(r.gpu_mem, r.gpu_core, mem_only=True))
    assert sorted(key for key, meant in near.items() if bool(mem_only.search(key)) != (meant == r.gpu_mem)) == []


# Domains: one edit of the real domain and of each look-alike, from letters of the domain, a letter
# it lacks, a capital, white space the strip takes ("\t", "\x1c") and "/" (which moves the domain's
# end), and two edits from fewer of them; each key ends with a name part that is a near miss, so the
# domain alone decides.
DOMAIN_CASES = {
    "default": (DEFAULT, "aliyun.com", "alyun.cmx A\t/", "ayu.x A\t"),
    "custom": (CUSTOM, "example.com", "exampl.cox U\x1c/", "epl.x U\x1c"),
    # The settings take a domain with capitals (Kubernetes would refuse the name); keys are lower-cased.
    "capital": (CAPITAL, "Acme.io", "acme.ioxA /", "acm.xA"),
}


@pytest.mark.parametrize("case", DOMAIN_CASES, ids=list(DOMAIN_CASES))
def test_the_domain_regex_agrees_with_the_engine_on_every_domain_near_the_real_one(case):
    settings, real, alphabet, fewer = DOMAIN_CASES[case]
    domains = within([real, *settings.near_miss.lookalike_domains], alphabet, 1) | within([real], fewer, 2)
    r = settings.names.resources
    mem, core = r.gpu_mem.rpartition("/")[2].upper(), r.gpu_core.rpartition("/")[2] + "x"
    keys = {f"{d}/{mem}" for d in domains} | {f"{d}/{core}" for d in within([real], alphabet, 1)}
    wrong, near = disagreements(keys, settings)
    assert wrong == []
    assert 0 < len(near) < len(keys)


def test_character_runs_are_written_as_ranges_from_three_on():
    assert _ranges("cba") == "a-c"
    assert _ranges("ab") == "ab"
    assert _ranges("z0129xy") == "0-29x-z"
    assert _ranges("13579") == "13579"
    assert _ranges("acd") == "acd"  # a run of two after a gap
    assert _ranges("") == ""


def test_a_set_of_domain_characters_is_written_as_a_class_of_its_lower_case_ones():
    from policies.generate.near_miss_regex import ANY, NEVER, _domain_symbol

    assert _domain_symbol(frozenset({"a"})) == "a"
    assert _domain_symbol(frozenset({"b", "a", "-", "A"})) == "[\\-ab]"  # "A": never a lower-cased domain's
    assert _domain_symbol(frozenset({"A"})) == NEVER
    assert _domain_symbol(frozenset({"a", ANY})) == "."
    for symbol, matched, unmatched in (("[\\-ab]", "-ab", "A.c/"), (NEVER, "", "aA-./\x00")):
        assert all(re2.fullmatch(symbol, c) for c in matched)
        assert not any(re2.fullmatch(symbol, c) for c in unmatched)
