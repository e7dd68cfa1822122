"""The vendored CustomResourceDefinitions (tests/data/crds, origin in ORIGIN.md there), and how
kube-apiserver judges a custom object against one: fields the structural schema does not name are
pruned (the default for every ``apiextensions.k8s.io/v1`` CRD: Kubernetes KEP-2332, "Pruning for
Custom Resources"; ``x-kubernetes-preserve-unknown-fields`` keeps a subtree), what is left is
validated against the schema (types, enums, required fields), and ``metadata`` is ObjectMeta,
judged by the API machinery rather than the CRD's schema.

The fake API server (``tests/support/fake_apiserver.py``) serves a CRD's resources with these rules once a
test installs it; the tests validate what they read back with them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parents[1] / "data" / "crds"
REPORT_CRDS = {
    "openreports": ("openreports.io_reports.yaml", "openreports.io_clusterreports.yaml"),
    "policyreport": ("wgpolicyk8s.io_policyreports.yaml", "wgpolicyk8s.io_clusterpolicyreports.yaml"),
}


@dataclass(frozen=True)
class CustomResource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    schema: dict[str, Any]

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}"


def load_crd(name: str) -> dict[str, Any]:
    found = CRDS / name
    assert found.is_file(), f"missing vendored CRD {found} (see {CRDS / 'ORIGIN.md'})"
    return yaml.safe_load(found.read_text())


def custom_resource(crd: dict[str, Any]) -> CustomResource:
    """The CRD's storage version (the one version these files serve)."""
    spec = crd["spec"]
    version = next(v for v in spec["versions"] if v.get("storage", True) and v.get("served", True))
    return CustomResource(spec["group"], version["name"], spec["names"]["kind"], spec["names"]["plural"],
                          spec["scope"] == "Namespaced", version["schema"]["openAPIV3Schema"])


def report_resources(kind: str) -> tuple[CustomResource, ...]:
    """The namespaced and the cluster-scoped report CRD of ``openreports`` or ``policyreport``."""
    return tuple(custom_resource(load_crd(name)) for name in REPORT_CRDS[kind])


def prune(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Drop (in place) every field the schema does not name; returns their paths."""
    pruned: list[str] = []
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return pruned
    if isinstance(obj, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in list(obj):
            where = f"{path}.{key}" if path else key
            if not path and key in ("apiVersion", "kind", "metadata"):
                continue  # the object's type and ObjectMeta: not the schema's to prune
            if properties is not None and key in properties:
                pruned += prune(obj[key], properties[key], where)
            elif isinstance(extra, dict):
                pruned += prune(obj[key], extra, where)
            elif properties is not None or extra is False:
                del obj[key]
                pruned.append(where)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            pruned += prune(item, schema["items"], f"{path}[{i}]")
    return pruned


def invalid(obj: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The first schema violation of ``obj`` (metadata left to the API machinery), or None."""
    judged = dict(obj, metadata={})
    error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(schema).iter_errors(judged))
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path) or "<root>"
    return f"{where}: {error.message}"
