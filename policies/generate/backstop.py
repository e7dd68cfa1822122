"""The backstop: a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes >= 1.30)
that the API server evaluates itself, so the stateless pod rules hold while the webhook is down.

Generated from the rule catalogue and the settings (resource names, exemptions), never written
by hand: ``gpushare policy export`` prints it. Covered: the stateless rules the API server does
not enforce on its own (GS001, GS002, GS003, GS005, GS006, GS007; GS004 is the API server's own
"requests must equal limits" check for extended resources). A rule added later is covered by
adding an entry to ``BACKSTOP_RULES`` and its equivalence test runs on it automatically
(tests/deploy/test_backstop_equivalence.py).

The CEL uses only the standard library plus ``matches`` (RE2 in both cel-go and cel-python >= 0.5,
which calls google-re2), ``has``, macros and string concatenation: no Kubernetes extension
functions, so the tests evaluate it with cel-python exactly as written.

Exemptions: a VAP denial is final whatever the webhook says, and CEL has no clock. So the
policy honours every exemption the webhook *could* honour: the annotation where the
Namespace label or the config allows it (``namespaceObject``), and every config grant whatever
its expiry. The webhook is the stricter layer: it enforces expiry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from policies import rules as _rules  # noqa: F401  (registers every rule: their severities decide what is covered)
from policies.generate import backstop_isolation as isolation
from policies.generate.backstop_variables import policy_variables
from policies.generate.near_miss_regex import domain_regex, name_part_regex
from policies.model.near_miss import skipped_keys
from policies.model.resources import POD_SPEC_PATHS
from policies.model.settings import PolicySettings
from policies.rules.base import REGISTRY
from policies.rules.cel import WHOLE_SUFFIXES, Res, by_kind
from policies.rules.cel import quote as _q
from policies.rules.judged import CEL_NOT_DELETING, parts_for
from policies.rules.relevance import resolve

API_VERSION = "admissionregistration.k8s.io/v1"
# The resources whose objects carry a pod spec (policies/model/resources.py POD_SPEC_PATHS), by API group.
RESOURCE_RULES = (("", ("pods", "pods/ephemeralcontainers", "podtemplates", "replicationcontrollers")),
                  ("apps", ("deployments", "statefulsets", "daemonsets", "replicasets")),
                  ("batch", ("jobs", "cronjobs")))
CORE_ACCEPTED = "^([1-9][05]|5|100)$"  # canonical quantities 5, 10, ..., 100


def _no_variables(settings: PolicySettings) -> list[dict[str, str]]:
    return []


@dataclass(frozen=True)
class BackstopRule:
    """One covered rule: what makes a pod spec bad (``bad``), and the denial text."""

    id: str
    bad: Callable[[PolicySettings], str]  # true when the rule finds something (variables.containers in scope)
    message: Callable[[PolicySettings], str]  # a CEL string expression
    static: str  # the message when messageExpression cannot be evaluated
    # Policy variables the rule reads (after the common ones): computed once per review and shared
    # by the expression and the message.
    variables: Callable[[PolicySettings], list[dict[str, str]]] = _no_variables


SUBJECT = "variables.subject"
CONTAINERS = "variables.containers"


def _first(settings: PolicySettings, bad: str) -> str:
    return f"{CONTAINERS}.filter(c, {bad})[0]"


def _gs001(s: PolicySettings) -> str:
    return f"{CONTAINERS}.exists(c, {Res(s.names.resources.gpu_core).bad_value(CORE_ACCEPTED)})"


def _gs001_message(s: PolicySettings) -> str:
    core = Res(s.names.resources.gpu_core)
    first = _first(s, core.bad_value(CORE_ACCEPTED))
    return (f"'GS001: ' + {SUBJECT} + ' container \"' + {first}.name + '\": {core.name}=' + "
            f"{core.shown(first)} + ' is not a multiple of 5 in 5..100; use an integer multiple of "
            f"5 from 5 to 100, e.g. 30'")


def _gs002_bad(s: PolicySettings) -> str:
    r = s.names.resources
    return f"({Res(r.gpu_core).asks()} && !{Res(r.gpu_mem).asks()})"


def _gs002(s: PolicySettings) -> str:
    return f"{CONTAINERS}.exists(c, {_gs002_bad(s)})"


def _gs002_message(s: PolicySettings) -> str:
    r = s.names.resources
    return (f"'GS002: ' + {SUBJECT} + ' container \"' + {_first(s, _gs002_bad(s))}.name + '\": {r.gpu_core} is "
            f"requested without {r.gpu_mem}; add limits.{r.gpu_mem} with a whole number of {s.names.memory_unit} (1 or "
            f"more)'")


# GS003's ceiling is per card, times the cards the pod's multi-GPU label spreads each container over
# (ACK "Use cGPU to achieve GPU sharing based on multiple GPUs"; policies/model/gpu_memory.py). CEL here
# cannot take a quantity's suffix apart, so a canonical whole number is compared with the ceiling as
# text: the same suffix after digits of the same length compares as the numbers do.
CEILING = "variables.memCeiling"
MANY_CARDS = 10**15  # a label of more digits: no whole number of GiB a pod may ask reaches its ceiling


def _mem_variables(s: PolicySettings) -> list[dict[str, str]]:
    cards = "variables.memCards"
    return [{"name": "memCards", "expression": isolation.cards(s)},
            {"name": "memCeiling", "expression": f"{s.names.max_card_memory} * ({cards} > 0 ? {cards} : "
                                                 f"{MANY_CARDS})"}]


def _within_ceiling(value: str) -> str:
    """The canonical quantity ``value`` is a whole number from 1 to the ceiling."""
    def at_most(bound: str) -> str:
        return f"(size({value}) < size({bound}) || (size({value}) == size({bound}) && {value} <= {bound}))"

    forms = [f"({value}.matches('^[1-9][0-9]{{0,17}}$') && int({value}) <= {CEILING})"]
    forms += [f"({value}.matches({_q('^[1-9][0-9]*' + suffix + '$')}) && "
              f"{at_most(f'(string({CEILING} / {factor}) + {_q(suffix)})')})" for suffix, factor in WHOLE_SUFFIXES]
    return "(" + " || ".join(forms) + ")"


def _gs003_bad(s: PolicySettings) -> str:
    mem = Res(s.names.resources.gpu_mem)
    return (f"({mem.lim()} ? !{_within_ceiling(mem.limit())} : "
            f"({mem.req()} && !{_within_ceiling(mem.request())}))")


def _gs003(s: PolicySettings) -> str:
    return f"{CONTAINERS}.exists(c, {_gs003_bad(s)})"


def _gs003_message(s: PolicySettings) -> str:
    mem, names = Res(s.names.resources.gpu_mem), s.names
    first = _first(s, _gs003_bad(s))
    return (f"'GS003: ' + {SUBJECT} + ' container \"' + {first}.name + '\": {mem.name}=' + "
            f"{mem.shown(first)} + ' is not a whole number of {names.memory_unit} from 1 to ' + string({CEILING}) + "
            f"' ({names.max_card_memory} a card, times the cards of the pod label {names.labels.pod_gpu_count}); "
            f"use a whole number of {names.memory_unit} such as 2'")


def _gs005(s: PolicySettings) -> str:
    mem, core = Res(s.names.resources.gpu_mem), Res(s.names.resources.gpu_core)
    return (f"({CONTAINERS}.exists(c, {mem.asks()} && !{core.asks()}) && "
            f"{CONTAINERS}.exists(c, {mem.asks()} && {core.asks()}))")


def _gs005_message(s: PolicySettings) -> str:
    return (f"'GS005: ' + {SUBJECT} + ' mixes mem-only containers with core+mem containers; give every GPU "
            f"container {s.names.resources.gpu_core} or none of them'")


def _gs006(s: PolicySettings) -> str:
    r = s.names.resources
    whole = f"({Res(r.gpu_exclusive).asks()} || {Res(r.gpu_topology).asks()})"
    shared = f"({Res(r.gpu_mem).asks()} || {Res(r.gpu_core).asks()})"
    return f"({CONTAINERS}.exists(c, {whole}) && {CONTAINERS}.exists(c, {shared}))"


def _gs006_message(s: PolicySettings) -> str:
    r = s.names.resources
    return (f"'GS006: ' + {SUBJECT} + ' asks for whole GPUs ({r.gpu_exclusive} or {r.gpu_topology}) and shared "
            f"GPU ({r.gpu_mem}, {r.gpu_core}) together; a node runs one GPU mode, so use one kind'")


# GS007. The engine (policies/model/near_miss.py) canonicalises a name part and compares it by edit
# distance; CEL in the API server has string functions for the first half (lowerAscii, replace:
# the "extended strings library" of https://kubernetes.io/docs/reference/using-api/cel/) but
# cel-python, which the equivalence test runs, has none, and neither has edit distance. Both have
# ``matches`` with RE2, so policies/generate/near_miss_regex.py compiles the whole test into two regexes,
# exact for every ASCII key: the name part after the last "/", then (only for a key that passed)
# the domain before it. Runtime cost (cel-go: ceil((1 + len(key)) / 10) * ceil(len(regex) / 4)
# per match) is in docs/operations.md.

SECTION = "^(?:limits|requests)\\."  # what precedes a key in the strings nearMisses matches
def _near_miss_variables(s: PolicySettings) -> list[dict[str, str]]:
    """``nearMisses``: per container (init containers first, as the engine reads them) a list of
    its label, then "limits.KEY" / "requests.KEY" for each key GS007 denies (limits first). The
    two regexes are written once; the name part's is tried first (it turns down nearly every key)."""
    r = s.names.resources
    skipped = skipped_keys(s)
    name = name_part_regex(r.gpu_mem, r.gpu_core, before=SECTION)
    domain = domain_regex(r.gpu_mem, tuple(s.near_miss.lookalike_domains), before=SECTION)

    def keys(noun: str) -> str:
        sections = [f"(has(c.resources) && has(c.resources.{section}) ? c.resources.{section}.filter(k, "
                    f"!(k in variables.nearMissSkipped)).map(k, '{section}.' + k) : [])"
                    for section in ("limits", "requests")]
        return f"['{noun} \"' + c.name + '\"'] + " + " + ".join(sections)

    listed = (f"(has(variables.spec.initContainers) ? variables.spec.initContainers.map(c, {keys('init container')})"
              f" : []) + variables.spec.containers.map(c, {keys('container')})")
    return [{"name": "nearMissSkipped", "expression": "[" + ", ".join(map(_q, skipped)) + "]"},
            {"name": "resourceKeys", "expression": listed},
            {"name": "nearMisses", "expression": f"variables.resourceKeys.map(keys, [keys[0]] + keys.filter(key, "
                                                 f"key != keys[0] && key.matches({_q(name)}) && "
                                                 f"key.matches({_q(domain)})))"}]


