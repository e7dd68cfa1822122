"""Coverage from the CRDs themselves: every supported kind's full upstream CRD, at the release its table
entry names (tests/data/workload-crds/full, origin in ORIGIN.md there), is walked (tests/support/crd_walk.py),
and every field shaped like a pod template, a PodSpec, a container, a container list, env, envFrom or
resources is one the kind's table reads (policies/model/workloads.py), or is set aside below with the reason
it puts no GPU request or environment variable the rules judge into a pod. Every subtree marked
``x-kubernetes-preserve-unknown-fields`` is listed with what it holds and why it is read or not. Adding a
kind, or a CRD version that adds such a field, fails here until the table covers it.

The full CRDs are kept gzip-compressed: 26 MB of YAML (Argo's four are 2.7-2.9 MB each) are 2.2 MB so,
byte for byte what the projects publish (``zcat`` gives the blob ORIGIN.md names).
"""

from __future__ import annotations

import copy

import pytest

from policies.model.workloads import BUILT_IN, WorkloadKind
from tests.support.crd_walk import FULL, Place, Schema, full_crds, is_pod_spec, node_at, served, unread, walk
from tests.support.helpers import DATA

# Kubernetes documentation, "Ephemeral Containers": they are added to a running pod through the
# ephemeralcontainers subresource, never with the pod (the API server refuses a pod created with them),
# and "ephemeral containers ... have no guarantees for resources".
EPHEMERAL = "ephemeral containers cannot be set when the pod is created, and take no resources"
# Kubernetes documentation, "Assign Pod-level CPU and memory resources": cpu, memory and hugepages only.
POD_LEVEL = "pod-level resources take cpu, memory and hugepages only, no extended resources"
PVC = "a PersistentVolumeClaim's storage request, no container's"
# What each x-kubernetes-preserve-unknown-fields subtree holds, and why it is not read (Argo Workflows
# v4.1.2, pkg/apis/workflow/v1alpha1/workflow_types.go).
PRESERVED = {
    "inline": "a template written inline in a step or DAG task (recursive, so the CRD keeps it schemaless); the "
              "pod it creates is judged by the pod webhook when the workflow controller creates it",
    "withItems": "the items a step or task loops over, substituted into its parameters as text; no pod field",
    "plugin": "an executor plugin template's arguments, read by the plugin in the workflow's agent pod; no pod "
              "field",
}
# KServe v0.20.0 (pkg/apis/serving/v1alpha1/servingruntime_types.go, BuiltInAdapter): the env of the
# adapter that the separate ModelMesh Serving controller runs beside the runtime in ModelMesh's own
# Deployment; KServe's predictor pods never get it, and ModelMesh's pods are judged by the pod webhooks.
MODELMESH_ADAPTER = ("the env of ModelMesh's built-in adapter, which ModelMesh Serving's controller puts in "
                     "its own Deployment's pods (judged by the pod webhooks), not in KServe's predictor pods")
EXACT = {"env at spec.builtInAdapter.env": MODELMESH_ADAPTER}


def reason(place: Place, schema: Schema) -> str | None:
    """Why a place the table does not read puts nothing the rules judge into a pod; None if it does."""
    pattern = place.pattern
    if "ephemeralContainers" in pattern:
        return EPHEMERAL
    if place.shape == "preserve-unknown-fields":
        return PRESERVED.get(str(pattern[-1]))
    if place.shape == "resources":
        if pattern[-1] == "podResources" or (pattern[-1] == "resources" and is_pod_spec(node_at(schema, pattern[:-1]))):
            return POD_LEVEL  # Argo's podResources: "pod-level resource requests and limits"
        if {"volumeClaimTemplate", "volumeClaimTemplates", "volumeClaim", "volumeClaimPolicies"} & set(pattern):
            return PVC
    return EXACT.get(f"{place.shape} at {place.text}")


KINDS = [pytest.param(kind, id=kind.name) for kind in BUILT_IN]


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_that_reaches_a_pod_is_read_or_set_aside_with_a_reason(kind):
    versions = served(kind)
    assert versions, f"{kind.name}: no full CRD in {FULL}"
    assert set(kind.versions) <= set(versions), f"{kind.name}: the table names versions its CRD does not serve"
    for version, schema in versions.items():
        assert unread(kind, schema, reason) == [], f"{kind.name} {version}: fields that reach pods, not read"


def test_the_walk_finds_a_planted_field_no_table_reads():
    # A CRD release that adds a sidecar list to RayCluster's head group, and an env beside it.
    kind = next(k for k in BUILT_IN if k.name == "RayCluster.ray.io")
    schema = copy.deepcopy(served(kind)["v1"])
    head = schema["properties"]["spec"]["properties"]["headGroupSpec"]["properties"]
    containers = head["template"]["properties"]["spec"]["properties"]["containers"]
    head["sidecars"] = copy.deepcopy(containers)
    head["extraEnv"] = copy.deepcopy(containers["items"]["properties"]["env"])
    head["loose"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert unread(kind, served(kind)["v1"], reason) == []
    assert unread(kind, schema, reason) == [
        "container list at spec.headGroupSpec.sidecars", "container at spec.headGroupSpec.sidecars[]",
        "env at spec.headGroupSpec.sidecars[].env", "envFrom at spec.headGroupSpec.sidecars[].envFrom",
        "resources at spec.headGroupSpec.sidecars[].resources", "env at spec.headGroupSpec.extraEnv",
        "preserve-unknown-fields at spec.headGroupSpec.loose"]


def test_a_kind_without_its_table_entry_fails():
    # A kind whose table reads nothing: every field of its CRD that reaches a pod is reported.
    kind = next(k for k in BUILT_IN if k.name == "JobSet.jobset.x-k8s.io")
    bare = WorkloadKind(kind.group, kind.kind, kind.plural, kind.versions, (), kind.source)
    missing = unread(bare, served(kind)["v1alpha2"], reason)
    assert "pod template at spec.replicatedJobs[].template.spec.template" in missing
    assert "resources at spec.replicatedJobs[].template.spec.template.spec.containers[].resources" in missing


def test_every_preserved_subtree_of_every_crd_is_explained():
    found = {str(p.pattern[-1]) for kind in BUILT_IN for schema in served(kind).values() for p in walk(schema)
             if p.shape == "preserve-unknown-fields"}
    assert found == set(PRESERVED)


def test_every_full_crd_is_named_in_the_origin_file_at_the_table_s_release():
    origin = (DATA / "workload-crds" / "ORIGIN.md").read_text()
    names = sorted(p.name.removesuffix(".gz") for p in FULL.glob("*.yaml.gz"))
    assert names and all(f"| {name} |" in origin for name in names)
    for kind in BUILT_IN:
        release = kind.source.rpartition("release ")[2]
        assert release and release in origin, kind.name
    assert {(k.group, k.kind) for k in BUILT_IN} == {(c["spec"]["group"], c["spec"]["names"]["kind"])
                                                     for c in full_crds()}
