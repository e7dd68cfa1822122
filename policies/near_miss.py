"""Resource names that look like the shared-GPU names but are not them (rule GS007).

``aliyun.com/gpu-memory: 4`` is a valid extended resource as far as Kubernetes knows, so
the API server accepts the pod, no node ever offers it, and the pod stays Pending forever.
A name is a near miss when its domain is the real one or looks like it, and its name part,
with case, punctuation and the words "memory"/"percentage" normalised, is (within one edit)
the name part of ``aliyun.com/gpu-mem`` or ``aliyun.com/gpu-core.percentage``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .resources import CONTAINER_GROUPS, Path
from .settings import Names, NearMissSettings

_NOT_ALNUM = re.compile(r"[^a-z0-9]")


@dataclass(frozen=True, slots=True)
class NearMiss:
    container: str
    group: str
    key: str
    meant: str
    path: Path


def _canonical(name: str) -> str:
    flat = _NOT_ALNUM.sub("", name.lower())
    return flat.replace("memory", "mem").replace("percentage", "percent")


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
    if domain and domain not in domains and edit_distance(domain, real_domain, 2) > 2:
        return None
    name = _canonical(local)
    if edit_distance(name[:3], "gpu", 1) > 1:  # every shared-GPU name starts with "gpu"
        return None
    for real in (gpu_mem, gpu_core):
        target = _canonical(real.rpartition("/")[2])
        if name == target or edit_distance(name, target, 1) <= 1:
            return real
    # "gpu-core" and "gpu-core-percent-value" still mean the compute share.
    core_stem = _canonical(gpu_core.rpartition("/")[2]).removesuffix("percent")
    if name.startswith(core_stem) and len(core_stem) >= 4:
        return gpu_core
    return None


def near_misses(spec: dict[str, Any] | None, base: Path, names: Names, settings: NearMissSettings) -> list[NearMiss]:
    """Every resource key in the pod spec's containers that narrowly misses a shared-GPU name.

    Malformed shapes are skipped here: the rules that read GPU requests report them.
    """
    if not isinstance(spec, dict):
        return []
    mem, core = names.resources.gpu_mem, names.resources.gpu_core
    known = {mem, core, names.resources.gpu_topology, names.resources.gpu_exclusive, names.resources.gpu_count}
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
                    if not isinstance(key, str) or key in known:
                        continue
                    meant = meant_resource(key, mem, core, settings.lookalike_domains, settings.allowed)
                    if meant is not None:
                        name = container.get("name")
                        found.append(NearMiss(str(name) if name is not None else f"{group}[{index}]", group, key,
                                              meant, (*base, group, index, "resources", section, key)))
    return found
