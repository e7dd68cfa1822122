"""What a pod sets in the environment variables the GPU-sharing device plugin and cGPU own.

GPU sharing holds only as far as a pod cannot change what isolates it. The device plugin hands each
container its card and its share through environment variables, and the kubelet puts the
container's own env after the device plugin's, so a value the pod writes wins at run time (a
repeated name too: the last entry wins). Rules GS010 (a pod overriding what the device plugin
sets) and GS011 (a pod lifting isolation) read what is found here; the cluster state keeps it for
running pods so that the audit judges them alike (policies/model/isolation_findings.py says what
they find). Names are settings (``names.env``); each one's source is in docs/isolation.md.

Read here, judged as the runtimes read them:
- ``NVIDIA_VISIBLE_DEVICES``: ``all``, indices and UUIDs expose GPUs; ``void``, empty and
  ``none`` expose none (NVIDIA Container Toolkit, "Specialized Configurations with Docker";
  ``internal/config/image/devices.go`` compares the exact strings);
- ``CGPU_DISABLE``: ``true`` or ``1`` switches cGPU's memory isolation off (ACK "Disable the
  memory isolation capability of cGPU"; the cGPU package's README names both values). Read
  without case and surrounding blanks: a value cGPU might take as true is judged as true;
- a value set from ``valueFrom`` (a ConfigMap, a Secret, a field) is not known at admission and
  is judged as the worst it could be: exposing GPUs, switching isolation off;
- ``envFrom``: the names a ConfigMap or Secret sets are not known at admission either; a source
  whose ``prefix`` no judged name starts with cannot set one. In a GPU-free container it is reported
  by ``gpushare check`` and the audit only: the webhooks are not sent GPU-free pods for it;
- a ``value`` with ``$`` is judged after the kubelet's ``$(VAR)`` expansion (policies/model/env_expansion.py);
- ``CGPU_DISABLE`` values cGPU does not document (neither true nor false) are warned: its parser is
  not published;
- ephemeral containers (``kubectl debug``) are read like the others; on the ``ephemeralcontainers``
  subresource only those the request adds are judged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from operator import methodcaller
from typing import Any

from policies.model.env_expansion import RawEnv, Unknown, expanded_values
from policies.model.resources import (
    CONTAINER_GROUPS,
    Path,
    ShapeError,
    container_noun,
)
from policies.model.settings import EnvNames, Names

# CGPU_DISABLE values judged as true: the values cGPU's documentation shows (ACK "Disable the memory
# isolation capability of cGPU" writes "true"; the cGPU package's README names true and 1), in any
# case, surrounding blanks ignored. The backstop matches the same text with RE2 (^...$ around it).
TRUE_TEXT = r"[ \t\n\r]*(?i:true|1)[ \t\n\r]*"
_TRUE = re.compile(TRUE_TEXT)
# Values recognised as false (isolation stays on): empty, false, 0. Any other value is warned: cGPU is
# closed source and its parser is not published, so whether it takes "on", "yes" or "t" as true
# cannot be read.
_FALSE = re.compile(r"[ \t\n\r]*(?i:false|0)?[ \t\n\r]*")
# Ephemeral containers: kubectl debug adds them through the pods/ephemeralcontainers subresource.
EPHEMERAL = "ephemeralContainers"
EPHEMERAL_SUBRESOURCE = "ephemeralcontainers"
ENV_GROUPS = (*CONTAINER_GROUPS, EPHEMERAL)
# NVIDIA_VISIBLE_DEVICES values that expose no GPU, compared exactly as the toolkit does.
HIDING = ("", "void", "none")
# A value longer than this is shown by its length (a message names the value, not a megabyte of it).
SHOWN_CHARACTERS = 64
ENV_FROM_KINDS = ("configMapRef", "secretRef")
_NAME_OF = methodcaller("get", "name")  # an env entry's name (AttributeError on an entry that is no object)

# What each finding says after the container's name (the backstop writes the same words).
OVERRIDES = "overrides what the GPU-sharing device plugin sets"
REMOVE = "remove it"
ON_MPS = "on mps nodes"
EXPOSES_ASSIGNED = "GPUs the device plugin did not assign to this container; remove it or set none or void"
EXPOSES_UNASKED = "the node's GPUs to a container that requests none; set none or void, or have an admin exempt the pod"
DISABLES = ("off cGPU memory isolation: the container can use all of its card's memory; remove it, or have an "
            "admin exempt the pod")
ENV_FROM = ("may override what the GPU-sharing device plugin and cGPU set, unseen at admission; give the "
            "source a prefix, or list GPU variables in env")
UNDOCUMENTED = ("is not a value cGPU documents (true or 1 turn its memory isolation off, false or 0 leave it on) "
                "and cGPU's parser is not published, so it may take it as true; write one of those four")


def env_from_gpu_free(visible_devices: str) -> str:
    """What a GPU-free container's envFrom may do (check and the audit; never sent to the webhooks)."""
    return (f"may set {visible_devices}, exposing the node's GPUs to a container that requests none, or what "
            f"the GPU-sharing device plugin sets, unseen at admission; give the source a prefix, or set "
            f"{visible_devices}=void in env")


