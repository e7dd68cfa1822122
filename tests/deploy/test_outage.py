"""What an outage blocks, from the registrations themselves (docs/operations.md, "What an outage blocks").

The deploy's webhook configurations are rendered (kustomize base, and with each opt-in component
that changes them); every webhook with ``failurePolicy: Fail`` refuses, while every replica is down,
exactly the requests its rules match and its matchCondition selects. The table in
docs/operations.md is generated from those registrations (``gpushare generate``,
policies/generate/doc_tables.py), so a new registration shows up in it (the test fails until the
table is regenerated), and the operations the cluster's own machinery needs (Kubernetes "Admission
Webhook Good Practices": exclude operations that are Kubernetes responding to unavoidable
incidents) are evaluated against every fail-closed registration with cel-python: none may be
refused. A user's bad GPU pod and a GPU node's mode change are, so the evaluation is known to find
what it looks for.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import celpy
import pytest

from policies.generate.doc_tables import outage_table, registrations
from tests.deploy.test_deploy import KUSTOMIZE, render_kustomize, render_with_components
from tests.support.cluster_builders import gpu_node
from webhook.settings import Settings

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS_DOC = ROOT / "docs" / "operations.md"
BLOCK = re.compile(r"(<!-- generated from the rendered webhook registrations[^>]*-->\n)(?P<table>.*?)"
                   r"(<!-- end of generated table -->)", re.S)
COMPONENTS = KUSTOMIZE / "components"
SETTINGS = Settings()
Obj = dict[str, Any]


def _rendered(tmp_path_factory: pytest.TempPathFactory, *components: str) -> list[Obj]:
    if not components:
        return render_kustomize()
    return render_with_components(tmp_path_factory.mktemp("outage"), *(COMPONENTS / c for c in components))


@pytest.fixture(scope="module")
def installs(tmp_path_factory) -> dict[str, list[tuple[str, Obj]]]:
    """The registrations of each install the docs describe: the base, and with each component."""
    return {"base": registrations(_rendered(tmp_path_factory)),
            "backstop": registrations(_rendered(tmp_path_factory, "backstop")),
            "custom-workloads": registrations(_rendered(tmp_path_factory, "custom-workloads"))}


# -- the table -----------------------------------------------------------------------------------------

def test_the_table_in_operations_md_is_what_the_registrations_give(installs):
    found = BLOCK.search(OPERATIONS_DOC.read_text())
    assert found, "docs/operations.md has no generated outage table"
    expected = outage_table(installs, SETTINGS)
    assert found["table"] == expected, (
        f"docs/operations.md's outage table is stale: run `gpushare generate`\n{expected}")


# -- what the cluster needs is never refused ---------------------------------------------------------------

def _rule_matches(hook: Obj, group: str, resource: str, sub: str, operation: str) -> bool:
    wanted = f"{resource}/{sub}" if sub else resource
    return any(group in rule["apiGroups"] and wanted in rule["resources"] and operation in rule["operations"]
               for rule in hook.get("rules", []))


def _namespace_matches(hook: Obj, namespace: str) -> bool:
    selector = hook.get("namespaceSelector")
    if not selector or not namespace:
        return True
    for expression in selector.get("matchExpressions", []):
        assert expression["key"] == "kubernetes.io/metadata.name"
        inside = namespace in expression["values"]
        if (expression["operator"] == "In") != inside:
            return False
    return True


def _condition_matches(hook: Obj, request: Obj, obj: Obj, old: Obj | None) -> bool:
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
                  "request": celpy.json_to_cel(request)}
    for condition in hook.get("matchConditions", []):
        result = env.program(env.compile(condition["expression"])).evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), f"{hook['name']}: CEL evaluation failed: {result!r}"
        if not result:
            return False
    return True


def refused_by(hooks: list[tuple[str, Obj]], group: str, resource: str, operation: str, obj: Obj,
               old: Obj | None = None, sub: str = "") -> list[str]:
    """The fail-closed webhooks that would refuse this request while every replica is down."""
    namespace = obj.get("metadata", {}).get("namespace", "")
    kind = obj.get("kind", "")
    request = {"operation": operation, "namespace": namespace, "subResource": sub,
               "kind": {"group": group, "version": "v1", "kind": kind},
               "resource": {"group": group, "version": "v1", "resource": resource}}
    return [hook["name"] for _, hook in hooks if hook["failurePolicy"] == "Fail"
            and _rule_matches(hook, group, resource, sub, operation) and _namespace_matches(hook, namespace)
            and _condition_matches(hook, request, obj, old)]


MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"
CONTROLLER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-5d8f7", "uid": "rs-uid",
              "controller": True, "blockOwnerDeletion": True}


def _pod(core: str = "33", owner: Obj | None = None) -> Obj:
    """A GPU pod that breaks GS001 (an object made before a rule was tightened, say)."""
    limits = {MEM: "4", CORE: core}
    meta: Obj = {"name": "train-5d8f7-x2z9q", "namespace": "team-a", "labels": {"app": "train"}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "cuda", "image": "cuda:12",
                                     "resources": {"limits": limits, "requests": dict(limits)}}]}}


def _workload(kind: str, owner: Obj | None = None) -> Obj:
    pod = _pod()
    template = {"metadata": {"labels": {"app": "train"}}, "spec": pod["spec"]}
    meta: Obj = {"name": "train", "namespace": "team-a", "labels": {"app": "train"}}
    if owner:
        meta["ownerReferences"] = [owner]
    spec: Obj = {"template": template}
    if kind in ("Deployment", "ReplicaSet"):
        spec.update({"replicas": 3, "selector": {"matchLabels": {"app": "train"}}})
    api = "apps/v1" if kind != "Job" else "batch/v1"
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}


def _changed(obj: Obj, change) -> tuple[Obj, Obj]:
    new = copy.deepcopy(obj)
    change(new)
    return new, obj


def _node() -> Obj:
    node = gpu_node("cn-beijing.10.0.0.7", "cgpu")
    node["spec"]["providerID"] = "alicloud://cn-beijing.i-2ze0gpu"  # any provider: GN004 would deny cgpu elsewhere
    return node


def _cluster_needs() -> list[tuple[str, str, str, str, Obj, Obj | None, str]]:
    """(what, group, resource, operation, object, oldObject, subresource): what controllers, the garbage
    collector, the kubelet and the autoscaler do, on objects that break a rule."""
    node = _node()
    deleting = _workload("Deployment")
    deleting["metadata"].update({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["foregroundDeletion"]})
    rs = _workload("ReplicaSet", owner={**CONTROLLER, "kind": "Deployment", "name": "train", "uid": "d-uid"})
    return [
        ("kubectl cordon", "", "nodes", "UPDATE",
         *_changed(node, lambda n: n["spec"].update(unschedulable=True)), ""),
        ("node lifecycle controller: unreachable taint", "", "nodes", "UPDATE",
         *_changed(node, lambda n: n["spec"].update(taints=[{"key": "node.kubernetes.io/unreachable",
                                                              "effect": "NoExecute",
                                                              "timeAdded": "2026-01-01T00:00:00Z"}])), ""),
        ("cluster autoscaler: scale-down taint", "", "nodes", "UPDATE", *_changed(node, lambda n: n["spec"].update(
            taints=[{"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}])), ""),
        ("a label nobody judges, on a GPU node", "", "nodes", "UPDATE",
         *_changed(node, lambda n: n["metadata"]["labels"].update({"team": "vision"})), ""),
        ("kubelet: node status", "", "nodes", "UPDATE",
         *_changed(node, lambda n: n["status"].update(conditions=[{"type": "Ready", "status": "False"}])), "status"),
        ("kubelet: a GPU node registers", "", "nodes", "CREATE", node, None, ""),
        ("garbage collector: foregroundDeletion finalizer removed", "apps", "deployments", "UPDATE",
         *_changed(deleting, lambda d: d["metadata"].update(finalizers=[])), ""),
        ("a label nobody judges, on a GPU Deployment", "apps", "deployments", "UPDATE",
         *_changed(_workload("Deployment"), lambda d: d["metadata"]["labels"].update({"team": "vision"})), ""),
        ("a Deployment scaled", "apps", "deployments", "UPDATE",
         *_changed(_workload("Deployment"), lambda d: d["spec"].update(replicas=5)), ""),
        ("Deployment controller: creates a ReplicaSet", "apps", "replicasets", "CREATE", rs, None, ""),
        ("Deployment controller: scales an old ReplicaSet", "apps", "replicasets", "UPDATE",
         *_changed(rs, lambda r: r["spec"].update(replicas=1)), ""),
        ("CronJob controller: creates a Job", "batch", "jobs", "CREATE",
         _workload("Job", owner={**CONTROLLER, "apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly"}), None,
         ""),
        ("ReplicaSet controller: replaces a GPU pod", "", "pods", "CREATE", _pod(owner=CONTROLLER), None, ""),
        ("Job controller: replaces a GPU pod", "", "pods", "CREATE",
         _pod(owner={**CONTROLLER, "apiVersion": "batch/v1", "kind": "Job", "name": "train"}), None, ""),
        ("StatefulSet controller: recreates a GPU pod", "", "pods", "CREATE",
         _pod(owner={**CONTROLLER, "kind": "StatefulSet", "name": "train"}), None, ""),
        ("Job controller: job-tracking finalizer removed from a pod", "", "pods", "UPDATE",
         *_changed(_pod(owner=CONTROLLER), lambda p: p["metadata"].update(finalizers=[])), ""),
    ]


NEEDS = _cluster_needs()


@pytest.mark.parametrize("install", ["base", "backstop", "custom-workloads"])
@pytest.mark.parametrize(("what", "group", "resource", "operation", "obj", "old", "sub"), NEEDS,
                         ids=[n[0] for n in NEEDS])
def test_an_outage_never_blocks_what_the_cluster_needs(installs, install, what, group, resource, operation, obj, old,
                                                      sub):
    assert refused_by(installs[install], group, resource, operation, obj, old, sub) == []


def test_an_outage_still_refuses_a_users_bad_pod_and_a_mode_change(installs):
    assert refused_by(installs["base"], "", "pods", "CREATE", _pod()) == ["pods.validate.gpushare.io"]
    assert refused_by(installs["backstop"], "", "pods", "CREATE", _pod()) == []  # the backstop holds GS001 instead
    node = _node()
    new, old = _changed(node, lambda n: n["metadata"]["labels"].update({"ack.node.gpu.schedule": "share"}))
    assert refused_by(installs["base"], "", "nodes", "UPDATE", new, old) == ["nodes.validate.gpushare.io"]
    changed, before = _changed(_workload("Deployment"), lambda d: d["spec"]["template"]["spec"]["containers"][0][
        "resources"]["limits"].update({CORE: "34"}))
    assert refused_by(installs["base"], "apps", "deployments", "UPDATE", changed, before) == [
        "workloads.validate.gpushare.io"]


def test_the_chart_lets_the_validating_pod_webhook_fail_open_where_it_renders_the_backstop():
    from tests.deploy.test_deploy import render_helm

    def pods_policy(values: Obj) -> str:
        hooks = dict((h["name"], h) for _, h in registrations(render_helm(values)))
        return hooks["pods.validate.gpushare.io"]["failurePolicy"]

    assert pods_policy({}) == "Fail"
    assert pods_policy({"backstop": {"enabled": True}}) == "Ignore"
    assert pods_policy({"backstop": {"enabled": True, "kubeVersion": ">=99.0-0"}}) == "Fail"  # not rendered there