def _gs007(s: PolicySettings) -> str:
    return "variables.nearMisses.exists(found, size(found) > 1)"


def _gs007_message(s: PolicySettings) -> str:
    r = s.names.resources
    first = "variables.nearMisses.filter(found, size(found) > 1)[0]"
    mem_only = name_part_regex(r.gpu_mem, r.gpu_core, mem_only=True, before=SECTION)
    meant = f"({first}[1].matches({_q(mem_only)}) ? {_q(r.gpu_mem)} : {_q(r.gpu_core)})"
    return (f"'GS007: ' + {SUBJECT} + ' ' + {first}[0] + ': ' + {first}[1] + ' is not a resource any node offers, "
            f"so the pod would stay Pending forever; did you mean ' + {meant} + '? (accepted: {r.gpu_mem}, "
            f"{r.gpu_core}; a real resource of that name can be listed in near_miss.allowed)'")


# The covered rules. Extension point: a new stateless rule the API server does not enforce
# itself is one more BackstopRule here.
BACKSTOP_RULES: tuple[BackstopRule, ...] = (
    BackstopRule("GS001", _gs001, _gs001_message, "GS001: gpu-core.percentage must be a multiple of 5 in 5..100"),
    BackstopRule("GS002", _gs002, _gs002_message, "GS002: gpu-core.percentage needs gpu-mem in the same container"),
    BackstopRule("GS003", _gs003, _gs003_message, "GS003: gpu-mem must be a whole number of GiB from 1 to "
                 "the largest card times the cards the pod spreads it over", _mem_variables),
    BackstopRule("GS005", _gs005, _gs005_message, "GS005: a pod must not mix mem-only and core+mem containers"),
    BackstopRule("GS006", _gs006, _gs006_message, "GS006: whole GPUs and shared GPU are not mixed in one pod"),
    BackstopRule("GS007", _gs007, _gs007_message, "GS007: a resource name that narrowly misses a shared-GPU name "
                 "is offered by no node; use the exact name", _near_miss_variables),
    BackstopRule("GS010", isolation.forged, isolation.forged_message, "GS010: a container sets an environment "
                 "variable the GPU-sharing device plugin sets", isolation.forged_variables),
    BackstopRule("GS011", isolation.lifted, isolation.lifted_message, "GS011: a container lifts GPU isolation "
                 "without an admin's grant", isolation.lifted_variables),
)
SCHEDULER_RULE = "GM001"  # the optional rule stands in for the GM001 mutation while the webhook is down
# The rules that judge kubectl debug's ephemeralcontainers subresource (GS010, GS011: the variables an
# ephemeral container sets); every other validation passes such a request.
DEBUG_RULES = frozenset({"GS010", "GS011"})


