"""The webhooks' matchConditions, generated from what each rule and mutation declares relevant.

The API server evaluates a webhook's matchConditions before it calls the webhook; an object they
turn down never reaches it (and never waits on it while it is down). Each enabled rule and
mutation declares what makes an object relevant to it (policies/rules/relevance.py); a webhook's
condition is the union of those declarations over the kinds it is registered for, so a rule
added with its declaration is carried to the API server by regenerating, never by editing CEL:

    gpushare policy export --webhooks -o kustomize > deploy/kustomize/match-conditions.yaml
    gpushare policy export --webhooks -o helm > deploy/helm/gpushare-webhook/match-conditions.yaml

(tests/deploy/test_match_conditions.py fails while the checked-in files differ from what this gives).

The CEL uses only what cel-go and cel-python share (``has``, ``in``, macros, ``matches`` with
RE2), so the tests evaluate it exactly as written. Kubernetes: "Matching requests: matchConditions"
(admission webhooks, GA in 1.30); the API server spends at most 2,500,000 cost units on one
webhook's conditions per request (RuntimeCELCostBudgetMatchConditions, k8s.io/apiserver/pkg/apis/cel).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from policies import rules as _rules  # noqa: F401  (registers every rule module)
from policies.generate.near_miss_regex import domain_regex, name_part_regex
from policies.generate.workload_conditions import container_test, workload_terms
from policies.model.isolation import EPHEMERAL, EPHEMERAL_SUBRESOURCE
from policies.model.near_miss import skipped_keys
from policies.model.resources import CONTAINER_GROUPS, CUSTOM_WORKLOADS, POD_SPEC_PATHS
from policies.model.settings import PolicySettings
from policies.model.workloads import workload_table
from policies.quota.quota_objects import QUOTA_KINDS, gpu_resources
from policies.rules.base import REGISTRY
from policies.rules.cel import guarded, quote, string_list
from policies.rules.judged import CEL_NOT_DELETING, parts_for
from policies.rules.mutations import MUTATIONS
from policies.rules.relevance import Relevance, Triggers, resolve


@dataclass(frozen=True, slots=True)
class WebhookScope:
    """One webhook of the deploy manifests: what it is registered for (its ``rules``)."""

    name: str
    condition: str  # the matchCondition's name
    mutating: bool
    kinds: tuple[str, ...]
    operations: tuple[str, ...]
    # The narrow webhook for the GPU-sharing DaemonSets (GM002) carries that trigger alone; the
    # others never carry it (they exclude kube-system, where those DaemonSets run).
    daemonsets: bool = False
    # The opt-in kustomize component that registers the webhook ("": the base, webhooks.yaml).
    component: str = ""
    # None: any object; True: only objects a controller made (a controller reference in
    # metadata.ownerReferences: a ReplicaSet's, Job's or StatefulSet's pod, a Deployment's ReplicaSet, a
    # CronJob's Job); False: only the others. What a controller makes comes from a template the
    # webhooks judged; its registration fails open, so an outage never stops a workload from healing.
    controlled: bool | None = None
    # The subresource it is registered for ("": the objects themselves): only the rules registered for
    # that subresource's change declare what it is sent.
    subresource: str = ""


WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController")
CREATE_UPDATE = ("CREATE", "UPDATE")
# The webhooks with conditions, as deploy/kustomize/webhooks.yaml registers them. The bindings
# webhook has none: a Binding does not say what its pod requests.
SCOPES: tuple[WebhookScope, ...] = (
    WebhookScope("pods.mutate.gpushare.io", "gpushare-relevant", True, ("Pod",), ("CREATE",)),
    WebhookScope("gpushare-daemonsets.mutate.gpushare.io", "gpushare-daemonset-by-name", True,
                 ("DaemonSet", "Pod"), CREATE_UPDATE, daemonsets=True),
    WebhookScope("pods.validate.gpushare.io", "gpushare-relevant", False, ("Pod",), ("CREATE",), controlled=False),
    WebhookScope("controlled-pods.validate.gpushare.io", "gpushare-relevant", False, ("Pod",), ("CREATE",),
                 controlled=True),
    WebhookScope("workloads.validate.gpushare.io", "gpushare-relevant", False, WORKLOAD_KINDS, CREATE_UPDATE,
                 controlled=False),
    WebhookScope("cronjobs.validate.gpushare.io", "gpushare-relevant", False, ("CronJob",), CREATE_UPDATE,
                 controlled=False),
    # Mode changes wait for the webhook; a node registering does not (the audit judges it).
    WebhookScope("nodes.validate.gpushare.io", "gpu-scheduling-labels", False, ("Node",), ("UPDATE",)),
    WebhookScope("new-nodes.validate.gpushare.io", "gpu-scheduling-labels", False, ("Node",), ("CREATE",)),
    # kubectl debug: pods/ephemeralcontainers, whose UPDATE sends the whole Pod (policies/model/isolation.py).
    WebhookScope("debug-containers.validate.gpushare.io", "gpushare-debug-containers", False, ("Pod",), ("UPDATE",),
                 subresource=EPHEMERAL_SUBRESOURCE),
    # GPU quotas (ResourceQuota, ACK's ElasticQuotaTree, Kueue's ClusterQueue; policies/quota/quota_objects.py).
    WebhookScope("quotas.validate.gpushare.io", "gpushare-gpu-quota", False, QUOTA_KINDS, CREATE_UPDATE),
    # Opt-in: custom resources holding pod templates (policies/model/workloads.py), registered at install.
    WebhookScope("custom-workloads.validate.gpushare.io", "gpushare-relevant", False, (CUSTOM_WORKLOADS,),
                 CREATE_UPDATE, component="custom-workloads"),
)


def _enabled(rule_id: str, settings: PolicySettings) -> bool:
    override = settings.rules.get(rule_id)
    return override is None or override.enabled


def declarations(scope: WebhookScope, settings: PolicySettings) -> list[Relevance]:
    """What the enabled rules (or mutations) registered for the scope's kinds and operations declare."""
    kinds = set(scope.kinds)
    if scope.mutating:
        return [m.relevance for m in MUTATIONS.values() if _enabled(m.id, settings) and kinds & m.kinds]
    return [r.relevance for r in REGISTRY.values() if _enabled(r.id, settings) and kinds & r.kinds
            and set(scope.operations) & r.operations and (not scope.subresource or scope.subresource in r.subresources)]


