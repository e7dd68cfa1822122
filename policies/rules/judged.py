"""What of an object the rules judge, per kind: an UPDATE is judged on what it changes.

Kubernetes ratchets its own validation this way ("validation ratcheting", KEP-4008: an update may
keep an invalid value it does not change) and Kyverno's ``allowExistingViolations`` does the same
for policies. Here an UPDATE that leaves every judged part as it was has nothing new to judge: the
deploy's matchConditions do not send it (so an outage does not block it either), and where one
arrives anyway (an older registration, ``gpushare check``) the engine admits it and only warns
about what was already there (policies/admission/engine.py).

The parts come from the rules' declarations (policies/rules/relevance.py): the containers, env and
annotations a rule declares relevant live in the pod spec or template (compared whole: every pod
rule reads its spec, its pods' labels and annotations), the trigger annotations and the keys a
rule ``reads`` on the object's own metadata (compared key by key, so a controller's bookkeeping
annotations change nothing judged), and for a node the labels and annotations a node rule reads
(compared key by key). Everything else (replicas, status, finalizers, other labels) is never
judged. ``unchanged`` here and ``cel_changed`` (the CEL the matchConditions carry) read the same
parts the same way, and tests/deploy/test_match_conditions.py holds them together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from policies.model.resources import CUSTOM_WORKLOADS, POD_SPEC_PATHS
from policies.model.settings import PolicySettings
from policies.rules.cel import string_list


class Declared(Protocol):
    """What the rules' declarations resolve to (policies/rules/relevance.py ``Triggers``), as read here."""

    @property
    def annotations(self) -> frozenset[str]: ...

    @property
    def node_labels(self) -> frozenset[str]: ...

    @property
    def read_keys(self) -> frozenset[str]: ...

_ABSENT: list[Any] = []


@dataclass(frozen=True, slots=True)
class Part:
    """One judged part: the value at ``path`` from the object's root, whole, or only ``keys`` of the
    map there."""

    path: tuple[str, ...]
    keys: frozenset[str] | None = None

    def value(self, obj: Any) -> list[Any]:
        """What the CEL reads here: [value] when present, [] when not; keyed: one such list a key."""
        for part in self.path:
            obj = obj.get(part) if isinstance(obj, dict) else None
            if obj is None:
                break
        if self.keys is None:
            return _ABSENT if obj is None else [obj]
        found = obj if isinstance(obj, dict) else {}
        return [[found[k]] if k in found else _ABSENT for k in sorted(self.keys)]

    def cel(self, root: str) -> str:
        """The same in CEL, over ``root`` (object or oldObject). metadata is never absent from an
        object the API server sends, so only the levels below it are tested."""
        dotted = ".".join((root, *self.path))
        guard = " && ".join(f"has({'.'.join((root, *self.path[:i]))})" for i in range(1, len(self.path) + 1)
                            if self.path[:i] != ("metadata",))
        if self.keys is None:
            return f"({guard} ? [{dotted}] : [])" if guard else f"[{dotted}]"
        present = f"{guard} && k in {dotted}" if guard else f"k in {dotted}"
        return f"{string_list(self.keys)}.map(k, {present} ? [{dotted}[k]] : [])"

    def describe(self) -> str:
        where = ".".join(self.path) or "the whole object"
        if self.keys is None:
            return f"`{where}`"
        if not self.keys:
            return ""
        return f"`{where}`: " + ", ".join(f"`{k}`" for k in sorted(self.keys))


@dataclass(frozen=True, slots=True)
class JudgedParts:
    """Every part the rules judge on objects of one kind."""

    kind: str
    parts: tuple[Part, ...]

    def unchanged(self, obj: dict[str, Any], old: dict[str, Any] | None) -> bool:
        """Whether an UPDATE from ``old`` to ``obj`` leaves every judged part as it was."""
        return old is not None and all(p.value(obj) == p.value(old) for p in self.parts)

    def cel_changed(self) -> str:
        """CEL: the UPDATE changes some judged part (object against oldObject)."""
        kept = [p for p in self.parts if p.keys is None or p.keys]
        if not kept:
            return "false"
        return f"[{', '.join(p.cel('object') for p in kept)}] != [{', '.join(p.cel('oldObject') for p in kept)}]"

    def describe(self) -> str:
        """The parts in words; keyed parts with the same keys share their list (a node's labels and
        annotations)."""
        merged: dict[frozenset[str] | None, list[Part]] = {}
        for part in self.parts:
            if part.keys is None or part.keys:
                merged.setdefault(part.keys if part.keys is not None else None, []).append(part)
        out = []
        for keys, parts in merged.items():
            if keys is None:
                out += [p.describe() for p in parts]
            else:
                where = " and ".join(f"`{'.'.join(p.path)}`" for p in parts)
                out.append(f"{where}: " + ", ".join(f"`{k}`" for k in sorted(keys)))
        return "; ".join(out)