def _clipped(value: str) -> str:
    return f"<{len(value)} characters>" if len(value) > SHOWN_CHARACTERS else value


@dataclass(frozen=True, slots=True)
class EnvEntry:
    """One env entry with a judged name."""

    index: int = field(compare=False)  # its position in the container's env (where, not what: records compare alike)
    name: str
    value: str | None  # None: known only at run time (valueFrom, or an expansion reading what admission cannot)
    # valueFrom's kind (configMapKeyRef, secretKeyRef, fieldRef, resourceFieldRef); for an expansion,
    # what it reads at run time ("<FLAG from configMapKeyRef>")
    source: str = ""
    written: str | None = None  # the value as written, when the kubelet expands it (it has a "$")

    @property
    def shown(self) -> str:
        if self.written is not None:
            shown = f"{self.name}={_clipped(self.written)}"
            if self.value is None:
                return f"{shown} (expands to {self.source})"
            return shown if self.value == self.written else f"{shown} (expands to {_clipped(self.value)})"
        if self.value is None:
            return f"{self.name}=<from {self.source or 'valueFrom'}>"
        return f"{self.name}={_clipped(self.value)}"

    @property
    def exposes_gpus(self) -> bool:
        """As NVIDIA_VISIBLE_DEVICES: it exposes GPUs (or may, when read at run time)."""
        return self.value is None or self.value not in HIDING

    @property
    def true(self) -> bool:
        """As CGPU_DISABLE: it switches isolation off (or may, when read at run time)."""
        return self.value is None or _TRUE.fullmatch(self.value) is not None

    @property
    def undocumented(self) -> bool:
        """As CGPU_DISABLE: a value cGPU's documentation neither shows as true nor as false."""
        return self.value is not None and not self.true and _FALSE.fullmatch(self.value) is None


@dataclass(frozen=True, slots=True)
class EnvSource:
    """An envFrom source that may set a judged name."""

    kind: str  # configMapRef or secretRef
    name: str
    prefix: str = ""

    @property
    def shown(self) -> str:
        return f'{self.kind} "{self.name}"'


@dataclass(frozen=True, slots=True)
class ContainerEnv:
    """What one container sets that GS010 and GS011 judge."""

    group: str  # containers or initContainers
    index: int
    name: str
    entries: tuple[EnvEntry, ...]
    env_from: tuple[EnvSource, ...]
    path: Path = ()  # the container's own place in the object
    # When an entry's value is expanded: the whole env as the expansion read it, and the prefixes of the
    # envFrom sources not in ``env_from`` (what the audit needs to expand it again alike).
    context: tuple[RawEnv, ...] = ()
    other_prefixes: tuple[str, ...] = ()

    @property
    def noun(self) -> str:
        return container_noun(self.group)