def triggers(scope: WebhookScope, settings: PolicySettings) -> Triggers:
    """The scope's triggers under ``settings``: the union of its declarations, daemonsets kept apart."""
    found = resolve(declarations(scope, settings), settings)
    if scope.daemonsets:
        return Triggers(gpushare_daemonsets=found.gpushare_daemonsets)
    if scope.subresource == EPHEMERAL_SUBRESOURCE:
        # An ephemeral container has no resources: the names judged only beside gpu-mem (the mps
        # variables, CGPU_DISABLE) find nothing in it, and only env names can make one relevant.
        env = settings.names.env
        return Triggers(env=found.env - {*env.mps, env.disable_isolation})
    return replace(found, gpushare_daemonsets=frozenset())


# -- CEL -------------------------------------------------------------------------------------------

def _any(terms: Iterable[str], separator: str = " || ") -> str:
    kept = [t for t in terms if t]
    return separator.join(f"({t})" if " || " in t else t for t in kept) if kept else "false"


LINES = "\n|| "  # the top-level alternatives of a condition, one a line in the manifests


def _key_test(keys: frozenset[str], settings: PolicySettings, near_miss: bool) -> str:
    """CEL over a resource key ``k``: one of ``keys``, or (``near_miss``) a near miss of the shared-GPU
    names exactly as GS007 defines it (the two regexes the backstop uses; policies/generate/near_miss_regex.py)."""
    terms = [f"k in {string_list(keys)}" if keys else ""]
    if near_miss:
        r = settings.names.resources
        name = name_part_regex(r.gpu_mem, r.gpu_core)
        domain = domain_regex(r.gpu_mem, tuple(settings.near_miss.lookalike_domains))
        terms.append(f"!(k in {string_list(skipped_keys(settings))}) && k.matches({quote(name)}) && "
                     f"k.matches({quote(domain)})")
    return _any(terms)


