"""The backstop's variables: the pod spec and containers of whatever kind the request holds, the
object's name, and per rule whether the object is exempt from it -- every exemption the webhook
could honour (the annotation where the Namespace label or the config allows it, every config grant
whatever its expiry: CEL has no clock, and a backstop denial is final)."""

from __future__ import annotations

from policies.generate import backstop_isolation as isolation
from policies.model.grants import glob_regex
from policies.model.resources import POD_SPEC_PATHS
from policies.model.settings import ExemptionGrant, LabelSelector, PolicySettings
from policies.rules.cel import by_kind, template_path
from policies.rules.cel import guarded as _guarded
from policies.rules.cel import quote as _q

_SEPARATOR = "[ \\t\\n\\r\\f\\v,;]"  # the annotation's id separators (ASCII whitespace, comma, semicolon)


def _annotation_value(settings: PolicySettings, kind: str) -> str:
    """The honoured exempt annotation of a kind's pod (template) metadata, else ''."""
    meta = f"{template_path(kind)}.metadata"
    ann = f"{meta}.annotations"
    key, reason = settings.names.exempt_annotation, settings.names.exempt_reason_annotation
    return (f"(({_guarded(ann)} && {_q(key)} in {ann} && {_q(reason)} in {ann} && "
            f"{ann}[{_q(reason)}].matches('[^ \\\\t\\\\n\\\\r\\\\f\\\\v]')) ? {ann}[{_q(key)}] : '')")


def _label_test(labels: str, guard: str, key: str, op: str, value: str | None = None,
                values: tuple[str, ...] = ()) -> str:
    present = f"({guard} && {_q(key)} in {labels})"
    if op == "Equals":
        return f"({present} && {labels}[{_q(key)}] == {_q(value or '')})"
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return f"!{present}"
    listed = "[" + ", ".join(_q(v) for v in values) + "]"
    if op == "In":
        return f"({present} && {labels}[{_q(key)}] in {listed})"
    return f"(!{present} || !({labels}[{_q(key)}] in {listed}))"  # NotIn


def _selector(selector: LabelSelector, kind: str) -> str:
    labels = f"{template_path(kind)}.metadata.labels"
    guard = _guarded(labels)
    tests = [_label_test(labels, guard, k, "Equals", v) for k, v in selector.match_labels.items()]
    tests += [_label_test(labels, guard, r.key, r.operator, values=r.values) for r in selector.match_expressions]
    return " && ".join(tests) or "true"


def _grant(grant: ExemptionGrant) -> str:
    tests = [f"request.namespace == {_q(grant.namespace)}"]
    if grant.names is not None:
        tests.append(f"variables.objectName.matches({_q(glob_regex(grant.names))})")
    if grant.selector is not None:
        selector = grant.selector
        tests.append(by_kind(lambda kind: f"({_selector(selector, kind)})", "false"))
    return "(" + " && ".join(tests) + ")"


def policy_variables(settings: PolicySettings, rule_ids: list[str], known: frozenset[str],
                     rule_variables: list[dict[str, str]]) -> list[dict[str, str]]:
    """The policy's variables: the common ones, ``exempt<ID>`` for each of ``rule_ids`` (grants only
    for the ids the webhook knows), then ``rule_variables`` (what the covered rules' tests read)."""
    ex = settings.exemptions
    spec = by_kind(lambda kind: ".".join(("object", *map(str, POD_SPEC_PATHS[kind]))), "object.spec")
    label = ex.namespace_label
    # Only namespaced resources match, so namespaceObject is always set (no null test: cel-python
    # has no heterogeneous equality for map != null).
    allowed = [f"(has(namespaceObject.metadata.labels) && {_q(label)} in "
               f"namespaceObject.metadata.labels && namespaceObject.metadata.labels[{_q(label)}] == "
               f"{_q(ex.namespace_label_value)})"]
    if ex.annotation_namespaces:
        allowed.insert(0, "request.namespace in [" + ", ".join(_q(n) for n in ex.annotation_namespaces) + "]")
    variables = [
        {"name": "spec", "expression": spec},
        {"name": "containers", "expression": "variables.spec.containers + (has(variables.spec.initContainers) ? "
                                             "variables.spec.initContainers : [])"},
        {"name": "objectName", "expression": "has(object.metadata.name) && object.metadata.name != '' ? "
                                             "object.metadata.name : (has(object.metadata.generateName) ? "
                                             "object.metadata.generateName : '')"},
        {"name": "subject", "expression": "object.kind + ' ' + request.namespace + '/' + variables.objectName"},
        *isolation.ephemeral_variables(),
        {"name": "annotationAllowed", "expression": " || ".join(allowed)},
        {"name": "exemptIds", "expression": "variables.annotationAllowed ? "
                                            + by_kind(lambda kind: _annotation_value(settings, kind), "''")
                                            + " : ''"},
    ]
    for rule_id in rule_ids:
        parts = [f"variables.exemptIds.matches({_q(f'(?i)(^|{_SEPARATOR}){rule_id}($|{_SEPARATOR})')})"]
        parts += [_grant(g) for g in ex.grants
                  if rule_id in {r.upper() for r in g.rules} and rule_id in known]
        variables.append({"name": f"exempt{rule_id}", "expression": " || ".join(parts)})
    return variables + rule_variables
