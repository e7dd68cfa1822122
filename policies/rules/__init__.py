"""Rule families; importing this package registers every rule."""

from . import (  # noqa: F401  (each import registers a family)
    capacity_rules,
    cluster_invariants,
    exemptions,
    isolation_rules,
    node_rules,
    placement_rules,
    pod_resources,
    quota_rules,
    sharing_rules,
    workload_rules,
)
from .base import REGISTRY, Finding, Rule

__all__ = ["REGISTRY", "Finding", "Rule"]
