"""A walk of a custom resource's OpenAPI schema for everything that can put GPU requests or environment
variables into pods: the places shaped like a pod template, a PodSpec, a container, a container list,
``env``, ``envFrom`` or ``resources``, and the subtrees marked ``x-kubernetes-preserve-unknown-fields``
(any field at all can sit there). ``tests/domain/test_workload_crd_coverage.py`` holds each kind's table
(policies/model/workloads.py) to what the walk finds in the projects' full CRDs (tests/data/workload-crds/full).

Shapes are recognised by the fields Kubernetes' own types have (k8s.io/api core/v1: Container has name,
image, env, resources; PodSpec has containers; PodTemplateSpec has metadata and spec; EnvVar has name,
value, valueFrom; EnvFromSource has configMapRef and secretRef; ResourceRequirements has limits,
requests and claims), so a project's own type that embeds one (KServe's predictor, Kubeflow Trainer's
trainer) is found too: anything with env or resources is found by those leaves.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from policies.model.field_paths import EVERY_ITEM, EVERY_VALUE, Pattern, render_pattern
from policies.model.workloads import Holder, WorkloadKind

Schema = dict[str, Any]
FULL = Path(__file__).resolve().parents[1] / "data" / "workload-crds" / "full"


@cache
def full_crds() -> tuple[dict[str, Any], ...]:
    """The projects' full CRDs, read once per test process. Parsing 26 MB of YAML takes half a minute
    even with the C loader, so the parsed documents are kept as JSON (a second to read) in the user's
    cache, keyed by the hash of the compressed files: a changed or added CRD is parsed afresh."""
    paths = sorted(FULL.glob("*.yaml.gz"))
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in paths)).hexdigest()
    kept = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpushare-tests" / f"crds-{digest}.json"
    with contextlib.suppress(OSError, ValueError):
        return tuple(json.loads(kept.read_bytes()))
    crds = tuple(yaml.load(gzip.decompress(p.read_bytes()), Loader=yaml.CSafeLoader) for p in paths)
    with contextlib.suppress(OSError):  # no cache (a read-only home) only costs the time
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(crds), encoding="utf-8")
        partial.replace(kept)  # whole or absent: parallel test processes may write it at once
    return crds


def served(kind: WorkloadKind, crds: Iterable[dict[str, Any]] | None = None) -> dict[str, Schema]:
    """Every served version of the kind in ``crds`` (default: the full CRDs; MPIJob has two: the Training
    Operator's and the MPI Operator's), by version."""
    found = {}
    for crd in full_crds() if crds is None else crds:
        spec = crd["spec"]
        if (spec["group"], spec["names"]["kind"]) == (kind.group, kind.kind):
            assert spec["names"]["plural"] == kind.plural
            assert (spec["scope"] == "Namespaced") == kind.namespaced
            found.update({v["name"]: v["schema"]["openAPIV3Schema"] for v in spec["versions"] if v["served"]})
    return found
# Deeper than any real CRD's nesting (Argo's go to about 40 levels): a guard against a recursive schema.
MAX_DEPTH = 80


def _properties(node: Schema) -> dict[str, Schema]:
    properties = node.get("properties")
    return properties if isinstance(properties, dict) else {}


def is_resources(node: Schema) -> bool:
    """A ResourceRequirements."""
    return {"limits", "requests"} <= set(_properties(node))


def is_env(node: Schema) -> bool:
    """A list of EnvVar: name, value, valueFrom (with fieldRef and secretKeyRef, which Argo's parameters
    and HTTP headers, also named name, value and valueFrom, do not both have)."""
    items = node.get("items")
    if node.get("type") != "array" or not isinstance(items, dict):
        return False
    fields = _properties(items)
    value_from = fields.get("valueFrom")
    return {"name", "value"} <= set(fields) and isinstance(value_from, dict) and {"fieldRef", "secretKeyRef"} <= set(
        _properties(value_from))


def is_env_from(node: Schema) -> bool:
    items = node.get("items")
    return node.get("type") == "array" and isinstance(items, dict) and {"configMapRef", "secretRef"} <= set(
        _properties(items))


def is_container(node: Schema) -> bool:
    fields = set(_properties(node))
    return {"name", "image"} <= fields and bool(fields & {"env", "envFrom", "resources", "command"})


def is_container_list(node: Schema) -> bool:
    items = node.get("items")
    return node.get("type") == "array" and isinstance(items, dict) and is_container(items)


def is_pod_spec(node: Schema) -> bool:
    containers = _properties(node).get("containers")
    return isinstance(containers, dict) and is_container_list(containers)


def is_pod_template(node: Schema) -> bool:
    fields = _properties(node)
    return "metadata" in fields and isinstance(fields.get("spec"), dict) and is_pod_spec(fields["spec"])


SHAPES = (("pod template", is_pod_template), ("PodSpec", is_pod_spec), ("container list", is_container_list),
          ("container", is_container), ("env", is_env), ("envFrom", is_env_from), ("resources", is_resources))


@dataclass(frozen=True)
class Place:
    pattern: Pattern
    shape: str  # one of SHAPES' names, or "preserve-unknown-fields"

    @property
    def text(self) -> str:
        return render_pattern(self.pattern)


def walk(schema: Schema, pattern: Pattern = (), depth: int = 0) -> Iterator[Place]:
    """Every place of the schema with one of the shapes (the first that fits), and every subtree that
    preserves unknown fields, in schema order; ``status`` is the controller's, never a pod's."""
    assert depth < MAX_DEPTH, f"{render_pattern(pattern)}: deeper than {MAX_DEPTH} levels"
    for name, test in SHAPES:
        if test(schema):
            yield Place(pattern, name)
            break
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        yield Place(pattern, "preserve-unknown-fields")
    for name, child in _properties(schema).items():
        if not (pattern == () and name == "status") and isinstance(child, dict):
            yield from walk(child, (*pattern, name), depth + 1)
    for key, step in (("items", EVERY_ITEM), ("additionalProperties", EVERY_VALUE)):
        child = schema.get(key)
        if isinstance(child, dict):
            yield from walk(child, (*pattern, step), depth + 1)


def _holder_base(pattern: Pattern, holder: Holder) -> Pattern:
    return (*pattern, *holder.field, *((EVERY_ITEM,) if holder.many else ()))


def read_places(kind: WorkloadKind) -> dict[Pattern, set[str]]:
    """What the kind's table reads, by pattern: the shapes it reads there. A container is read with
    its env, envFrom and resources; a container list with its items; a PodSpec with its containers; a
    pod template with its spec."""
    read: dict[Pattern, set[str]] = {}

    def mark(pattern: Pattern, *shapes: str) -> None:
        read.setdefault(pattern, set()).update(shapes)

    for location in kind.locations:
        for holder in location.shape.holders:
            base = _holder_base(location.pattern, holder)
            if holder.resources:
                mark(base, "resources")
                continue
            mark(base, "container")
            mark((*base, holder.resources_field or "resources"), "resources")
            mark((*base, "env"), "env")
            mark((*base, "envFrom"), "envFrom")
            if holder.many:
                mark((*location.pattern, *holder.field), "container list")
    # A PodSpec whose containers are read is read (its init containers are a holder of every shape that
    # reads its containers); a pod template whose spec is.
    for pattern in [p for p, shapes in read.items() if "container list" in shapes]:
        if pattern[-1:] == ("containers",):
            mark(pattern[:-1], "PodSpec")
            if pattern[-2:-1] == ("spec",):
                mark(pattern[:-2], "pod template")
    return read


def unread(kind: WorkloadKind, schema: Schema, reason: Callable[[Place, Schema], str | None]) -> list[str]:
    """The places of ``schema`` with a shape the table does not read and for which ``reason`` (given the
    place and the whole schema) gives none, and every preserve-unknown-fields subtree it gives none for,
    as "SHAPE at PATH"."""
    read = read_places(kind)
    return [f"{place.shape} at {place.text}" for place in walk(schema)
            if place.shape not in read.get(place.pattern, set()) and reason(place, schema) is None]


def node_at(schema: Schema, pattern: Pattern) -> Schema:
    node = schema
    for part in pattern:
        if part == EVERY_ITEM:
            node = node["items"]
        elif part == EVERY_VALUE:
            node = node["additionalProperties"]
        else:
            node = node["properties"][part]
    return node
