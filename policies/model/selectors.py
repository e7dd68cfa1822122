"""nodeSelector and required node affinity, matched against a node as kube-scheduler does.

Semantics follow Kubernetes: ``nodeSelector`` entries must all match; the terms of
``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`` are ORed and the
requirements inside a term ANDed; an empty term matches nothing. ``Gt``/``Lt`` compare
whole numbers and never match a label that is not one (``nvidia_mem: 16160MiB`` is not:
pin or avoid such values with ``In``/``NotIn``). ``matchFields`` supports
``metadata.name``. Selectors are checked when compiled, so a malformed one is reported
once with its path instead of failing on every node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.model.resources import Path, ShapeError

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")  # what Go's strconv.ParseInt accepts in base 10
AFFINITY_PATH = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]

    def describe(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} [{', '.join(self.values)}]"

    def matches(self, value: str | None) -> bool:
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if value is None or not _INTEGER.match(value):
            return False
        return int(value) > int(self.values[0]) if op == "Gt" else int(value) < int(self.values[0])


@dataclass(frozen=True, slots=True)
class Term:
    labels: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]

    def mismatch(self, labels: Mapping[str, str], name: str) -> str | None:
        """None when the node satisfies the term, else the first requirement it fails."""
        if not self.labels and not self.fields:
            return "an empty nodeSelectorTerm matches no node"
        for req in self.labels:
            value = labels.get(req.key)
            if not req.matches(value):
                return f"{req.describe()}: {_shown(req.key, value)}"
        for req in self.fields:
            if not req.matches(name):
                return f"{req.describe()}: node is named {name}"
        return None


def _shown(key: str, value: str | None) -> str:
    if value is None:
        return f"node has no label {key}"
    return f"node has {key}={value}"


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """A pod's hard node constraints; the empty selector matches every node."""

    labels: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] | None = None  # None: no required node affinity

    @property
    def empty(self) -> bool:
        return not self.labels and self.terms is None

    def mismatch(self, labels: Mapping[str, str], name: str) -> str | None:
        """None when the node may run the pod, else why not (for a user to read)."""
        for key, wanted in self.labels:
            value = labels.get(key)
            if value != wanted:
                return f"nodeSelector {key}={wanted}: {_shown(key, value)}"
        if self.terms is None:
            return None
        failures = []
        for term in self.terms:
            why = term.mismatch(labels, name)
            if why is None:
                return None
            failures.append(why)
        if len(failures) == 1:
            return f"required node affinity {failures[0]}"
        return "required node affinity: no term matches: " + "; ".join(
            f"term {i}: {why}" for i, why in enumerate(failures))


def _string_list(value: Any, path: Path) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ShapeError(path, "must be a list of strings")
    return tuple(value)


def _requirement(raw: Any, path: Path, *, field_selector: bool) -> Requirement:
    if not isinstance(raw, dict):
        raise ShapeError(path, f"must be an object, got {type(raw).__name__}")
    key, operator = raw.get("key"), raw.get("operator")
    if not isinstance(key, str) or not key:
        raise ShapeError((*path, "key"), "must be a non-empty string")
    if operator not in OPERATORS:
        raise ShapeError((*path, "operator"), f"{operator!r} is not one of {', '.join(OPERATORS)}")
    values = _string_list(raw.get("values"), (*path, "values"))
    where = (*path, "values")
    if field_selector:
        if key != "metadata.name":
            raise ShapeError((*path, "key"), f"{key!r}: matchFields supports only metadata.name")
        if operator not in ("In", "NotIn") or len(values) != 1:
            raise ShapeError(path, "matchFields on metadata.name needs In or NotIn with exactly one value")
    elif operator in ("In", "NotIn") and not values:
        raise ShapeError(where, f"{operator} needs at least one value")
    elif operator in ("Exists", "DoesNotExist") and values:
        raise ShapeError(where, f"{operator} takes no values")
    elif operator in ("Gt", "Lt") and (len(values) != 1 or not _INTEGER.match(values[0])):
        raise ShapeError(where, f"{operator} needs exactly one whole number (e.g. \"4\")")
    return Requirement(key, operator, values)


def _term(raw: Any, path: Path) -> Term:
    if not isinstance(raw, dict):
        raise ShapeError(path, f"must be an object, got {type(raw).__name__}")
    groups: dict[str, tuple[Requirement, ...]] = {}
    for group, is_field in (("matchExpressions", False), ("matchFields", True)):
        items = raw.get(group)
        if items is None:
            groups[group] = ()
            continue
        if not isinstance(items, list):
            raise ShapeError((*path, group), "must be a list")
        groups[group] = tuple(_requirement(r, (*path, group, i), field_selector=is_field)
                              for i, r in enumerate(items))
    return Term(groups["matchExpressions"], groups["matchFields"])


# Most pods have no node constraints: one immutable selector serves them all.
ANY_NODE = NodeSelector()


def node_selector_from_spec(spec: dict[str, Any] | None, base: Path) -> NodeSelector:
    """The hard node constraints of a pod spec at ``base``; ShapeError when malformed."""
    if not spec:
        return ANY_NODE
    labels: tuple[tuple[str, str], ...] = ()
    raw_labels = spec.get("nodeSelector")
    if raw_labels is not None:
        if not isinstance(raw_labels, dict):
            raise ShapeError((*base, "nodeSelector"), "must be a map of label to value")
        labels = tuple((str(k), v if isinstance(v, str) else _label_text(v)) for k, v in raw_labels.items())
    required: Any = spec
    for part in AFFINITY_PATH:
        required = required.get(part) if isinstance(required, dict) else None
    if required is None:
        return NodeSelector(labels) if labels else ANY_NODE
    path = (*base, *AFFINITY_PATH)
    if not isinstance(required, dict):
        raise ShapeError(path, "must be an object")
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list):
        raise ShapeError((*path, "nodeSelectorTerms"), "must be a list of terms")
    return NodeSelector(labels, tuple(_term(t, (*path, "nodeSelectorTerms", i)) for i, t in enumerate(terms)))


def _label_text(value: Any) -> str:
    """YAML turns `nvidia_count: 4` into an int; the API server would refuse it, we compare its text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def describe_selector(selector: NodeSelector) -> str:
    """One line for reports: what the selector asks for."""
    parts = [f"{k}={v}" for k, v in selector.labels]
    if selector.terms is not None:
        terms = [" and ".join(r.describe() for r in (*t.labels, *t.fields)) or "(empty)" for t in selector.terms]
        parts.append("affinity " + " or ".join(f"({t})" for t in terms))
    return ", ".join(parts) or "any node"

