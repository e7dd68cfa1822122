"""Resource names that look like the shared-GPU names but are not them (rule GS007).

``aliyun.com/gpu-memory: 4`` is a valid extended resource as far as Kubernetes knows, so
the API server accepts the pod, no node ever offers it, and the pod stays Pending forever.
A name is a near miss when its domain is the real one or looks like it, and its name part,
with case, punctuation and the words "memory"/"percentage" normalised, is (within one edit)
the name part of ``aliyun.com/gpu-mem`` or ``aliyun.com/gpu-core.percentage``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from policies.model.resources import CONTAINER_GROUPS, Path
from policies.model.settings import Names, NearMissSettings, PolicySettings

_NOT_ALNUM = re.compile(r"[^a-z0-9]")
# The rule's parameters, read by the engine below and by the backstop's regexes
# (policies/generate/near_miss_regex.py), so that both judge one definition.
REWRITES = (("memory", "mem"), ("percentage", "percent"))  # applied in order, each to the whole name
GPU_PREFIX = "gpu"  # every shared-GPU name starts with it (within PREFIX_EDITS)
PREFIX_EDITS = 1
NAME_EDITS = 1  # edits from a shared-GPU name part
DOMAIN_EDITS = 2  # edits from the real domain
MIN_CORE_STEM = 4  # the core stem ("gpucore") counts as a prefix only when at least this long


@dataclass(frozen=True, slots=True)
class NearMiss:
    container: str
    group: str
    key: str
    meant: str
    path: Path


def canonical(name: str) -> str:
    """The name part as compared: lower case, letters and digits only, the words rewritten."""
    flat = _NOT_ALNUM.sub("", name.lower())
    for old, new in REWRITES:
        flat = flat.replace(old, new)
    return flat


def core_stem(gpu_core: str) -> str:
    """The compute-share name's canonical part without "percent" ("gpucore")."""
    return canonical(gpu_core.rpartition("/")[2]).removesuffix("percent")


def edit_distance(a: str, b: str, limit: int) -> int:
    """Levenshtein distance, or limit + 1 once it is certainly above ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        if min(current) > limit:
            return limit + 1
        previous = current
    return previous[-1]


@lru_cache(maxsize=4096)
def meant_resource(key: str, gpu_mem: str, gpu_core: str, domains: tuple[str, ...],
                   allowed: tuple[str, ...]) -> str | None:
    """The shared-GPU name ``key`` misses narrowly, or None (cached: a cluster uses few names)."""
    if key in (gpu_mem, gpu_core) or key in allowed:
        return None
    domain, _, local = key.rpartition("/")
    domain = domain.strip().lower()
    real_domain = gpu_mem.rpartition("/")[0]
    if domain and domain not in domains and edit_distance(domain, real_domain, DOMAIN_EDITS) > DOMAIN_EDITS:
        return None
    name = canonical(local)
    if edit_distance(name[:len(GPU_PREFIX)], GPU_PREFIX, PREFIX_EDITS) > PREFIX_EDITS:
        return None
    for real in (gpu_mem, gpu_core):
        target = canonical(real.rpartition("/")[2])
        if name == target or edit_distance(name, target, NAME_EDITS) <= NAME_EDITS:
            return real
    # "gpu-core" and "gpu-core-percent-value" still mean the compute share.
    stem = core_stem(gpu_core)
    if name.startswith(stem) and len(stem) >= MIN_CORE_STEM:
        return gpu_core
    return None


_UNSEEN = object()
_MEANT_MAX = 4096
_meant: tuple[object, object, dict[Any, str | None]] = (None, None, {})


def _meant_by_key(names: Names, settings: NearMissSettings) -> dict[Any, str | None]:
    """``meant_resource`` of every key seen under these settings (kept for the last ones seen, like
    ``watched_resources``): a pod names a handful of resources, nearly always the same ones, and a
    look-up here costs a fraction of the cached call's hashing of its arguments. The names the
    engine knows are never near misses."""
    global _meant
    r = names.resources
    if _meant[0] is not r or _meant[1] is not settings:
        _meant = (r, settings, dict.fromkeys(r.names()))
    return _meant[2]


def _meant_for(key: Any, meant_of: dict[Any, str | None], names: Names, settings: NearMissSettings) -> str | None:
    """The shared-GPU name ``key`` misses narrowly, or None (also for a key that is no string)."""
    meant = meant_of.get(key, _UNSEEN)
    if meant is _UNSEEN:
        if not isinstance(key, str):
            return None
        meant = meant_resource(key, names.resources.gpu_mem, names.resources.gpu_core, settings.lookalike_domains,
                               settings.allowed)
        if len(meant_of) < _MEANT_MAX:  # names beyond it are looked up each time (the call is cached too)
            meant_of[key] = meant
    return meant  # type: ignore[return-value]


def near_misses(spec: dict[str, Any] | None, base: Path, names: Names, settings: NearMissSettings) -> list[NearMiss]:
    """Every resource key in the pod spec's containers that narrowly misses a shared-GPU name.

    Malformed shapes are skipped here: the rules that read GPU requests report them. (Loops written
    out, look-ups in ``_meant_by_key``: this runs for every admitted pod.)
    """
    if not isinstance(spec, dict):
        return []
    meant_of = _meant_by_key(names, settings)
    found: list[NearMiss] = []
    for group in CONTAINER_GROUPS:
        items = spec.get(group)
        if not isinstance(items, list):
            continue
        for index, container in enumerate(items):
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            for section in ("limits", "requests"):
                block = resources.get(section)
                if not isinstance(block, dict):
                    continue
                for key in block:
                    meant = _meant_for(key, meant_of, names, settings)
                    if meant is not None:
                        name = container.get("name")
                        found.append(NearMiss(str(name) if name is not None else f"{group}[{index}]", group, key,
                                              meant, (*base, group, index, "resources", section, key)))
    return found


def near_misses_in(containers: Iterable[tuple[dict[str, Any], str, str, Path]], names: Names,
                   settings: NearMissSettings) -> list[NearMiss]:
    """Near misses in (container, name, group, path of its resources) of a custom workload's pod."""
    meant_of = _meant_by_key(names, settings)
    found: list[NearMiss] = []
    for container, name, group, resources_path in containers:
        resources = container.get("resources")
        if not isinstance(resources, dict):
            continue
        for section in ("limits", "requests"):
            block = resources.get(section)
            if isinstance(block, dict):
                found.extend(NearMiss(name, group, key, meant, (*resources_path, section, key)) for key in block
                             if (meant := _meant_for(key, meant_of, names, settings)) is not None)
    return found


# Kubernetes' own container resources without a prefix (hugepages-<size> aside, a family): the
# commonest keys, skipped by list membership instead of the name-part regex when the engine
# passes them (they save most of GS007's cost; bench/backstop_cost.py).
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def skipped_keys(s: PolicySettings) -> list[str]:
    """Keys the generated near-miss regexes are never tried on (the backstop's and the webhooks'
    matchConditions'): the names the engine knows, the allow-list, and the standard resources that
    are no near miss under these settings."""
    r = s.names.resources
    known = {*r.names(), *s.near_miss.allowed}
    standard = {name for name in STANDARD_RESOURCES
                if meant_resource(name, r.gpu_mem, r.gpu_core, s.near_miss.lookalike_domains, s.near_miss.allowed)
                is None}
    return sorted(known | standard)
