"""Every rule's relevance admits the rule's own trigger: a generic test over every registered rule
and mutation (CONTRIBUTING.md, "Add a rule"; docs/internals.md).

Objects are generated from the settings and the declarations, never from a fixed list: every
resource name of ``ResourceNames`` (a new one is generated as soon as it is declared) in each
container group with values of each shape, pairs of them, on each node of a cluster of every mode;
every variable ``names.env`` lists or a declaration names, with and without GPUs beside it; every
annotation a declaration names; each as a Pod, a Deployment, a CronJob and a custom workload (whose
requests the API server does not canonicalise); GPU nodes in every mode with each label the node rules
read, created and relabelled from every other mode; GPU quotas. Per rule, two checks:

- it finds something on some generated object: a rule whose trigger the generator never builds is
  a rule whose relevance nobody checks (its relevance may name the wrong thing, or the generator
  needs what triggers it: add it here);
- every object it finds something on is sent by its own declaration (``Triggers.sends``), not only
  by the union of all of them, and by the generated matchCondition of the webhook its kind is
  registered with (the shipped CEL, evaluated with cel-python).

A rule planted with a wrong relevance fails both (``test_a_relevance_that_misses_the_rules_trigger_is_caught``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import celpy
import pytest

from policies.admission.engine import EXISTING, Engine
from policies.generate.match_conditions import SCOPES, WebhookScope, match_conditions, scope_sends, triggers
from policies.model.resources import CUSTOM_WORKLOADS, POD_SPEC_PATHS
from policies.model.settings import KUBERNETES_GROUPS
from policies.rules.base import REGISTRY, Found, rule
from policies.rules.mutations import MUTATIONS
from policies.rules.relevance import Relevance, resolve
from tests.deploy.test_match_conditions import NODE_NAMES, SETTINGS, STATE
from tests.support.cluster_builders import gpu_node
from tests.support.near_miss_cases import NEAR_MISSES
from webhook.settings import Settings

Obj = dict[str, Any]
_ENV = celpy.Environment()
POD_VALIDATE, POD_MUTATE = "pods.validate.gpushare.io", "pods.mutate.gpushare.io"
# Values of each shape: zero, small and large whole counts, a percentage that is no multiple of 5,
# over 100, over any card, a fraction, a suffixed quantity.
VALUES = ("0", "1", "2", "33", "100", "150", "2000", "500m", "2Gi")
# Rules the generator does not reach, and where their relevance is held instead. A rule added later
# is not here: it must be reached (or listed with a reason, and given a hand-written case in
# tests/server/test_warning_limit.py, which makes every other rule speak on a generated object).
OUT_OF_REACH = {
    "GQ005": "needs quotas in the cluster state: tests/server/test_quota_rules.py",
    "GB003": "needs 20 pods on one card in the cluster state: tests/domain/test_placement_rules.py",
}


@dataclass(frozen=True)
class Witness:
    """A generated object, and the resource (and its API group) the API server is asked about."""

    kind: str
    obj: Obj
    webhook: str  # unused: which webhooks may be sent it comes from SCOPES (``registered``)
    resource: str
    group: str = ""
    operation: str = "CREATE"
    old: Obj | None = None


def _container(name: str, resources: dict[str, str] | None = None, *, requests: dict[str, str] | None = None,
               env: list[Obj] | None = None, env_from: bool = False) -> Obj:
    container: Obj = {"name": name, "image": "cuda:12"}
    if resources is not None or requests is not None:
        container["resources"] = {**({"limits": resources} if resources else {}),
                                  **({"requests": requests} if requests else {})}
    if env:
        container["env"] = env
    if env_from:
        container["envFrom"] = [{"configMapRef": {"name": "c"}}]
    return container


def _pod(spec: Obj, namespace: str = "team-c", annotations: dict[str, str] | None = None,
         labels: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": "p", "namespace": namespace, **({"annotations": annotations} if annotations else {}),
                 **({"labels": labels} if labels else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _env_names(settings: Settings) -> list[str]:
    """Every variable names.env lists or a declaration names (literally or by a names.env field)."""
    env = settings.names.env
    names = [*env.device_plugin, *env.mps, env.visible_devices, env.disable_isolation, settings.names.env_mem_container]
    declared = [*REGISTRY.values(), *MUTATIONS.values()]
    names += [n for d in declared for n in resolve([d.relevance], settings).env]
    return list(dict.fromkeys(names))


def _annotations(settings: Settings) -> list[str]:
    """Every annotation key a declaration names."""
    declared = [*REGISTRY.values(), *MUTATIONS.values()]
    return sorted({k for d in declared for k in resolve([d.relevance], settings).annotations})


def pod_specs(settings: Settings) -> Iterator[tuple[Obj, str, dict[str, str] | None, dict[str, str] | None]]:
    """(pod spec, namespace, annotations, labels) in the shapes the API server admits (an extended
    resource's request equals its limit)."""
    r = settings.names.resources
    asked = list(r.asked())
    keys = [*r.names(), *(key for key, _, _ in NEAR_MISSES[:6])]
    for key, value, group, both in itertools.product(keys, VALUES, ("containers", "initContainers"), (False, True)):
        limits = {key: value}
        container = _container(f"{group}-0", limits, requests=dict(limits) if both else None)
        spec: Obj = {"containers": [container]} if group == "containers" else {
            "containers": [_container("app", {r.gpu_mem: "2"})], "initContainers": [container]}
        yield spec, "team-c", None, None
    for first, second in itertools.permutations(asked, 2):  # two resources in one container, or one beside it
        for value in ("2", "30", "100"):
            yield {"containers": [_container("app", {first: value, second: value})]}, "team-c", None, None
        one, both = _container("one", {first: "2"}), _container("both", {first: "2", second: "30"})
        yield {"containers": [one, both]}, "team-c", None, None
        for node in NODE_NAMES:
            yield {"containers": [both], "nodeName": node}, "team-c", None, None
    for key, node in itertools.product(asked, NODE_NAMES):  # created on a node: the placement rules judge it
        for value in ("1", "2", "30", "100"):
            yield {"containers": [_container("app", {key: value})], "nodeName": node}, "team-c", None, None
    for spread, value in itertools.product(("2", "3", "x", "0"), ("2", "4")):  # the multi-GPU label
        yield ({"containers": [_container("app", {r.gpu_mem: value})]}, "team-c", None,
               {settings.names.labels.pod_gpu_count: spread})
    for name, value, gpus in itertools.product(_env_names(settings), ("1", "all", "none", "true"),
                                               (None, {r.gpu_mem: "2"})):
        yield {"containers": [_container("app", gpus, env=[{"name": name, "value": value}])]}, "team-c", None, None
    for name, key in itertools.product(_env_names(settings), asked):  # each variable beside each resource
        yield {"containers": [_container("app", {key: "1"}, env=[{"name": name, "value": "1"}])]}, "team-c", None, None
    for gpus in (None, *({k: "1"} for k in asked)):  # envFrom: names admission cannot see
        yield {"containers": [_container("app", gpus, env_from=True)]}, "team-c", None, None
    for key, value, namespace in itertools.product(asked, ("2",), ("team-a", "team-b", "team-c")):
        for annotation, text in itertools.product(_annotations(settings), ("GS003", "", "GS999")):
            yield {"containers": [_container("app", {key: value})]}, namespace, {annotation: text}, None
    for scheduler in ("default-scheduler", "ack-co-scheduler", "volcano"):
        yield {"containers": [_container("app", {r.gpu_mem: "2"})], "schedulerName": scheduler}, "team-c", None, None


def custom_specs(settings: Settings) -> Iterator[Obj]:
    """Pod specs a custom workload may hold: the API server neither checks nor canonicalises them."""
    for key, value in itertools.product(settings.names.resources.asked(), ("1", "2", "30")):
        yield {"containers": [_container("app", {key: value}, requests={key: "4"})]}  # a request over its limit
        yield {"containers": [_container("app", requests={key: value})]}  # a request without a limit


def _template(spec: Obj, meta: Obj) -> Obj:
    return {"metadata": {"labels": {"app": "x", **meta.get("labels", {})},
                         **({"annotations": meta["annotations"]} if "annotations" in meta else {})},
            "spec": {k: v for k, v in spec.items() if k != "nodeName"}}


def witnesses(settings: Settings) -> list[Witness]:
    found = []
    for spec, namespace, annotated, labels in pod_specs(settings):
        pod = _pod(spec, namespace, annotated, labels)
        found.append(Witness("Pod", pod, POD_VALIDATE, "pods"))
        template = _template(spec, pod["metadata"])
        meta = {"name": "w", "namespace": namespace}
        found.append(Witness("Deployment", {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
            "selector": {"matchLabels": {"app": "x"}}, "template": template}}, "workloads.validate.gpushare.io",
            "deployments", "apps"))
        found.append(Witness("CronJob", {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta, "spec": {
            "schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}},
            "cronjobs.validate.gpushare.io", "cronjobs", "batch"))
        found.append(_pytorch_job(template, namespace))
    for spec in custom_specs(settings):
        found.append(_pytorch_job(_template(spec, {}), "team-c"))
    gpu = {"name": "main", "image": "cuda", "resources": {"limits": {settings.names.resources.gpu_mem: "2"}}}
    for scheduler in ("volcano", "default-scheduler"):  # a Volcano Job gives its pods a scheduler
        tasks = [{"name": "t", "template": {"spec": {"containers": [gpu]}}}]
        found.append(Witness("Job", {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {
            "name": "v", "namespace": "team-c"}, "spec": {"schedulerName": scheduler, "tasks": tasks}},
            "custom-workloads.validate.gpushare.io", "jobs", "batch.volcano.sh"))
    for name in settings.names.gpushare_daemonsets:  # the GPU-sharing DaemonSets and their pods
        template = {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "plugin", "image": "p"}]}}
        found.append(Witness("DaemonSet", {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {
            "name": name, "namespace": "kube-system"}, "spec": {"selector": {"matchLabels": {"app": name}},
                                                                "template": template}}, "", "daemonsets", "apps"))
        owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name, "uid": "u", "controller": True}
        found.append(Witness("Pod", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"{name}-x", "namespace": "kube-system", "ownerReferences": [owner]}, "spec": template["spec"]},
            "", "pods"))
    found += node_witnesses(settings)
    found += quota_witnesses(settings)
    for key in settings.names.resources.asked():  # an Argo template's pod spec patch, a string
        patch = '{"containers":[{"name":"main","resources":{"limits":{"' + key + '":"{{inputs.m}}"}}}]}'
        found.append(Witness("Workflow", {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {
            "name": "a", "namespace": "team-c"}, "spec": {"templates": [{"name": "t", "podSpecPatch": patch,
                                                                         "container": {"image": "busybox"}}]}},
            "custom-workloads.validate.gpushare.io", "workflows", "argoproj.io"))
    return found


