"""Rules: one module per rule family (a rule is one decorated function), and what they declare.

``base`` (the registry and ``@rule``), ``relevance`` (what makes an object relevant to a rule),
``judged`` (what an UPDATE is judged on), ``cel`` (the CEL those declarations become),
``mutations`` (the mutating webhook's patch) and ``rule_index`` (every rule as configured). Every
other module here is a family, and importing this package imports each (in name order) and so
registers every rule: a new family is a new module, listed nowhere else.

May import ``policies.model``, ``policies.quota`` and ``policies.placement`` (GB001-GB005 and GC001
judge a placement; placement is loaded on their first run).
"""

import importlib
import pkgutil

from policies.rules.base import REGISTRY, Finding, Rule

# The modules that are not families: what rules are, and what is made of their declarations.
NOT_FAMILIES = frozenset({"base", "relevance", "judged", "cel", "mutations", "rule_index"})
FAMILIES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in NOT_FAMILIES))
for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")

__all__ = ["FAMILIES", "REGISTRY", "Finding", "Rule"]
