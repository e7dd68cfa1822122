"""Rules: one module per rule family (a rule is one decorated function), and what they declare.

``base`` (the registry and ``@rule``), ``relevance`` (what makes an object relevant to a rule),
``judged`` (what an UPDATE is judged on), ``cel`` (the CEL those declarations become),
``mutations`` (the mutating webhook's patch) and ``rule_index`` (every rule as configured).
Importing this package registers every rule.

May import ``policies.model``, ``policies.quota`` and ``policies.placement`` (GB001-GB005 and GC001
judge a placement; placement is loaded on their first run).
"""

from policies.rules import (  # noqa: F401  (each import registers a family)
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
from policies.rules.base import REGISTRY, Finding, Rule

__all__ = ["REGISTRY", "Finding", "Rule"]
