"""The workload table against the projects' published CRD schemas (the full CRDs in
tests/data/workload-crds/full; the samples are validated against the trimmed copies in
tests/data/workload-crds, origins in ORIGIN.md there): every path of the table is walked through its
kind's schema to what the table says it holds, and every place in the schema that can hold GPU
requests (a ResourceRequirements) is either a path of the table or set aside with a reason
(tests/domain/test_workload_crd_coverage.py walks env, envFrom and every other pod-shaped field too)."""

from __future__ import annotations

import contextlib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.generate.doc_tables import kinds_table
from policies.model.field_paths import EVERY_ITEM, EVERY_VALUE, Pattern, render_pattern
from policies.model.resources import ShapeError
from policies.model.workloads import BUILT_IN, Holder, Location, WorkloadKind
from tests.support.crd_walk import served
from tests.support.crds import invalid, prune
from tests.support.helpers import DATA
from tests.support.profiles import examples
from tests.support.workload_cases import CASES

CRDS = DATA / "workload-crds"
Schema = dict[str, Any]


@cache
def crds() -> list[dict[str, Any]]:
    """Read once per test process (the C loader: these are half a megabyte of YAML)."""
    return [yaml.load(p.read_text(), Loader=yaml.CSafeLoader) for p in sorted(CRDS.glob("*.yaml"))]


def schemas(kind: WorkloadKind) -> dict[str, Schema]:
    """Every served version of the kind's full CRDs (tests/data/workload-crds/full)."""
    return served(kind)


def trimmed_schemas(kind: WorkloadKind) -> dict[str, Schema]:
    """Every served version of the kind's trimmed CRDs (MPIJob has two: the Training Operator's and the MPI
    Operator's), by version."""
    return served(kind, crds())


def walk(schema: Schema, pattern: Pattern) -> Schema:
    """The schema node ``pattern`` reaches: a field through properties, * through additionalProperties (a
    map), [] through items (a list); AssertionError where the schema has no such way."""
    node = schema
    for depth, part in enumerate(pattern):
        where = render_pattern(pattern[:depth + 1])
        if part == EVERY_ITEM:
            assert node.get("type") == "array", f"{where}: not a list in the schema"
            node = node["items"]
        elif part == EVERY_VALUE:
            assert node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict), \
                f"{where}: not a map in the schema"
            node = node["additionalProperties"]
        else:
            assert part in (node.get("properties") or {}), f"{where}: no such field in the schema"
            node = node["properties"][part]
    return node


def is_resource_requirements(node: Schema) -> bool:
    properties = node.get("properties") or {}
    return {"limits", "requests", "claims"} <= set(properties) and all(
        properties[s].get("additionalProperties", {}).get("x-kubernetes-int-or-string") for s in ("limits", "requests"))


def holder_pattern(location: Location, holder: Holder) -> Pattern:
    """Where the ResourceRequirements of the holder's containers are."""
    if holder.resources:
        return (*location.pattern, *holder.field)
    return (*location.pattern, *holder.field, *((EVERY_ITEM,) if holder.many else ()),
            holder.resources_field or "resources")


def resource_requirements(schema: Schema, pattern: Pattern = ()) -> list[Pattern]:
    """Every place in the schema that holds a ResourceRequirements, as a pattern."""
    if is_resource_requirements(schema):
        return [pattern]
    found = []
    for name, child in (schema.get("properties") or {}).items():
        if not (pattern == () and name == "status"):
            found += resource_requirements(child, (*pattern, name))
    if isinstance(schema.get("items"), dict):
        found += resource_requirements(schema["items"], (*pattern, EVERY_ITEM))
    if isinstance(schema.get("additionalProperties"), dict):
        found += resource_requirements(schema["additionalProperties"], (*pattern, EVERY_VALUE))
    return found


def set_aside(schema: Schema, pattern: Pattern) -> str | None:
    """Why a ResourceRequirements is not a place of the table, or None."""
    if "ephemeralContainers" in pattern:
        # Kubernetes documentation, "Ephemeral Containers": resources are disallowed for them.
        return "an ephemeral container has no resources"
    parent = walk(schema, pattern[:-1])
    if pattern[-1] == "resources" and "containers" in (parent.get("properties") or {}):
        # Kubernetes documentation, "Assign Pod-level CPU and memory resources": pod-level resources
        # take cpu, memory and hugepages only.
        return "pod-level resources take no extended resources"
    if pattern[-1] == "podResources":  # Argo: "pod-level resource requests and limits" (Template.PodResources)
        return "pod-level resources take no extended resources"
    return None


KINDS = [pytest.param(kind, id=kind.name) for kind in BUILT_IN]


def missing_in(schema: Schema, pattern: Pattern) -> bool:
    """Whether the schema lacks a field on the way (an older version without a newer field: objects of
    that version cannot carry it, the path finds nothing there)."""
    try:
        walk(schema, pattern)
    except AssertionError as exc:
        return "no such field" in str(exc)
    return False