def deleting(obj: dict[str, Any]) -> bool:
    """The object carries a deletionTimestamp: only finalizers can change now, so nothing is judged."""
    meta = obj.get("metadata")
    return isinstance(meta, dict) and bool(meta.get("deletionTimestamp"))


# CEL: an UPDATE of an object being deleted (removing a finalizer) is never sent.
CEL_NOT_DELETING = "!has(object.metadata.deletionTimestamp)"


def judged_parts(kind: str, annotations: frozenset[str], node_keys: frozenset[str],
                 pod_labels: frozenset[str] = frozenset()) -> JudgedParts:
    """The parts of ``kind`` the rules judge: ``annotations`` are the annotation keys they read on an
    object's own metadata, ``node_keys`` the label and annotation keys node rules read, ``pod_labels``
    the label keys read on a Pod. ``kind`` is a Kubernetes kind, or ``CUSTOM_WORKLOADS`` for the
    custom workloads (policies/model/workloads.py)."""
    own = Part(("metadata", "annotations"), annotations)
    if kind == "Node":
        return JudgedParts(kind, (Part(("metadata", "labels"), node_keys), Part(("metadata", "annotations"),
                                                                                 node_keys)))
    if kind == CUSTOM_WORKLOADS:  # pod locations sit anywhere under spec (the workload table says where)
        return JudgedParts(kind, (Part(("spec",)), own))
    if kind == "Pod":  # the scheduler's and controllers' annotations and labels are not judged
        return JudgedParts(kind, (Part(("spec",)), Part(("metadata", "labels"), pod_labels), own))
    path = POD_SPEC_PATHS.get(kind)
    if path is None:  # a kind judged on CREATE only (Binding): the whole object
        return JudgedParts(kind, (Part(()),))
    return JudgedParts(kind, (Part(tuple(map(str, path[:-1]))), own))


def pod_label_keys(settings: PolicySettings) -> frozenset[str]:
    """The labels read on a Pod: the multi-GPU label (GS009) and every key a config grant selects on."""
    keys = {settings.names.labels.pod_gpu_count}
    for grant in settings.exemptions.grants:
        if grant.selector is not None:
            keys.update(grant.selector.match_labels)
            keys.update(r.key for r in grant.selector.match_expressions)
    return frozenset(keys)


def parts_for(kind: str, triggers: Declared, settings: PolicySettings) -> JudgedParts:
    """The judged parts of ``kind`` under the union of its rules' declarations (``triggers``)."""
    if kind == "Node":
        return judged_parts(kind, frozenset(), triggers.node_labels | triggers.annotations | triggers.read_keys)
    return judged_parts(kind, triggers.annotations | triggers.read_keys, frozenset(),
                        pod_label_keys(settings) if kind == "Pod" else frozenset())


# The kinds whose UPDATEs a rule judges, in the order the tables list them.
UPDATED_KINDS = (*(k for k in POD_SPEC_PATHS), CUSTOM_WORKLOADS, "Node")


def markdown(parts_of: Callable[[str], JudgedParts]) -> str:
    """docs/design.md's table: per kind, what an UPDATE must change to be judged (kinds alike share a row)."""
    rows: dict[str, list[str]] = {}
    for kind in UPDATED_KINDS:
        rows.setdefault(parts_of(kind).describe(), []).append(kind)
    lines = ["| kinds | judged on UPDATE (anything else an UPDATE changes is not) |", "|---|---|"]
    lines += [f"| {', '.join(kinds)} | {described} |" for described, kinds in rows.items()]
    return "\n".join(lines)