# Node modes, and one no component knows; what else a node may show besides its mode.
MODES = ("cgpu", "core_mem", "share", "mps", "topology", "default", "exclusive", "bogus")


def _node_variants(settings: Settings) -> list[tuple[dict[str, str], Obj]]:
    """(labels, spec) a GPU node may carry beside its mode: the labels the node rules read (each
    name in ``names.labels`` and ``nodes``) with values they refuse, and a node that is no ECS instance."""
    labels, nodes = settings.names.labels, settings.nodes
    variants: list[tuple[dict[str, str], Obj]] = [({}, {})]
    variants += [({labels.cpu_manager_policy: "static"}, {}), ({labels.placement: "bogus"}, {}),
                 ({labels.region: "xx-nowhere-1"}, {"providerID": "xx-nowhere-1.i-abc"}),
                 ({}, {"providerID": "aws:///us-east-1a/i-abc"}),
                 ({}, {"taints": [{"key": nodes.uninitialized_taint, "effect": "NoSchedule"}]})]
    variants += [({key: "418.87.01"}, {}) for key in nodes.driver_version_labels]
    return variants


def node_witnesses(settings: Settings) -> list[Witness]:
    """A GPU node in each mode with each variant, created, and updated from each other mode."""
    schedule = settings.names.labels.schedule
    found = []
    for (labels, spec), mode in itertools.product(_node_variants(settings), MODES):
        def node(mode: str, labels: dict[str, str] = labels, spec: Obj = spec) -> Obj:
            obj = gpu_node("cgpu-1", "cgpu", labels=labels)  # the state runs a GPU pod on it
            obj["metadata"]["labels"][schedule] = mode
            obj["spec"] = {**obj["spec"], **spec}
            return obj
        found.append(Witness("Node", node(mode), "", "nodes"))
        found += [Witness("Node", node(mode), "", "nodes", operation="UPDATE", old=node(before))
                  for before in MODES if before != mode]
    return found


