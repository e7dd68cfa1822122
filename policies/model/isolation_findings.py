"""What GS010 and GS011 find in a pod's env (policies/model/isolation.py reads it), and the record the
cluster state keeps of a running pod for the audit: what it sets, the GPU resources each container
names and the mode its nodeSelector names, and that record written back as a pod spec's containers."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.model.isolation import (
    DISABLES,
    ENV_FROM,
    EXPOSES_ASSIGNED,
    EXPOSES_UNASKED,
    ON_MPS,
    OVERRIDES,
    REMOVE,
    UNDOCUMENTED,
    ContainerEnv,
    EnvProblem,
    container_envs,
    env_from_gpu_free,
    service_links,
)
from policies.model.resources import (
    ContainerRequest,
    ShapeError,
    cards_per_container,
    memory_share,
)
from policies.model.settings import Names


def _selected_mode(spec: Mapping[str, Any] | None, names: Names) -> str | None:
    """The mode (ack.node.gpu.schedule) the pod's nodeSelector names, if any."""
    selector = spec.get("nodeSelector") if spec else None
    mode = selector.get(names.labels.schedule) if isinstance(selector, dict) else None
    return mode if isinstance(mode, str) else None


def may_run_on_mps(spec: Mapping[str, Any] | None, names: Names) -> bool:
    """Whether the pod may land on an mps node: its nodeSelector does not name another mode. (Node
    affinity is not read: a pod kept off mps nodes by affinity alone is judged as if it could go.)"""
    return _selected_mode(spec, names) in (None, "mps")


def env_problems(containers: Sequence[ContainerEnv], requests: Sequence[ContainerRequest],
                 labels: Mapping[str, str], mps: bool, names: Names) -> Iterator[EnvProblem]:
    """What GS010 and GS011 report, container by container, entry by entry (every entry of a name:
    the last one wins at run time, and each one is written by the pod). ``requests``: the
    containers' GPU requests; ``mps``: the pod may run on mps nodes."""
    env, mem = names.env, names.resources.gpu_mem
    spread = cards_per_container(labels, names) or 1
    gpu = {(r.group, r.index): r for r in requests}
    for container in containers:
        request = gpu.get((container.group, container.index))
        asks_memory = request is not None and request.has(mem)
        # A container asking for zero of every GPU resource is given none (ContainerRequest.has).
        assigned = request is not None and bool(request.asked())
        for entry in container.entries:
            name = entry.name
            if name in env.device_plugin:
                share = memory_share(request, spread, names) if name == names.env_mem_container and request else None
                if share is not None and entry.value == str(share):
                    continue  # what GM003 writes and the device plugin sets: the mutated pod again
                yield EnvProblem(container, f"env {entry.shown} {OVERRIDES}; {REMOVE}", entry, False)
            elif name in env.mps:
                if asks_memory and mps:
                    yield EnvProblem(container, f"env {entry.shown} {OVERRIDES} {ON_MPS}; {REMOVE}", entry, False)
            elif name == env.visible_devices:
                if entry.exposes_gpus:
                    verb = "may expose" if entry.value is None else "exposes"
                    if assigned:
                        yield EnvProblem(container, f"env {entry.shown} {verb} {EXPOSES_ASSIGNED}", entry, False)
                    else:
                        yield EnvProblem(container, f"env {entry.shown} {verb} {EXPOSES_UNASKED}", entry, True)
            elif name == env.disable_isolation and asks_memory:  # cGPU isolates gpu-mem only
                if entry.true:
                    verb = "may turn" if entry.value is None else "turns"
                    yield EnvProblem(container, f"env {entry.shown} {verb} {DISABLES}", entry, True)
                elif entry.undocumented:
                    yield EnvProblem(container, f"env {entry.shown} {UNDOCUMENTED}", entry, True, advisory=True)
        if container.env_from:  # a container asking for zero of every GPU resource is given none
            first, more = container.env_from[0].shown, len(container.env_from) - 1
            listed = f"{first} and {more} more" if more else first
            if assigned:
                yield EnvProblem(container, f"envFrom {listed} {ENV_FROM}", None, False)
            else:
                yield EnvProblem(container, f"envFrom {listed} {env_from_gpu_free(env.visible_devices)}", None, True,
                                 advisory=True, offline=True)


@dataclass(frozen=True, slots=True)
class PodEnv:
    """What a pod of the cluster sets that GS010 or GS011 report, as the cluster state keeps it for the
    audit: the containers that set judged names, the GPU resources each names (the judged value as
    text), and the mode its nodeSelector names."""

    containers: tuple[ContainerEnv, ...]
    resources: tuple[tuple[tuple[str, str], ...], ...]  # per container, as in ``containers``
    mode: str | None  # the nodeSelector's ack.node.gpu.schedule
    service_links: bool = True  # enableServiceLinks (what an expanded value may read)


def pod_env(spec: Mapping[str, Any] | None, requests: Sequence[ContainerRequest], labels: Mapping[str, str],
            names: Names) -> PodEnv | None:
    """A running pod's record for the audit, or None when GS010 and GS011 find nothing on it (every
    GPU pod the webhook mutated carries GM003's own value, which is nothing to keep). A malformed env
    is none: the API server admits none."""
    try:
        containers = container_envs(spec, ("spec",), names)
    except ShapeError:
        return None
    if not containers or not any(env_problems(containers, requests, labels, may_run_on_mps(spec, names), names)):
        return None
    gpu = {(r.group, r.index): r for r in requests}
    return PodEnv(containers, tuple(_named(gpu.get((c.group, c.index))) for c in containers),
                  _selected_mode(spec, names), service_links(spec))


def _named(request: ContainerRequest | None) -> tuple[tuple[str, str], ...]:
    """The GPU resources a container names, each with its judged value (the limit, else the request)."""
    if request is None:
        return ()
    return tuple(sorted((key, str(value.raw)) for key in request.written()
                        if (value := request.value(key)) is not None))


def env_manifest(env: PodEnv) -> dict[str, list[dict[str, Any]]]:
    """The containers of ``env`` as a pod spec's groups (what the audit judges again)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for container, resources in zip(env.containers, env.resources, strict=True):
        if container.context:  # an expanded value: the whole env it was read from
            entries = [{"name": r.name, "value": r.value} if r.value is not None
                       else {"name": r.name, "valueFrom": {r.source: {}} if r.source else {}}
                       for r in container.context]
        else:
            entries = [{"name": e.name, "value": e.value} if e.value is not None
                       else {"name": e.name, "valueFrom": {e.source: {}} if e.source else {}}
                       for e in container.entries]
        built: dict[str, Any] = {"name": container.name, "env": entries}
        if resources:
            built["resources"] = {"limits": dict(resources)}
        sources = [{s.kind: {"name": s.name}, **({"prefix": s.prefix} if s.prefix else {})} for s in container.env_from]
        sources += [{"configMapRef": {"name": ""}, "prefix": prefix} for prefix in container.other_prefixes]
        if sources:
            built["envFrom"] = sources
        groups.setdefault(container.group, []).append(built)
    return groups
