"""Who may exempt what: admin permission for annotation exemptions, and central grants.

A pod author writes ``gpushare.io/exempt``; an admin decides where that is honoured (a
Namespace label, or ``exemptions.annotation_namespaces``) and can grant exemptions centrally
(``exemptions.grants``). Nothing a pod author writes can create or widen a grant. The
backstop policy (``policies/generate/backstop.py``) renders the same decisions into CEL, so every
helper here that it mirrors (name globs, selectors) is written to translate one to one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, Protocol

from policies.model.settings import ExemptionGrant, ExemptionSettings, LabelSelector


class NamespaceLabels(Protocol):
    """Where the engine learns a namespace's labels (live Namespace watch, snapshot, --namespace-labels)."""

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        """The namespace's labels, or None when they are not known (not listed, not synced)."""
        ...


class StaticNamespaces:
    """Namespace labels given up front: a snapshot file's Namespaces or ``check --namespace-labels``."""

    def __init__(self, labels: Mapping[str, Mapping[str, str]]) -> None:
        self._labels = {ns: dict(values) for ns, values in labels.items()}

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self._labels.get(namespace)


@dataclass(frozen=True, slots=True)
class Permission:
    """Whether annotation exemptions are honoured in a namespace, and on whose word."""

    allowed: bool
    why: str  # "namespace label gpushare.io/exemptions=allowed", or why not


def annotation_permission(namespace: str, settings: ExemptionSettings,
                          namespaces: NamespaceLabels | None) -> Permission:
    """Secure by default: allowed only when the config lists the namespace or its label says so."""
    if not namespace:  # a Node: no namespace an admin could label
        return (Permission(True, "config exemptions.allow_on_nodes") if settings.allow_on_nodes else
                Permission(False, "exemptions on cluster-scoped objects are not allowed (an admin sets "
                                  "exemptions.allow_on_nodes)"))
    if namespace in settings.annotation_namespaces:
        return Permission(True, "config exemptions.annotation_namespaces")
    label = f"{settings.namespace_label}={settings.namespace_label_value}"
    labels = namespaces.namespace_labels(namespace) if namespaces is not None and namespace else None
    if labels is None:
        return Permission(False, f"the labels of namespace {namespace or '(none)'} are not known, so its "
                                 f"{label} permission cannot be confirmed")
    if labels.get(settings.namespace_label) == settings.namespace_label_value:
        return Permission(True, f"namespace label {label}")
    return Permission(False, f"namespace {namespace} does not allow exemptions (an admin labels the Namespace "
                             f"{label} or lists it in exemptions.annotation_namespaces)")


def glob_regex(pattern: str) -> str:
    """A name glob (``*`` any run, ``?`` one character) as an anchored regex that RE2 and Python agree on."""
    out = []
    for char in pattern:
        out.append(".*" if char == "*" else "." if char == "?" else re.escape(char))
    return "^" + "".join(out) + "$"


def object_name(metadata: Mapping[str, Any]) -> str:
    """The name a grant's glob is matched against: the name, else the generateName prefix
    (pods of a Deployment or Job are admitted before they have a name)."""
    name = metadata.get("name")
    if isinstance(name, str) and name:
        return name
    generate = metadata.get("generateName")
    return generate if isinstance(generate, str) else ""


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Kubernetes label selector semantics: every matchLabels pair and every expression holds."""
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    for req in selector.match_expressions:
        present = req.key in labels
        if req.operator == "Exists" and not present:
            return False
        if req.operator == "DoesNotExist" and present:
            return False
        if req.operator == "In" and (not present or labels[req.key] not in req.values):
            return False
        if req.operator == "NotIn" and present and labels[req.key] in req.values:
            return False
    return True


def grant_matches(grant: ExemptionGrant, namespace: str, metadata: Mapping[str, Any],
                  labels: Mapping[str, str]) -> bool:
    """Whether the grant covers this object (expiry and rule ids are judged apart)."""
    if grant.namespace != namespace:
        return False
    if grant.names is not None and not re.match(glob_regex(grant.names), object_name(metadata), re.DOTALL):
        return False
    return grant.selector is None or selector_matches(grant.selector, labels)


@dataclass(frozen=True, slots=True)
class GrantOutcome:
    """One grant that covers an object: the ids it sets aside, and what is wrong with it if anything."""

    grant: ExemptionGrant
    ids: frozenset[str]  # honoured ids: known rules, grant not expired
    expired: bool
    unknown: tuple[str, ...]


def matching_grants(settings: ExemptionSettings, namespace: str, metadata: Mapping[str, Any],
                    labels: Mapping[str, str], known: frozenset[str], today: date) -> list[GrantOutcome]:
    """Every grant covering the object, with what each honours on ``today`` (UTC)."""
    found = []
    for grant in settings.grants:
        if not grant_matches(grant, namespace, metadata, labels):
            continue
        ids = tuple(dict.fromkeys(r.upper() for r in grant.rules))
        unknown = tuple(r for r in ids if r not in known)
        expired = today > grant.expires
        honoured = frozenset() if expired else frozenset(r for r in ids if r in known)
        found.append(GrantOutcome(grant, honoured, expired, unknown))
    return found