def covered_rules(settings: PolicySettings) -> list[BackstopRule]:
    """The covered rules that are enabled with severity deny (a warn rule must not deny in the backstop):
    as configured, else the rule's own (GS011 warns unless configured to deny)."""
    out = []
    for entry in BACKSTOP_RULES:
        override = settings.rules.get(entry.id)
        if override is not None and not override.enabled:
            continue
        severity = override.severity if override is not None and override.severity else REGISTRY[entry.id].severity
        if severity == "deny":
            out.append(entry)
    return out



# -- the objects ----------------------------------------------------------------------------------

def _scheduler_validation(settings: PolicySettings) -> dict[str, str]:
    mem = Res(settings.names.resources.gpu_mem)
    wanted = settings.names.injected_scheduler
    assert wanted is not None
    return {
        "expression": f"{isolation.DEBUG} || variables.exempt{SCHEDULER_RULE} || object.kind != 'Pod' || "
                      f"!{CONTAINERS}.exists(c, {mem.named()}) || "
                      f"(has(object.spec.schedulerName) && object.spec.schedulerName == {_q(wanted)})",
        "messageExpression": f"'{SCHEDULER_RULE}: ' + {SUBJECT} + ' asks for {mem.name} but names scheduler ' + "
                             f"(has(object.spec.schedulerName) ? object.spec.schedulerName : 'default-scheduler') + "
                             f"'; set schedulerName: {wanted} (the gpushare webhook sets it when it is up; "
                             f"this backstop rule holds while it is not)'",
        "message": f"{SCHEDULER_RULE}: a pod asking for {mem.name} must name schedulerName {wanted}",
        "reason": "Forbidden",
    }


