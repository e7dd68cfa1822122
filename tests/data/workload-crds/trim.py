"""How the CRDs in this directory were trimmed from their projects' published ones (ORIGIN.md):

    python trim.py FULL.yaml > TRIMMED.yaml

Only what can hold GPU requests, and the way to it, is kept: every ResourceRequirements (an object
with limits, requests and claims) whole, the scheduler names, the pod spec patch strings and
containers' names, with the objects and lists above them; `status`, descriptions and every other
field are dropped, and an object that lost fields keeps `x-kubernetes-preserve-unknown-fields:
true`, so that an object admitted by the full schema is not pruned by the trimmed one. Not imported
by the tests: the trimmed files are their data.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

KEPT_FIELDS = {"schedulerName", "podSpecPatch"}
KEPT_KEYS = ("type", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string", "anyOf", "pattern",
             "x-kubernetes-map-type", "x-kubernetes-list-type")


def resource_requirements(node: dict[str, Any]) -> bool:
    return {"limits", "requests", "claims"} <= set(node.get("properties") or {})


def trim(node: dict[str, Any]) -> dict[str, Any] | None:
    """The node with only what leads to what is kept; None when nothing under it is."""
    if resource_requirements(node):
        return _without_descriptions(node)
    kept: dict[str, Any] = {k: node[k] for k in KEPT_KEYS if k in node}
    dropped = False
    properties = {}
    for name, child in (node.get("properties") or {}).items():
        if name == "status":
            dropped = True
            continue
        trimmed = trim(child)
        if trimmed is not None:
            properties[name] = trimmed
        elif name in KEPT_FIELDS and child.get("type") == "string":
            properties[name] = {"type": "string"}
        else:
            dropped = True
    for key in ("items", "additionalProperties"):
        child = node.get(key)
        if isinstance(child, dict):
            trimmed = trim(child)
            if trimmed is not None:
                kept[key] = trimmed
            elif key == "additionalProperties":
                dropped = True
    if "resources" in properties and "name" in (node.get("properties") or {}):  # a container's name
        properties["name"] = {"type": "string"}
    if properties:
        kept["properties"] = properties
    if not properties and "items" not in kept and "additionalProperties" not in kept:
        return None
    if dropped and kept.get("type") == "object":
        kept["x-kubernetes-preserve-unknown-fields"] = True
    return kept


def _without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def trim_crd(crd: dict[str, Any]) -> dict[str, Any]:
    spec = crd["spec"]
    versions = []
    for version in spec["versions"]:
        schema = trim(version["schema"]["openAPIV3Schema"]) or {"type": "object"}
        versions.append({"name": version["name"], "served": version["served"], "storage": version["storage"],
                         "schema": {"openAPIV3Schema": schema}})
    return {"apiVersion": crd["apiVersion"], "kind": crd["kind"], "metadata": {"name": crd["metadata"]["name"]},
            "spec": {"group": spec["group"], "names": spec["names"], "scope": spec["scope"], "versions": versions}}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as source:
        full = yaml.safe_load(source)
    sys.stdout.write(yaml.safe_dump(trim_crd(full), sort_keys=False, width=120))