@dataclass(frozen=True, slots=True)
class EnvProblem:
    """One thing a container sets that GS010 or GS011 reports."""

    container: ContainerEnv
    text: str  # what it does and what would be accepted, after the container's name
    entry: EnvEntry | None  # None: the container's envFrom
    lifts: bool  # lifts isolation (GS011) rather than overriding the device plugin (GS010)
    advisory: bool = False  # a warning whatever the rule's severity
    # Reported by check and the audit only: the webhooks are not sent it (a GPU-free container's envFrom).
    offline: bool = False


_judged: tuple[object, frozenset[str]] = (None, frozenset())


def judged_names(env: EnvNames) -> frozenset[str]:
    """Every name GS010 and GS011 judge (kept for the last settings section seen, like
    ``watched_resources``)."""
    global _judged
    if _judged[0] is not env:
        _judged = (env, frozenset((*env.device_plugin, *env.mps, env.visible_devices, env.disable_isolation)))
    return _judged[1]


def _entry(raw: dict[str, Any], name: str, index: int, path: Path) -> EnvEntry:
    """An env entry with a judged name."""
    source = raw.get("valueFrom")
    if source is not None:
        if not isinstance(source, dict):
            raise ShapeError((*path, index, "valueFrom"), f"must be an object, got {type(source).__name__}")
        return EnvEntry(index, name, None, next(iter(source), ""))
    value = raw.get("value", "")
    if value is None:
        value = ""
    if not isinstance(value, str):  # the API server refuses it; a manifest that writes `value: 1` says so
        raise ShapeError((*path, index, "value"), f"must be a string, got {type(value).__name__}")
    return EnvEntry(index, name, value)


def _sources(raw: Any, path: Path, judged: frozenset[str]) -> tuple[tuple[EnvSource, ...], tuple[str, ...]]:
    """The envFrom sources that may set a judged name, and the prefixes of the others."""
    if not isinstance(raw, list):
        raise ShapeError(path, f"must be a list, got {type(raw).__name__}")
    found, others = [], []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ShapeError((*path, index), f"must be an object, got {type(item).__name__}")
        prefix = item.get("prefix") or ""
        if not isinstance(prefix, str):
            raise ShapeError((*path, index, "prefix"), f"must be a string, got {type(prefix).__name__}")
        if not any(name.startswith(prefix) for name in judged):
            others.append(prefix)  # every name it sets starts with a prefix no judged name has
            continue
        kind = next((k for k in ENV_FROM_KINDS if isinstance(item.get(k), dict)), "")
        ref = item.get(kind) if kind else None
        found.append(EnvSource(kind or "source", str(ref.get("name", "")) if isinstance(ref, dict) else "", prefix))
    return tuple(found), tuple(others)


def service_links(spec: Mapping[str, Any] | None) -> bool:
    """Whether the kubelet gives the pod's containers its namespace's service-link variables
    (``enableServiceLinks``, true unless set false)."""
    return not (spec and spec.get("enableServiceLinks") is False)


def container_envs(spec: Mapping[str, Any] | None, base: Path, names: Names) -> tuple[ContainerEnv, ...]:
    """The containers, init containers and ephemeral containers (init containers first) of the pod spec
    at ``base`` that set a judged name or take envFrom that may; ShapeError when what is read is
    malformed."""
    if not spec:
        return ()
    items: list[tuple[str, int, Any, Path, str]] = []
    for group in ENV_GROUPS:
        found = spec.get(group)
        if isinstance(found, list):  # container_requests reports a malformed list
            items.extend((group, index, container, (*base, group, index), f"{group}[{index}]")
                         for index, container in enumerate(found))
    return envs_of(items, names, service_links(spec))


def added_ephemeral_envs(spec: Mapping[str, Any] | None, old: Mapping[str, Any] | None, base: Path,
                         names: Names) -> tuple[ContainerEnv, ...]:
    """The ephemeral containers of the pod spec at ``base`` that the old pod does not have (by name: the
    API server lets none be changed or removed), as ``container_envs`` reads them: what an UPDATE of the
    ephemeralcontainers subresource adds."""
    found = spec.get(EPHEMERAL) if spec else None
    if not isinstance(found, list):
        return ()
    old_spec = old.get("spec") if isinstance(old, dict) else None
    before = old_spec.get(EPHEMERAL) if isinstance(old_spec, dict) else None
    had = {n for c in before if (n := _name(c)) is not None} if isinstance(before, list) else set()
    items = [(EPHEMERAL, index, container, (*base, EPHEMERAL, index), f"{EPHEMERAL}[{index}]")
             for index, container in enumerate(found) if _name(container) not in had]
    return envs_of(items, names, service_links(spec))