def quota_witnesses(settings: Settings) -> list[Witness]:
    """GPU quotas: a ResourceQuota's keys and values, an ElasticQuotaTree's min and max."""
    found = []
    for key, prefix, value in itertools.product(settings.names.resources.asked(), ("", "requests.", "limits."),
                                                ("4", "16Gi")):
        found.append(Witness("ResourceQuota", {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {
            "name": "q", "namespace": "team-c"}, "spec": {"hard": {f"{prefix}{key}": value}}}, "", "resourcequotas"))
    for key, (low, high) in itertools.product(settings.names.resources.asked(), (("8", "4"), ("4", "8"))):
        child = {"name": "team-c", "namespaces": ["team-c"], "min": {key: low}, "max": {key: high}}
        root = {"name": "root", "min": {key: "4"}, "max": {key: "8"}, "children": [child]}
        found.append(Witness("ElasticQuotaTree", {"apiVersion": "scheduling.sigs.k8s.io/v1beta1",
                                                  "kind": "ElasticQuotaTree", "metadata": {
                                                      "name": "elasticquotatree", "namespace": "kube-system"},
                                                  "spec": {"root": root}}, "", "elasticquotatrees",
                             "scheduling.sigs.k8s.io"))
    return found


def _pytorch_job(template: Obj, namespace: str) -> Witness:
    return Witness("PyTorchJob", {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {
        "name": "j", "namespace": namespace}, "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1,
                                                                                          "template": template}}}},
        "custom-workloads.validate.gpushare.io", "pytorchjobs", "kubeflow.org")


