"""Every rule and mutation as configured: what ``gpushare rules`` lists and SARIF describes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from policies import rules as _rules  # noqa: F401  (registers every rule module)
from policies.model.resources import CUSTOM_WORKLOADS
from policies.model.settings import PolicySettings, Severity
from policies.model.sources import cite
from policies.model.workloads import workload_table
from policies.rules.base import REGISTRY, Rule
from policies.rules.mutations import MUTATIONS


@dataclass(frozen=True, slots=True)
class RuleEntry:
    id: str
    category: Literal["rule", "mutation"]
    default_severity: Severity | None  # None for mutations: they patch, they do not judge
    severity: Severity | None  # as configured
    enabled: bool
    seed: str  # source codes as the rule declares them; ``sources`` is what users read
    title: str
    doc: str
    kinds: tuple[str, ...]
    stateful: bool

    @property
    def sources(self) -> tuple[str, ...]:
        """The documents (by title) or the project decision this rule comes from."""
        return cite(self.seed)

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "category": self.category, "severity": self.severity,
                "defaultSeverity": self.default_severity, "enabled": self.enabled,
                "sources": list(self.sources),
                "title": self.title, "doc": self.doc, "kinds": list(self.kinds), "stateful": self.stateful}


def rule_entries(settings: PolicySettings) -> list[RuleEntry]:
    """Rules then mutations, each sorted by id, with the config file's overrides applied."""
    entries = []
    for rule in sorted(REGISTRY.values(), key=lambda r: r.id):
        override = settings.rules.get(rule.id)
        severity = override.severity if override is not None and override.severity else rule.severity
        entries.append(RuleEntry(rule.id, "rule", rule.severity, severity,
                                 override is None or override.enabled, rule.seed, rule.title, rule.doc,
                                 _kinds(rule, settings), rule.stateful))
    for mutation in sorted(MUTATIONS.values(), key=lambda m: m.id):
        override = settings.rules.get(mutation.id)
        entries.append(RuleEntry(mutation.id, "mutation", None, None, override is None or override.enabled,
                                 mutation.seed, mutation.title, mutation.doc, (), False))
    return entries


def _kinds(rule: Rule, settings: PolicySettings) -> tuple[str, ...]:
    """The kinds a rule judges, the custom workloads named as kubectl names them (PyTorchJob.kubeflow.org)."""
    kinds = sorted(rule.kinds - {CUSTOM_WORKLOADS})
    if CUSTOM_WORKLOADS in rule.kinds:
        kinds += sorted(k.name for k in workload_table(settings).kinds())
    return tuple(kinds)


def known_rule_ids() -> frozenset[str]:
    """Every id a config may name: rules and mutations."""
    return frozenset(REGISTRY) | frozenset(MUTATIONS)


@cache
def rule_ids(family: str) -> frozenset[str]:
    """The ids of every registered rule of ``family``: lists of rules are derived, never typed out."""
    return frozenset(r.id for r in REGISTRY.values() if r.family == family)