@pytest.mark.parametrize("kind", KINDS)
def test_every_path_of_the_table_reaches_what_it_says_in_the_schema(kind):
    found = schemas(kind)
    assert set(kind.versions) <= set(found), f"{kind.name}: versions {kind.versions}, the CRDs serve {sorted(found)}"
    for version in kind.versions:
        schema = found[version]
        for location in kind.locations:
            if version != kind.versions[0] and missing_in(schema, location.pattern):
                continue  # a field newer than this version (KubeRay v1alpha1 has no historyServerOptions)
            node = walk(schema, location.pattern)
            assert node.get("type") == "object", f"{version} {location.text}: not an object"
            for holder in location.shape.holders:
                pattern = holder_pattern(location, holder)
                if missing_in(schema, pattern) and "env" in walk(schema, pattern[:-1]).get("properties", {}):
                    continue  # a container of env only: a TrainJob's initializers, its runtime patches' containers
                assert is_resource_requirements(walk(schema, pattern)), \
                    f"{version} {location.text}: {render_pattern(holder.field)} holds no container resources"
            if location.shape.spec is not None:  # the pods' scheduler, read by GW001
                assert walk(schema, (*location.pattern, *location.shape.spec, "schedulerName"))["type"] == "string"
        for pattern in kind.patches:
            assert walk(schema, pattern)["type"] == "string"
        if kind.scheduler is not None:
            assert walk(schema, kind.scheduler.pattern)["type"] == "string"


@pytest.mark.parametrize("kind", KINDS)
def test_every_place_of_the_schema_that_holds_gpu_requests_is_in_the_table_or_set_aside_with_a_reason(kind):
    covered = {holder_pattern(location, holder) for location in kind.locations for holder in location.shape.holders}
    for version, schema in schemas(kind).items():
        places = resource_requirements(schema)
        assert places, f"{kind.name} {version}: the schema has no containers"
        missing = [render_pattern(p) for p in places if p not in covered and set_aside(schema, p) is None]
        assert missing == [], f"{kind.name} {version}: GPU requests the table does not read"


def test_the_set_aside_places_are_the_ones_kubernetes_forbids_extended_resources_in():
    fields: dict[str, set[str]] = {}
    for kind in BUILT_IN:
        for schema in schemas(kind).values():
            for pattern in resource_requirements(schema):
                reason = set_aside(schema, pattern)
                if reason is not None:
                    fields.setdefault(reason, set()).add(render_pattern(pattern).rpartition(".")[2])
    assert fields == {"an ephemeral container has no resources": {"resources"},
                      "pod-level resources take no extended resources": {"resources", "podResources"}}


@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_every_sample_is_a_valid_object_of_its_crd(case):
    obj = case.manifest()
    version = obj["apiVersion"].rpartition("/")[2]
    schema = trimmed_schemas(case.kind)[version]
    assert prune(obj, schema) == []
    assert invalid(obj, schema) is None
    broken = case.with_mistake()
    assert prune(broken, schema) == [] and invalid(broken, schema) is None


def test_every_vendored_crd_is_named_in_its_origin_file():
    origin = (CRDS / "ORIGIN.md").read_text()
    names = sorted(p.name for p in CRDS.glob("*.yaml"))
    assert names and all(f"| {name} |" in origin for name in names)
    assert {k.group for k in BUILT_IN} == {c["spec"]["group"] for c in crds()}


@pytest.mark.processes
def test_the_trimming_tool_keeps_what_the_tests_read(tmp_path: Path):
    # The tool is data's documentation: it runs, and trimming a trimmed CRD changes nothing.
    import subprocess
    import sys

    sample = CRDS / "kubeflow.org_pytorchjobs.yaml"
    done = subprocess.run([sys.executable, str(CRDS / "trim.py"), str(sample)], capture_output=True, text=True,
                          check=True)
    assert yaml.safe_load(done.stdout) == yaml.safe_load(sample.read_text())


def test_the_documented_table_of_kinds_is_the_table():
    text = (DATA.parent.parent / "docs" / "workloads.md").read_text()
    start = text.index("<!-- generated from policies/model/workloads.py")
    block = text[text.index("\n", start) + 1:text.index("<!-- end of generated table -->", start)]
    assert block == kinds_table(), "docs/workloads.md's table of kinds is stale: run `gpushare generate`"


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=3)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
                        ["spec", "template", "containers", "initContainers", "resources", "limits", "requests", "name",
                         "aliyun.com/gpu-mem", "schedulerName", "podSpecPatch", "x"]), inner, max_size=4)),
                    max_leaves=16)


@settings(max_examples=examples(80), deadline=None)
@given(data=st.data())
def test_any_shape_at_any_place_of_a_custom_workload_is_judged_or_named_malformed(data, engine):
    # What a minimal CRD lets through, wherever the table looks: the engine judges it or raises the
    # ShapeError the webhook answers with a 400 and check with exit 2, never anything else.
    case = data.draw(st.sampled_from(CASES))
    obj = case.manifest()
    pattern = data.draw(st.sampled_from([loc.pattern for loc in case.kind.locations] + list(case.kind.patches)))
    node: Any = obj
    for part in pattern[:data.draw(st.integers(0, len(pattern) - 1))]:
        if isinstance(node, list) and node:
            node = node[0]
        elif isinstance(node, dict) and part not in (EVERY_ITEM, EVERY_VALUE):
            node = node.setdefault(part, {})
        elif isinstance(node, dict) and node:
            node = next(iter(node.values()))
    if isinstance(node, dict):
        field = data.draw(st.sampled_from(["template", "spec", "containers", "resources", pattern[-1]]))
        node[field] = data.draw(JSON)
    with contextlib.suppress(ShapeError):
        engine.validate(engine.subject(obj["kind"], obj, namespace="default"))