def _names_key(test: str) -> str:
    """CEL over a container ``c``: a key of its limits or requests passes ``test`` (over ``k``)."""
    sections = " || ".join(f"(has(c.resources.{s}) && c.resources.{s}.exists(k, {test}))"
                           for s in ("limits", "requests"))
    return f"has(c.resources) && ({sections})"


def _container_test(keys: frozenset[str], env: frozenset[str], settings: PolicySettings, near_miss: bool,
                    env_from: frozenset[str] = frozenset()) -> str:
    """CEL over a container ``c``: it names a key (limits or requests), sets an env variable, or takes
    envFrom beside one of the ``env_from`` keys."""
    terms = []
    if keys or near_miss:
        terms.append(_names_key(_key_test(keys, settings, near_miss)))
    if env:
        terms.append(f"has(c.env) && c.env.exists(e, e.name in {string_list(env)})")
    if env_from:
        terms.append(f"has(c.envFrom) && size(c.envFrom) > 0 && ({_names_key(f'k in {string_list(env_from)}')})")
    return _any(terms)


def _spec_test(spec: str, container: str) -> str:
    """CEL: some container or init container of the pod spec at ``spec`` passes ``container`` (one
    list, so the test is written once)."""
    app, init = "containers", "initContainers"
    assert set(CONTAINER_GROUPS) == {app, init}
    return (f"((has({spec}.{app}) ? {spec}.{app} : []) + (has({spec}.{init}) ? {spec}.{init} : []))"
            f".exists(c, {container})")


def _annotation_test(meta: str, keys: frozenset[str]) -> str:
    return " || ".join(f"({guarded(meta + '.annotations')} && {quote(k)} in {meta}.annotations)"
                       for k in sorted(keys))


def _pod_spec_condition(scope: WebhookScope, t: Triggers, settings: PolicySettings) -> str:
    paths = {POD_SPEC_PATHS[kind] for kind in scope.kinds}
    if len(paths) != 1:
        raise ValueError(f"{scope.name}: its kinds keep their pod spec at different paths: {sorted(paths)}")
    (path,) = paths
    spec = ".".join(("object", *map(str, path)))
    spec_guard = guarded(spec) if len(path) > 1 else ""
    terms = []
    container = _container_test(t.resources, t.env, settings, t.near_miss, t.env_from)
    if container != "false":
        test = _spec_test(spec, container)
        terms.append(f"{spec_guard} && {test}" if spec_guard else test)
    if t.placed_resources and "Pod" in scope.kinds:
        placed = _spec_test(spec, _container_test(t.placed_resources, frozenset(), settings, False))
        terms.append(f"has(object.spec.nodeName) && {placed}")
    if t.annotations:
        terms.append(_annotation_test("object.metadata", t.annotations))
        if len(path) > 1:  # a workload's pod template carries its pods' annotations
            terms.append(_annotation_test(".".join(("object", *map(str, path[:-1]), "metadata")), t.annotations))
    return _any(terms, LINES)


def _node_condition(t: Triggers) -> str:
    def labelled(obj: str) -> str:
        keys = " || ".join(f"{quote(k)} in {obj}.metadata.labels" for k in sorted(t.node_labels))
        return f"has({obj}.metadata.labels) && ({keys})"

    terms = [labelled("object") if t.node_labels else ""]
    if t.annotations:
        terms.append(_annotation_test("object.metadata", t.annotations))
    if t.node_labels:
        terms.append(f"request.operation == 'UPDATE' && {labelled('oldObject')}")
    return _any(terms, LINES)


