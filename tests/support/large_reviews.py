"""The largest reviews, kind by kind, as the API server encodes them (tests/support/go_json.py: Go's
encoding/json, HTML characters escaped, a newline at the end).

What the API server can send: kube-apiserver reads request bodies of at most 3 MiB
(``MaxRequestBodyBytes: int64(3 * 1024 * 1024)``, k8s.io/apiserver pkg/server/config.go; its
comment: etcd accepts requests of 1.5 MiB, and JSON may be twice the stored protobuf) and etcd
stores objects of at most 1.5 MiB (``DefaultMaxRequestBytes = 1.5 * 1024 * 1024``, etcd
server/embed/config.go). An UPDATE's review carries the object and the old object, each up to
that size as JSON (a custom resource is stored as JSON; a Pod as protobuf, whose JSON is larger),
plus the envelope: about 3 MiB and more, under the webhook's 4 MiB body limit.

Shapes, for every kind the webhook judges (Kubernetes' own workloads and every custom kind of the
workload table, from the samples in tests/data/workloads):

- ``containers``: the first container copied under new names until the body is full (a Pod of
  7,000 containers at 4 MiB);
- ``templates``: for kinds that hold a list or map of pod templates (a Volcano Job's tasks, an
  Argo Workflow's templates, a PyTorchJob's replica specs), the first one copied;
- ``padded``: one template, its first container's environment grown (few templates and
  containers, many bytes: within the evaluation budget).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from policies.admission.budget import overrun
from policies.model.field_paths import EVERY_ITEM, EVERY_VALUE
from policies.model.settings import BudgetSettings
from policies.model.workloads import BUILT_IN, group_of
from tests.support.go_json import api_server_json
from tests.support.review_bodies import deployment, realistic_pod

ROOT = Path(__file__).resolve().parents[2]
BODY_LIMIT = 4 * 1024 * 1024  # server.max_body_bytes
CREATE_BYTES = BODY_LIMIT - 4096  # "at the body limit", with room for the HTTP head
ETCD_OBJECT_BYTES = 3 * 1024 * 1024 // 2  # one object at etcd's request limit
Obj = dict[str, Any]


def _builtin_kinds() -> dict[str, tuple[Obj, str, str]]:
    """Kubernetes' own workloads: name -> (object, group, resource)."""
    pod = realistic_pod()
    pod["metadata"]["namespace"] = pod["metadata"].get("namespace", "default")
    dep = deployment()
    template = dep["spec"]["template"]
    meta = {"name": "train", "namespace": "ml-serving"}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": dict(meta),
           "spec": {"template": copy.deepcopy(template) | {"spec": {**template["spec"], "restartPolicy": "Never"}}}}
    return {
        "Pod": (pod, "", "pods"),
        "Deployment": (dep, "apps", "deployments"),
        "StatefulSet": ({**copy.deepcopy(dep), "kind": "StatefulSet"}, "apps", "statefulsets"),
        "DaemonSet": ({**copy.deepcopy(dep), "kind": "DaemonSet"}, "apps", "daemonsets"),
        "ReplicaSet": ({**copy.deepcopy(dep), "kind": "ReplicaSet"}, "apps", "replicasets"),
        "Job": (job, "batch", "jobs"),
        "CronJob": ({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": dict(meta),
                     "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": copy.deepcopy(job["spec"])}}},
                    "batch", "cronjobs"),
    }


def kinds() -> dict[str, tuple[Obj, str, str]]:
    """Every kind the webhook judges: name -> (a real object of it, group, resource)."""
    found = _builtin_kinds()
    plural = {(k.group, k.kind): k.plural for k in BUILT_IN}
    for sample in sorted((ROOT / "tests" / "data" / "workloads").glob("*.yaml")):
        obj = yaml.safe_load(sample.read_text())
        obj.setdefault("metadata", {}).setdefault("namespace", "default")
        group = group_of(obj)
        found[f"{obj['kind']}.{group}"] = (obj, group, plural[(group, obj["kind"])])
    return found


def review(obj: Obj, group: str, resource: str, old: Obj | None = None) -> Obj:
    """``obj`` in a CREATE review, or an UPDATE with ``old``, the fields in the Go structs' order."""
    version = str(obj.get("apiVersion", "v1")).rpartition("/")[2]
    kind = {"group": group, "version": version, "kind": obj["kind"]}
    gvr = {"group": group, "version": version, "resource": resource}
    operation = "CREATE" if old is None else "UPDATE"
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "kind": kind, "resource": gvr, "requestKind": kind,
        "requestResource": gvr, "name": obj["metadata"].get("name", ""), "namespace": obj["metadata"]["namespace"],
        "operation": operation, "userInfo": {"username": "system:serviceaccount:ml:trainer", "uid": "0f7a",
                                             "groups": ["system:serviceaccounts", "system:authenticated"]},
        "object": obj, "oldObject": old, "dryRun": False,
        "options": {"kind": f"{operation.title()}Options", "apiVersion": "meta.k8s.io/v1"}}}