def _name(container: Any) -> str | None:
    """A container's name when it has one (a name of another type is none: it matches no other)."""
    name = container.get("name") if isinstance(container, dict) else None
    return name if isinstance(name, str) else None


def _raw_env(env: list[Any]) -> tuple[RawEnv, ...]:
    """Every entry of an env as the expansion reads it (an entry of another shape: a name set to empty,
    so positions stay)."""
    out = []
    for item in env:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            out.append(RawEnv("", ""))
            continue
        source = item.get("valueFrom")
        if isinstance(source, dict):
            out.append(RawEnv(name, None, next(iter(source), "")))
        else:
            value = item.get("value")
            out.append(RawEnv(name, value if isinstance(value, str) else ""))
    return tuple(out)


def _expanded(entries: list[EnvEntry], context: tuple[RawEnv, ...], prefixes: tuple[str, ...],
              links: bool) -> list[EnvEntry]:
    """``entries`` with each value that has a "$" as the kubelet expands it."""
    values = expanded_values(context, [e.index for e in entries if e.value and "$" in e.value], prefixes, links)
    out = []
    for entry in entries:
        value = values.get(entry.index)
        if value is None:
            out.append(entry)
        elif isinstance(value, Unknown):
            out.append(EnvEntry(entry.index, entry.name, None, value.shown, entry.value))
        else:
            out.append(EnvEntry(entry.index, entry.name, value, "", entry.value))
    return out


def envs_of(items: Iterable[tuple[str, int, Any, Path, str]], names: Names,
            links: bool = True) -> tuple[ContainerEnv, ...]:
    """``container_envs`` over (group, index, container, its path, its name when it gives none): a pod
    spec's containers, or a custom workload's, wherever its pods keep them (a TrainJob's trainer is the
    pod's container named node). ``links``: the pod gets service-link variables."""
    judged = judged_names(names.env)
    out = []
    for group, index, container, path, unnamed in items:
        if not isinstance(container, dict):
            continue
        env, env_from = container.get("env"), container.get("envFrom")
        if not env and not env_from:
            continue
        entries: list[EnvEntry] = []
        if env:
            if not isinstance(env, list):
                raise ShapeError((*path, "env"), f"must be a list, got {type(env).__name__}")
            try:  # a pod lists dozens, and mostly none judged: one pass in C says so
                listed = list(map(_NAME_OF, env))
                positions: Iterable[int] = () if judged.isdisjoint(listed) else \
                    [position for position, name in enumerate(listed) if name in judged]
            except (AttributeError, TypeError):  # an entry that is no object, a name that cannot be hashed
                positions = range(len(env))  # the loop below says which
            for position in positions:
                raw = env[position]
                if not isinstance(raw, dict):
                    raise ShapeError((*path, "env", position), f"must be an object, got {type(raw).__name__}")
                name = raw.get("name")
                if isinstance(name, str) and name in judged:  # a name of another type is no name judged
                    entries.append(_entry(raw, name, position, (*path, "env")))
        sources, others = _sources(env_from, (*path, "envFrom"), judged) if env_from else ((), ())
        context: tuple[RawEnv, ...] = ()
        if any(e.value and "$" in e.value for e in entries):  # the kubelet expands it: read the whole env
            context = _raw_env(env if isinstance(env, list) else [])
            entries = _expanded(entries, context, (*(s.prefix for s in sources), *others), links)
        if entries or sources:
            name = container.get("name")
            out.append(ContainerEnv(group, index, str(name) if name is not None else unnamed,
                                    tuple(entries), sources, path, context, others if context else ()))
    return tuple(out)