def _workload_condition(t: Triggers, settings: PolicySettings) -> str:
    """Custom workloads: a container of a pod location shows a trigger, a pod spec patch string mentions
    one, or the object's own metadata carries an annotation trigger (their exemption is read there)."""
    key_test = _key_test(t.resources, settings, t.near_miss)
    container = container_test(t.resources, t.custom_requests, t.env, key_test, t.env_from)
    terms = workload_terms(workload_table(settings).kinds(), container, t.patch_mentions)
    if t.annotations:
        terms.append(_annotation_test("object.metadata", t.annotations))
    return _any(terms, LINES)


def _quota_condition(t: Triggers, settings: PolicySettings) -> str:
    """Quota objects naming a GPU resource, as ``quota_sent`` reads them; every ElasticQuotaTree (CEL cannot
    walk a tree of any depth)."""
    if not t.gpu_quotas:
        return "false"
    names = gpu_resources(settings.names)
    keys = string_list(frozenset(f"{prefix}{name}" for name in names for prefix in ("requests.", "limits.", "")))
    queue = (f"has(object.spec.resourceGroups) && object.spec.resourceGroups.exists(g, has(g.flavors) && "
             f"g.flavors.exists(f, has(f.resources) && f.resources.exists(r, has(r.name) && "
             f"r.name in {string_list(frozenset(names))})))")
    return (f"request.resource.resource == 'elasticquotatrees'"
            f"{LINES}(request.resource.resource == 'resourcequotas' && has(object.spec) && has(object.spec.hard) "
            f"&& object.spec.hard.exists(k, k in {keys}))"
            f"{LINES}(request.resource.resource == 'clusterqueues' && has(object.spec) && {queue})")


def _daemonset_condition(t: Triggers) -> str:
    names = string_list(t.gpushare_daemonsets)
    return (f"request.resource.resource == 'daemonsets' ? object.metadata.name in {names} : "
            f"(has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, "
            f"o.kind == 'DaemonSet' && o.name in {names}))")


def _judges_changes(scope: WebhookScope, t: Triggers, settings: PolicySettings, relevant: str) -> str:
    """``relevant``, and for an UPDATE: the object is not being deleted and the update changes a part
    the rules judge (policies/rules/judged.py), so that nothing else waits on the webhook or its outage."""
    if "UPDATE" not in scope.operations:
        return relevant
    changed = parts_for(scope.kinds[0], t, settings).cel_changed()
    return f"({relevant}\n) && (request.operation != 'UPDATE' || {CEL_NOT_DELETING} && {changed})"


# CEL: a controller made the object (Kubernetes "Owners and Dependents": at most one owner reference
# has controller: true, the one the controller set).
CEL_CONTROLLED = ("has(object.metadata.ownerReferences) && "
                  "object.metadata.ownerReferences.exists(o, has(o.controller) && o.controller == true)")


def controlled(obj: dict[str, Any]) -> bool:
    """Whether a controller made ``obj``: what ``CEL_CONTROLLED`` answers."""
    meta = obj.get("metadata")
    owners = meta.get("ownerReferences") if isinstance(meta, dict) else None
    return isinstance(owners, list) and any(isinstance(o, dict) and o.get("controller") is True for o in owners)


def scope_sends(scope: WebhookScope, t: Triggers, kind: str, obj: dict[str, Any], settings: PolicySettings, *,
                operation: str = "CREATE", old: dict[str, Any] | None = None) -> bool:
    """What the scope's condition answers, in Python: its triggers, its operations, whose objects."""
    if operation not in scope.operations or (scope.controlled is not None and controlled(obj) != scope.controlled):
        return False
    return t.sends(kind, obj, settings, operation=operation, old=old)


def _by_owner(scope: WebhookScope, condition: str) -> str:
    if scope.controlled is None:
        return condition
    owner = CEL_CONTROLLED if scope.controlled else f"!({CEL_CONTROLLED})"
    return f"{owner} && ({condition})"