def _first(node: Any, key: str) -> list[Any] | None:
    """The first list under ``key`` in ``node``, depth first."""
    if isinstance(node, dict):
        if isinstance(node.get(key), list) and node[key]:
            return node[key]  # type: ignore[no-any-return]
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _first(child, key)
        if found is not None:
            return found
    return None


def _grow_containers(obj: Obj, n: int) -> Obj:
    out = copy.deepcopy(obj)
    containers = _first(out, "containers")
    if containers is None:  # a TrainJob sizes its nodes, it lists no containers
        return out
    first = containers[0]
    containers.extend({**copy.deepcopy(first), "name": f"c{i}"} for i in range(n))
    return out


def _template_holder(obj: Obj) -> tuple[Any, Any] | None:
    """The list or map that holds ``obj``'s first pod templates, and its first entry."""
    kind = next((k for k in BUILT_IN if k.kind == obj["kind"] and k.group == group_of(obj)), None)
    if kind is None:
        return None
    pattern = kind.locations[0].pattern
    wild = [i for i, part in enumerate(pattern) if part in (EVERY_ITEM, EVERY_VALUE)]
    if not wild:
        return None
    node: Any = obj
    for part in pattern[:wild[0]]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, list) and node:
        return node, node[0]
    if isinstance(node, dict) and node:
        return node, next(iter(node.values()))
    return None


def _grow_templates(obj: Obj, n: int) -> Obj:
    out = copy.deepcopy(obj)
    held = _template_holder(out)
    if held is None:
        return out
    holder, first = held
    for i in range(n):
        entry = copy.deepcopy(first)
        if isinstance(entry, dict) and "name" in entry:
            entry["name"] = f"t{i}"
        if isinstance(holder, list):
            holder.append(entry)
        else:
            holder[f"Replica{i}"] = entry
    return out


def _grow_env(obj: Obj, n: int) -> Obj:
    out = copy.deepcopy(obj)
    containers = _first(out, "containers")
    if containers is None:
        return out
    env = containers[0].setdefault("env", [])
    env.extend({"name": f"SETTING_{i}", "value": f"value {i} <&> of a long configuration line"} for i in range(n))
    return out


SHAPES: dict[str, Callable[[Obj, int], Obj]] = {
    "containers": _grow_containers, "templates": _grow_templates, "padded": _grow_env}


def has_shape(obj: Obj, shape: str) -> bool:
    if shape == "templates":
        return _template_holder(copy.deepcopy(obj)) is not None
    return _first(obj, "containers") is not None


def largest(size: int, encode: Callable[[int], bytes]) -> tuple[int, bytes]:
    """The largest ``n`` whose ``encode(n)`` is at most ``size`` bytes, with those bytes. The body
    grows about linearly in n: measured at two points, then stepped down until it fits."""
    small, double = len(encode(16)), len(encode(32))
    per = max((double - small) / 16, 1.0)
    n = max(int(16 + (size - small) / per), 0)
    body = encode(n)
    while len(body) > size and n > 0:
        n = max(n - max(int((len(body) - size) / per) + 1, 1), 0)
        body = encode(n)
    return n, body


def create_body(name: str, shape: str, size: int = CREATE_BYTES) -> tuple[int, bytes]:
    """A CREATE of kind ``name`` in ``shape`` at most ``size`` bytes."""
    obj, group, resource = kinds()[name]
    grow = SHAPES[shape]
    return largest(size, lambda n: api_server_json(review(grow(obj, n), group, resource)))


def update_body(name: str, shape: str, each: int = ETCD_OBJECT_BYTES) -> tuple[int, bytes]:
    """An UPDATE of kind ``name`` in ``shape``: object and old object each at most ``each`` bytes
    of JSON (one label apart), in one review."""
    obj, group, resource = kinds()[name]
    grow = SHAPES[shape]
    n, _ = largest(each, lambda k: api_server_json(grow(obj, k)))
    new = grow(obj, n)
    old = copy.deepcopy(new)
    old["metadata"].setdefault("labels", {})["revision"] = "1"
    return n, api_server_json(review(new, group, resource, old))


def budget_body(name: str, shape: str) -> tuple[int, bytes]:
    """A CREATE of kind ``name`` grown in ``shape`` (containers or templates) to exactly the
    evaluation budget's default limit: the costliest review that is still judged in full."""
    obj, group, resource = kinds()[name]
    limits, grow = BudgetSettings(), SHAPES[shape]
    workload = next((k for k in BUILT_IN if k.kind == obj["kind"] and k.group == group_of(obj)), None)

    def within(n: int) -> bool:
        return overrun(obj["kind"], grow(obj, n), workload, limits) is None

    low, high = 0, 1
    while within(high):
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if within(mid) else (low, mid)
    return low, api_server_json(review(grow(obj, low), group, resource))