def findings(engine: Engine, w: Witness) -> set[str]:
    """Every rule that finds something on the witness (with and without the cluster) and every
    mutation that patches it."""
    found: set[str] = set()
    namespace = w.obj["metadata"].get("namespace", "")
    for state in (None, STATE):
        def judged(obj: Obj, state: Any = state) -> set[tuple[str, str]]:
            subject = engine.subject(w.kind, obj, namespace=namespace, state=state, operation=w.operation, old=w.old,
                                     admission=True)
            verdict = engine.validate(subject)
            return {(f.rule, f.message.removesuffix(EXISTING)) for f in [*verdict.findings, *verdict.exempted]}
        # On an UPDATE, only what the change brings (docs/design.md, "What an UPDATE is judged on").
        before = judged(w.old) if w.old is not None else set()
        found |= {rule_id for rule_id, _ in judged(w.obj) - before}
    subject = engine.subject(w.kind, w.obj, namespace=namespace, operation=w.operation, old=w.old, admission=True)
    return found | set(engine.mutate(subject).patch_ids)


class ShippedConditions:
    """The matchConditions generated for the settings, evaluated with cel-python as the API server does."""

    def __init__(self, settings: Settings) -> None:
        self._conditions = match_conditions(settings)
        self._programs: dict[str, Any] = {}

    def sends(self, webhook: str, w: Witness) -> bool:
        if webhook not in self._programs:
            self._programs[webhook] = _ENV.program(_ENV.compile(self._conditions[webhook][0]["expression"]))
        version = str(w.obj["apiVersion"]).rpartition("/")[2]
        request = {"operation": w.operation, "kind": {"group": w.group, "version": version, "kind": w.kind},
                   "resource": {"group": w.group, "version": version, "resource": w.resource}}
        result = self._programs[webhook].evaluate({"object": celpy.json_to_cel(w.obj), "oldObject": celpy.json_to_cel(
            w.old), "request": celpy.json_to_cel(request)})
        assert isinstance(result, celpy.celtypes.BoolType), f"CEL evaluation failed: {result!r}"
        return bool(result)


def registered(w: Witness, mutating: bool) -> list[WebhookScope]:
    """The webhooks (validating or mutating) registered for the witness's kind and operation."""
    candidates = [scope for scope in SCOPES if scope.mutating == mutating and w.operation in scope.operations
                  and not scope.subresource]
    explicit = [scope for scope in candidates if w.kind in scope.kinds]
    if explicit and not (w.group not in KUBERNETES_GROUPS and w.kind in POD_SPEC_PATHS):  # a Volcano Job is no Job
        return explicit
    return [scope for scope in candidates if CUSTOM_WORKLOADS in scope.kinds]