def _debug_condition(t: Triggers) -> str:
    """The ephemeralcontainers subresource: an ephemeral container the old pod does not have (by name:
    none can be changed or removed) sets a judged name. Ephemeral containers have no resources, so
    names are all that can make one relevant."""
    if not t.env:
        return "false"
    new, old = f"object.spec.{EPHEMERAL}", f"oldObject.spec.{EPHEMERAL}"
    return (f"has({new}) && {new}.exists(c, has(c.env) && c.env.exists(e, e.name in {string_list(t.env)}) && "
            f"!(has({old}) && {old}.exists(o, o.name == c.name)))")


def condition(scope: WebhookScope, settings: PolicySettings) -> str:
    """The CEL expression of the scope's one matchCondition."""
    t = triggers(scope, settings)
    if scope.subresource == EPHEMERAL_SUBRESOURCE:
        return _debug_condition(t)
    if scope.daemonsets:
        return _daemonset_condition(t)
    if scope.kinds == ("Node",):
        return _judges_changes(scope, t, settings, _node_condition(t))
    if scope.kinds == (CUSTOM_WORKLOADS,):
        return _judges_changes(scope, t, settings, _workload_condition(t, settings))
    if scope.kinds == QUOTA_KINDS:
        return _quota_condition(t, settings)
    return _by_owner(scope, _judges_changes(scope, t, settings, _pod_spec_condition(scope, t, settings)))


def match_conditions(settings: PolicySettings) -> dict[str, list[dict[str, str]]]:
    """Every webhook's matchConditions, by webhook name."""
    return {scope.name: [{"name": scope.condition, "expression": condition(scope, settings)}] for scope in SCOPES}


def kustomize_patches(settings: PolicySettings) -> list[dict[str, Any]]:
    """Strategic-merge patches for the kustomize base: webhooks are merged by name."""
    conditions = match_conditions(settings)
    patches = []
    for kind, mutating in (("MutatingWebhookConfiguration", True), ("ValidatingWebhookConfiguration", False)):
        webhooks = [{"name": s.name, "matchConditions": conditions[s.name]} for s in SCOPES
                    if s.mutating is mutating and not s.component]
        patches.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                        "metadata": {"name": "gpushare-webhook"}, "webhooks": webhooks})
    return patches


CUSTOM_WORKLOADS_WEBHOOK = next(s.name for s in SCOPES if s.component == "custom-workloads")


def custom_workload_kinds(settings: PolicySettings) -> list[dict[str, Any]]:
    """What the custom workloads' webhook can be registered for: each kind of the workload table with
    its API group, versions, resource and scope (the Helm chart picks from these by name)."""
    return [{"name": k.name, "group": k.group, "versions": list(k.versions), "resource": k.plural,
             "scope": "Namespaced" if k.namespaced else "Cluster"} for k in workload_table(settings).kinds()]


def custom_workloads_patch(settings: PolicySettings, namespace: str = "gpushare-system",
                           excluded: tuple[str, ...] = ("kube-system", "gpushare-system")) -> dict[str, Any]:
    """The kustomize component's patch: the custom workloads' webhook, registered for every kind of the
    workload table (a kind whose CRD the cluster does not serve matches nothing), with its condition."""
    rules = [{"apiGroups": [k["group"]], "apiVersions": k["versions"], "operations": list(CREATE_UPDATE),
              "resources": [k["resource"]], "scope": k["scope"]} for k in custom_workload_kinds(settings)]
    webhook = {"name": CUSTOM_WORKLOADS_WEBHOOK, "admissionReviewVersions": ["v1"], "sideEffects": "None",
               "timeoutSeconds": 5, "failurePolicy": "Fail", "matchPolicy": "Equivalent",
               "clientConfig": {"service": {"name": "gpushare-webhook", "namespace": namespace, "path": "/validate",
                                            "port": 443}},
               "rules": rules,
               "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                           "values": list(excluded)}]},
               "matchConditions": match_conditions(settings)[CUSTOM_WORKLOADS_WEBHOOK]}
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "gpushare-webhook"}, "webhooks": [webhook]}