def judged_change(settings: PolicySettings) -> str:
    """The policy's matchCondition: a CREATE, or an UPDATE of an object not being deleted that changes
    a part the rules judge (policies/rules/judged.py), as the webhooks' conditions send. Without it the API
    server would deny the garbage collector's finalizer removal, a label, a scale of an object that
    broke a rule before the policy was installed."""
    kinds = set(POD_SPEC_PATHS)
    declared = resolve([r.relevance for r in REGISTRY.values() if kinds & r.kinds], settings)
    changed = by_kind(lambda kind: parts_for(kind, declared, settings).cel_changed(), "true")
    return f"request.operation != 'UPDATE' || {CEL_NOT_DELETING} && {changed}"


def backstop_policy(settings: PolicySettings, known_ids: frozenset[str]) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, as plain objects ready for YAML."""
    backstop = settings.backstop
    rules = covered_rules(settings)
    # The scheduler rule stands in for GM001: with names.scheduler_name "none" there is no scheduler to require.
    scheduler_rule = backstop.scheduler_rule and settings.names.injected_scheduler is not None
    ids = [r.id for r in rules] + ([SCHEDULER_RULE] if scheduler_rule else [])
    # On kubectl debug's subresource only the rules that judge the ephemeral containers it adds run.
    validations = [{"expression": f"{'' if r.id in DEBUG_RULES else isolation.DEBUG + ' || '}variables.exempt{r.id} "
                                  f"|| !{r.bad(settings)}",
                    "messageExpression": r.message(settings), "message": r.static, "reason": "Forbidden"}
                   for r in rules]
    if scheduler_rule:
        validations.append(_scheduler_validation(settings))
    labels = {"app.kubernetes.io/name": "gpushare-webhook", "app.kubernetes.io/component": "backstop"}
    resource_rules = [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": list(resources), "scope": "Namespaced"} for group, resources in RESOURCE_RULES]
    policy = {
        "apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": backstop.policy_name, "labels": labels,
                     "annotations": {"gpushare.io/covers": ",".join(ids),
                                     "gpushare.io/generated-by": "gpushare policy export"}},
        "spec": {
            # A CEL error (an object of an unexpected shape) denies, as the webhook's 400 would under Fail.
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": resource_rules},
            "matchConditions": [{"name": "judged-change", "expression": judged_change(settings)}],
            "variables": policy_variables(settings, ids, known_ids,
                                          [v for rule in rules for v in rule.variables(settings)]),
            "validations": validations,
        },
    }
    binding = {
        "apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": backstop.policy_name, "labels": labels},
        "spec": {"policyName": backstop.policy_name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchExpressions": [
                     {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                      "values": list(backstop.excluded_namespaces)}]}}},
    }
    return [policy, binding]