def missed(settings: Settings, kinds: frozenset[str] | None = None) -> tuple[dict[str, list[str]], set[str]]:
    """(rule or mutation -> how its own declaration or the webhooks' conditions miss an object it
    judges, the rules and mutations judging ``kinds`` (all: None) that found nothing on any generated one).
    The conditions are evaluated in Python (``scope_sends``, which the property tests of
    tests/deploy/test_match_conditions.py hold to the CEL) on every witness, and as shipped CEL (cel-python) on
    the first witness of each rule and kind."""
    engine = Engine(settings)
    shipped = ShippedConditions(settings)
    scope_triggers = {scope.name: triggers(scope, settings) for scope in SCOPES}
    declared = {**{r.id: r for r in REGISTRY.values() if r.kinds}, **MUTATIONS}
    fired: set[str] = set()
    seen: set[tuple[str, str]] = set()  # (judge, kind) found once: its CEL evaluated
    problems: dict[str, list[str]] = {}
    for w in witnesses(settings):
        if kinds is not None and w.kind not in kinds:
            continue
        for judge in sorted(findings(engine, w) & set(declared)):
            first = (judge, w.kind) not in seen
            fired.add(judge)
            seen.add((judge, w.kind))
            if not resolve([declared[judge].relevance], settings).sends(w.kind, w.obj, settings, group=w.group or None,
                                                                        operation=w.operation, old=w.old):
                problems.setdefault(judge, []).append(f"its relevance does not send this {w.kind}: {w.obj}")
                continue
            scopes = registered(w, judge in MUTATIONS)
            if not any(scope_sends(s, scope_triggers[s.name], w.kind, w.obj, settings, operation=w.operation,
                               old=w.old) for s in scopes) or (
                    first and not any(shipped.sends(s.name, w) for s in scopes)):
                names = ", ".join(s.name for s in scopes)
                problems.setdefault(judge, []).append(f"no webhook's matchCondition ({names}) sends this {w.kind}: "
                                                      f"{w.obj}")
    judging = {j for j, d in declared.items() if kinds is None or (set(d.kinds) & kinds)}
    return problems, judging - fired


@pytest.fixture(scope="module")
def verdict() -> tuple[dict[str, list[str]], set[str]]:
    return missed(SETTINGS)


def test_every_object_a_rule_judges_is_sent_by_its_own_relevance_and_the_shipped_condition(verdict):
    problems, _ = verdict
    assert not problems, "\n".join(f"{judge}: {found[0]}" for judge, found in sorted(problems.items()))


def test_every_rule_finds_something_on_some_generated_object(verdict):
    _, never = verdict
    reached = never - set(OUT_OF_REACH)
    assert not reached, (f"{sorted(reached)} find nothing on any generated object: its relevance may miss its own "
                         f"trigger, or tests/deploy/test_rule_relevance.py must build what triggers it")
    assert set(OUT_OF_REACH) <= never, f"reached now, so no longer out of reach: {sorted(set(OUT_OF_REACH) - never)}"


TOY_VARIABLE = "TOY_GPU_SETTING"


def _toy(subject: Any) -> Iterator[Found]:
    """A rule that warns of a container setting TOY_GPU_SETTING (CONTRIBUTING.md's toy rule)."""
    spec, base = subject.pod_spec
    for index, container in enumerate(spec.get("containers", []) if isinstance(spec, dict) else []):
        if any(e.get("name") == TOY_VARIABLE for e in container.get("env", []) if isinstance(e, dict)):
            yield Found(f"container {container.get('name')!r} sets {TOY_VARIABLE}", (*base, "containers", index))


PLANTED = [  # (the toy's relevance, a rule beside it whose relevance names the toy's variable, what is caught)
    ("right", Relevance(env=(TOY_VARIABLE,)), False, None),
    ("another variable", Relevance(env=("TOY_OTHER_SETTING",)), False, "never"),
    ("another variable, the trigger built for another rule", Relevance(env=("TOY_OTHER_SETTING",)), True, "not sent"),
    ("gpu-mem instead", Relevance(resources=("gpu_mem",)), True, "not sent"),
]


@pytest.mark.parametrize(("what", "relevance", "beside", "caught"), PLANTED, ids=[p[0] for p in PLANTED])
def test_a_relevance_that_misses_the_rules_trigger_is_caught(what, relevance, beside, caught):
    if beside:  # the toy's variable is generated because another declaration names it
        rule("GX903", severity="warn", seed="test", kinds=("Pod",), title="t", doc="d",
             relevance=Relevance(env=(TOY_VARIABLE,)))(lambda subject: iter(()))
    rule("GX904", severity="warn", seed="test", kinds=("Pod",), title="t", doc="d", relevance=relevance)(_toy)
    try:
        problems, never = missed(SETTINGS, frozenset({"Pod"}))
    finally:
        REGISTRY.pop("GX903", None)
        del REGISTRY["GX904"]
    assert ("GX904" in never) == (caught == "never")
    assert ("GX904" in problems) == (caught == "not sent"), problems.get("GX904")
