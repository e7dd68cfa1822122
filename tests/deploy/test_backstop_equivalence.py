"""The backstop's CEL and the engine give the same verdict on every covered rule.

Hypothesis builds pods and workloads with GPU quantities in the canonical form the API server
stores and sends (``5``, ``30500m``, ``1k``, ``2Gi``...), exemption annotations, namespace
labels and config grants; the policy printed by ``gpushare policy export`` is evaluated with
cel-python (variables in order, as the API server binds ``variables.*``) and compared rule by
rule with the engine: a validation fails exactly when the engine denies with that rule, and its
message starts with the rule id. Resource keys include near misses of the shared-GPU names
(GS007): the names themselves, allow-listed names, look-alike and misspelt domains, rewritten
words, random edits and junk. Examples per run follow the hypothesis profile (tests/support/profiles.py:
``ci`` by default, ``HYPOTHESIS_PROFILE=large`` for ten times as many; the figures in
docs/operations.md); ``GPUSHARE_EQUIVALENCE_EXAMPLES`` sets the whole-object count outright.
"""

from __future__ import annotations

import copy
import json
import os
import re
from datetime import date
from typing import Any

import celpy
import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.admission.engine import Engine
from policies.generate.backstop import BACKSTOP_RULES, SCHEDULER_RULE, SECTION, backstop_policy
from policies.generate.near_miss_regex import name_part_regex
from policies.model.grants import StaticNamespaces
from policies.model.near_miss import meant_resource
from tests.support.canonical_quantity import canonical
from tests.support.check_helpers import run_gpushare
from tests.support.near_miss_cases import pod_with
from tests.support.profiles import examples
from tests.support.resource_keys import ASKED, CORE, COUNT, MEM, RESOURCE_KEYS, TOPOLOGY, WHOLE, edited
from webhook.settings import Settings

pytestmark = pytest.mark.processes

EXAMPLES = int(os.environ.get("GPUSHARE_EQUIVALENCE_EXAMPLES", "0")) or examples(50)
# Canonical quantity strings (Quantity.String() after the API server parsed what was written).
CANONICAL = {
    CORE: ["5", "10", "30", "35", "95", "100", "33", "0", "105", "-5", "30500m", "1k", "2500m", "1Ki"],
    MEM: ["1", "2", "4", "8", "15", "999", "1500", "0", "1k", "2k", "2Gi", "1Mi", "500m", "-1", "1500m", "1Ki", "1e3",
          "1024", "1025", "16k", "5500m"],
    WHOLE: ["1", "2", "0"], TOPOLOGY: ["1", "4", "0"],
}
# A resource name added to the settings is generated with plain counts until it gets values of its own.
for _name in ASKED:
    CANONICAL.setdefault(_name, ["1", "2", "0"])
GRANTS = [
    {"name": "by-name", "namespace": "team-a", "names": "legacy-*", "rules": ["GS003", "GM001", "GS010", "GS011"],
     "reason": "vendor image", "expires": "2999-01-01"},
    {"name": "by-label", "namespace": "team-b", "selector": {"matchLabels": {"app": "old"}, "matchExpressions": [
        {"key": "tier", "operator": "NotIn", "values": ["prod"]}]}, "rules": ["GS001", "GS005", "gs006", "GS007"],
     "reason": "migration", "expires": "2999-01-01"},
]
CONFIG = {"exemptions": {"annotation_namespaces": ["team-c"], "grants": GRANTS}, "backstop": {"scheduler_rule": True}}
SETTINGS = Settings(**CONFIG)
ENGINE = Engine(SETTINGS)
WORKLOADS = {"Pod": "v1", "PodTemplate": "v1", "ReplicationController": "v1", "Deployment": "apps/v1",
             "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "ReplicaSet": "apps/v1", "Job": "batch/v1",
             "CronJob": "batch/v1"}


class Backstop:
    """The exported policy compiled with cel-python: variables bound in order, then every validation."""

    def __init__(self, policy: dict[str, Any]) -> None:
        env = celpy.Environment()
        self.variables = [(v["name"], env.program(env.compile(v["expression"]))) for v in policy["spec"]["variables"]]
        self.validations = [(env.program(env.compile(v["expression"])),
                             env.program(env.compile(v["messageExpression"])))
                            for v in policy["spec"]["validations"]]

    def variable(self, name: str, bound: dict[str, Any]) -> Any:
        """A GS007 variable (they read only ``variables.spec`` and each other), with ``bound`` given."""
        values: dict[Any, Any] = {celpy.celtypes.StringType(k): celpy.json_to_cel(v) for k, v in bound.items()}
        for other, program in self.variables:  # in order, as the API server binds them
            if other in ("nearMissSkipped", "resourceKeys", "nearMisses"):
                value = program.evaluate({"variables": celpy.celtypes.MapType(values)})
                assert not isinstance(value, celpy.CELEvalError), f"variable {other}: {value!r}"
                values[celpy.celtypes.StringType(other)] = value
                if other == name:
                    return value
        raise KeyError(name)

    def failures(self, obj: dict[str, Any], namespace: str, labels: dict[str, str], *,
                 old: dict[str, Any] | None = None, sub_resource: str = "") -> list[str]:
        """The messages of the validations that fail (a CEL error fails the test: policy is failurePolicy Fail).
        ``old`` and ``sub_resource``: an UPDATE of that subresource (kubectl debug's ephemeralcontainers)."""
        request: dict[str, Any] = {"namespace": namespace, "operation": "UPDATE" if old is not None else "CREATE",
                                   "kind": {"kind": obj["kind"]}}
        if sub_resource:
            request["subResource"] = sub_resource
        activation: dict[str, Any] = {"object": celpy.json_to_cel(obj), "request": celpy.json_to_cel(request),
                                      "oldObject": celpy.json_to_cel(old),
                                      "namespaceObject": celpy.json_to_cel({"metadata": {"name": namespace,
                                                                                         "labels": labels}})}
        bound = celpy.celtypes.MapType({})
        for name, program in self.variables:
            activation["variables"] = bound
            value = program.evaluate(activation)
            assert not isinstance(value, celpy.CELEvalError), f"variable {name}: {value!r}"
            bound = celpy.celtypes.MapType({**bound, celpy.celtypes.StringType(name): value})
        activation["variables"] = bound
        failed = []
        for check, message in self.validations:
            ok = check.evaluate(activation)
            assert isinstance(ok, celpy.celtypes.BoolType), f"CEL evaluation failed: {ok!r}"
            if not ok:
                text = message.evaluate(activation)
                assert isinstance(text, str), f"messageExpression failed: {text!r}"
                failed.append(str(text))
        return failed


def _exported(tmp_path_factory, config_data: dict[str, Any] = CONFIG) -> dict[str, Any]:
    """The policy as users get it: ``gpushare policy export --format json`` with the config file."""
    config = tmp_path_factory.mktemp("backstop") / "config.yaml"
    config.write_text(json.dumps(config_data))
    done = run_gpushare("policy", "export", "--format", "json", "--config", config)
    assert done.returncode == 0, done.stderr
    items = json.loads(done.stdout)["items"]
    assert [i["kind"] for i in items] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    return items[0]


@pytest.fixture(scope="module")
def backstop(tmp_path_factory) -> Backstop:
    return Backstop(_exported(tmp_path_factory))


# -- generated objects ----------------------------------------------------------------------------

def _block(resources: list[str]) -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(st.sampled_from(resources), st.nothing(), max_size=0) if not resources else \
        st.fixed_dictionaries({}, optional={r: st.sampled_from(CANONICAL[r]) for r in resources})


@st.composite
def containers(draw: st.DrawFn, prefix: str) -> list[dict[str, Any]]:
    out = []
    for index in range(draw(st.integers(0 if prefix == "init" else 1, 3))):
        limits = draw(_block(list(ASKED)))
        container: dict[str, Any] = {"name": f"{prefix}-{index}", "image": "cuda"}
        requests: dict[str, str] = {}
        for resource, value in limits.items():
            choice = draw(st.sampled_from(["none", "same", "other"]))
            if choice == "same":
                requests[resource] = value
            elif choice == "other":
                requests[resource] = draw(st.sampled_from(CANONICAL[resource]))
        if draw(st.booleans()):  # a request without a limit (GS004's business, but the rules read it)
            extra = draw(st.sampled_from([MEM, CORE]))
            requests.setdefault(extra, draw(st.sampled_from(CANONICAL[extra])))
        if draw(st.integers(0, 3)) == 0:  # now and then a key that may be a near miss (GS007)
            target = requests if draw(st.booleans()) else limits
            for key in draw(st.lists(RESOURCE_KEYS, min_size=1, max_size=2)):
                target.setdefault(key, "1")
        resources: dict[str, Any] = {}
        if limits or draw(st.booleans()):
            resources["limits"] = {**limits, "cpu": "1"}
        if requests:
            resources["requests"] = requests
        if resources:
            container["resources"] = resources
        if draw(st.integers(0, 2)) == 0:  # the variables GS010 and GS011 judge (repeated names too)
            container["env"] = draw(st.lists(ENV_ENTRIES, min_size=1, max_size=3))
        if draw(st.integers(0, 5)) == 0:
            container["envFrom"] = draw(st.sampled_from(ENV_FROM))
        out.append(container)
    return out


# Names GS010 and GS011 judge (and one they do not), with values each judges differently: GM003's
# value for some gpu-mem and cards, hidden and exposed devices, true and false, valueFrom, long text.
ENV_NAMES = ["ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_MEM_DEV",
             "ALIYUN_COM_GPU_VISIBLE_DEVICES", "ALIYUN_COM_GPU_SCHD_WEIGHT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
             "NVIDIA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CGPU_DISABLE", "CGPU_DISABLE",
             "NVIDIA_DRIVER_CAPABILITIES"]
# Values with "$": those the kubelet may expand ("$(" or "$$") are left to the webhook, the others are
# literal to both.
ENV_VALUES = ["1", "2", "4", "8", "15", "1000", "1024", "02", "", "0", "all", "none", "void", "NONE", "0,1",
              "GPU-8932f937-d72c", "true", "True", " 1", "false", "yes", "x" * 70, "$(NVIDIA_DRIVER_CAPABILITIES)",
              "$$(X)", "$(X", "pa$word", "$", "$1"]
EXPANDED = re.compile(r"[$][($]")
ENV_ENTRIES = st.builds(lambda name, value: {"name": name, **value}, st.sampled_from(ENV_NAMES), st.one_of(
    st.sampled_from(ENV_VALUES).map(lambda v: {"value": v}), st.just({}),
    st.sampled_from(["configMapKeyRef", "secretKeyRef", "fieldRef"]).map(lambda k: {"valueFrom": {k: {"key": "k"}}})))
ENV_FROM = [[], [{"configMapRef": {"name": "gpu-env"}}], [{"prefix": "APP_", "secretRef": {"name": "s"}}],
            [{"prefix": "CGPU_", "configMapRef": {"name": "c"}}, {"secretRef": {}}]]


ID_TEXT = st.lists(st.sampled_from(["GS001", "gs003", "GS005", "Gs006", "GS002", "GS007", "GS010", "gs011", "GM001",
                                    "GX999", "GS00"]),
                   max_size=3).flatmap(lambda ids: st.sampled_from([",", ", ", ";", " ", " ,; "]).map(
                       lambda sep: sep.join(ids)))


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, Any], str, dict[str, str]]:
    kind = draw(st.sampled_from(sorted(WORKLOADS)))
    namespace = draw(st.sampled_from(["team-a", "team-b", "team-c", "team-d"]))
    labels = draw(st.sampled_from([{}, {"gpushare.io/exemptions": "allowed"}, {"gpushare.io/exemptions": "no"}]))
    pod_labels = draw(st.sampled_from([{}, {"app": "old"}, {"app": "old", "tier": "prod"}, {"app": "new"}]))
    if draw(st.integers(0, 3)) == 0:  # the multi-GPU label GM003 divides by (GS010 admits its value)
        pod_labels = {**pod_labels, "aliyun.com/gpu-count": draw(st.sampled_from(["1", "2", "4", "04", "0", "x",
                                                                                  "123456789"]))}
    spec: dict[str, Any] = {"containers": draw(containers("main"))}
    if draw(st.integers(0, 3)) == 0:  # mps nodes set CUDA_MPS_*; a pod kept off them may set them
        spec["nodeSelector"] = {"ack.node.gpu.schedule": draw(st.sampled_from(["mps", "cgpu"]))}
    init = draw(containers("init"))
    if init:
        spec["initContainers"] = init
    if draw(st.booleans()):
        spec["schedulerName"] = draw(st.sampled_from(["default-scheduler", "ack-co-scheduler", "volcano"]))
    annotations: dict[str, str] = {}
    if draw(st.booleans()):
        annotations["gpushare.io/exempt"] = draw(ID_TEXT)
        reason = draw(st.sampled_from([None, "", "  ", "legacy image"]))
        if reason is not None:
            annotations["gpushare.io/exempt-reason"] = reason
    template_meta: dict[str, Any] = {}
    if pod_labels:
        template_meta["labels"] = pod_labels
    if annotations:
        template_meta["annotations"] = annotations
    name = draw(st.sampled_from(["legacy-1", "legacy-", "trainer", "legacyx"]))
    meta: dict[str, Any] = {"namespace": namespace}
    if kind == "Pod" and draw(st.booleans()):
        meta["generateName"] = name
    else:
        meta["name"] = name
    if kind == "Pod":
        obj = {"metadata": {**meta, **template_meta}, "spec": spec}
    else:
        template = {"metadata": template_meta, "spec": spec} if template_meta or draw(st.booleans()) else {"spec": spec}
        if kind == "PodTemplate":
            obj = {"metadata": meta, "template": template}
        elif kind == "CronJob":
            obj = {"metadata": meta, "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}}
        else:
            obj = {"metadata": meta, "spec": {"template": template}}
    return {"apiVersion": WORKLOADS[kind], "kind": kind, **obj}, namespace, labels


def literal_only(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without the env entries whose value the kubelet may expand: what the backstop judges
    (it leaves those to the webhook: CEL cannot follow the expansion's reading in order)."""
    obj = copy.deepcopy(obj)

    def strip(node: Any) -> None:
        if isinstance(node, dict):
            env = node.get("env")
            if isinstance(env, list):
                node["env"] = [e for e in env if not (isinstance(e.get("value"), str) and EXPANDED.search(e["value"]))]
            for value in node.values():
                strip(value)
        elif isinstance(node, list):
            for value in node:
                strip(value)

    strip(obj)
    return obj


def _engine_denials(obj: dict[str, Any], namespace: str, labels: dict[str, str]) -> set[str]:
    obj = literal_only(obj)
    subject = ENGINE.subject(obj["kind"], obj, namespace=namespace, namespaces=StaticNamespaces({namespace: labels}))
    subject.today = date(2030, 1, 1)
    return {f.rule for f in ENGINE.validate(subject).violations}


COVERED = {r.id for r in BACKSTOP_RULES}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_policy_and_the_engine_deny_alike_rule_by_rule(backstop, case):
    obj, namespace, labels = case
    engine = _engine_denials(obj, namespace, labels) & COVERED
    failures = backstop.failures(obj, namespace, labels)
    backstop_rules = {m.split(":", 1)[0] for m in failures} - {SCHEDULER_RULE}
    assert backstop_rules == engine, (failures, engine)
    for message in failures:  # names the rule and the object
        assert message.split(":", 1)[0] in COVERED | {SCHEDULER_RULE}
        assert f"{obj['kind']} {namespace}/" in message


@settings(max_examples=max(EXAMPLES // 3, 50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_scheduler_rule_passes_exactly_what_the_mutating_webhook_leaves_on_the_configured_scheduler(
        backstop, case):
    """With the webhook up, GM001 sets the scheduler first: the backstop then passes unless the pod
    names a third scheduler and is not exempted from GM001 (the documented trade-off)."""
    obj, namespace, labels = case
    if obj["kind"] != "Pod":
        return
    subject = ENGINE.subject("Pod", obj, namespace=namespace, namespaces=StaticNamespaces({namespace: labels}))
    subject.today = date(2030, 1, 1)
    verdict = ENGINE.mutate(subject)
    mutated = jsonpatch.apply_patch(obj, [dict(op) for op in verdict.patch]) if verdict.patch else obj
    failed = SCHEDULER_RULE in {m.split(":", 1)[0] for m in backstop.failures(mutated, namespace, labels)}
    asks_mem = any(MEM in (c.get("resources", {}).get("limits", {}) | c.get("resources", {}).get("requests", {}))
                   for c in mutated["spec"]["containers"] + mutated["spec"].get("initContainers", []))
    expected = asks_mem and SCHEDULER_RULE not in subject.set_aside \
        and mutated["spec"].get("schedulerName") != "ack-co-scheduler"
    assert failed == expected


# GS011 set to deny and envFrom refused: the backstop then covers both isolation rules in full.
STRICT_CONFIG = {**CONFIG, "rules": {"GS011": {"severity": "deny"}}, "isolation": {"env_from": "deny"}}
STRICT_ENGINE = Engine(Settings(**STRICT_CONFIG))
ISOLATION = ("GS010", "GS011")


@pytest.fixture(scope="module")
def strict_backstop(tmp_path_factory) -> Backstop:
    return Backstop(_exported(tmp_path_factory, STRICT_CONFIG))


@settings(max_examples=max(EXAMPLES // 2, 25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_isolation_rules_set_to_deny_the_policy_and_the_engine_deny_alike_and_say_the_same(strict_backstop, case):
    obj, namespace, labels = case
    failures = strict_backstop.failures(obj, namespace, labels)
    obj = literal_only(obj)
    subject = STRICT_ENGINE.subject(obj["kind"], obj, namespace=namespace,
                                    namespaces=StaticNamespaces({namespace: labels}))
    subject.today = date(2030, 1, 1)
    violations = STRICT_ENGINE.validate(subject).violations
    assert {m.split(":", 1)[0] for m in failures} - {SCHEDULER_RULE} == {f.rule for f in violations} & COVERED
    # The policy names a generateName without the engine's "*" (named alike otherwise).
    label = f"{obj['kind']} {namespace}/{subject.name.removesuffix('*')}"
    for rule_id in ISOLATION:  # the first finding, word for word as the webhook writes it
        engine = [f.message.replace(subject.label, label) for f in violations if f.rule == rule_id]
        policy = [m for m in failures if m.startswith(f"{rule_id}:")]
        assert policy == engine[:1], (policy, engine)


@st.composite
def debug_cases(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], str, dict[str, str]]:
    """kubectl debug on a Pod of ``cases``: the pod, perhaps debugged before, and it with a debug container
    more (no resources: Kubernetes forbids them); the earlier debug containers are re-sent unchanged."""
    obj, namespace, labels = draw(cases().filter(lambda case: case[0]["kind"] == "Pod"))

    def debuggers(prefix: str, least: int) -> list[dict[str, Any]]:
        found = []
        for container in draw(containers(prefix))[:2] if least == 0 else draw(containers(prefix))[:1]:
            container.pop("resources", None)
            found.append(container)
        return found

    old = copy.deepcopy(obj)
    earlier = debuggers("debugger-old", 0)
    if earlier:
        old["spec"]["ephemeralContainers"] = earlier
    new = copy.deepcopy(old)
    added = debuggers("debugger-new", 1) or [{"name": "debugger-new", "image": "busybox"}]
    new["spec"]["ephemeralContainers"] = earlier + added
    return new, old, namespace, labels


@settings(max_examples=max(EXAMPLES // 2, 25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(debug_cases())
def test_on_kubectl_debug_the_policy_and_the_engine_judge_the_added_containers_alike(strict_backstop, case):
    """Only GS010 and GS011 judge the ephemeralcontainers subresource, on the debug containers it adds,
    word for word; every other rule passes it (the pod itself is not judged again)."""
    new, old, namespace, labels = case
    failures = strict_backstop.failures(new, namespace, labels, old=old, sub_resource="ephemeralcontainers")
    new, old = literal_only(new), literal_only(old)
    subject = STRICT_ENGINE.subject("Pod", new, operation="UPDATE", old=old, namespace=namespace,
                                    namespaces=StaticNamespaces({namespace: labels}),
                                    sub_resource="ephemeralcontainers", admission=True)
    subject.today = date(2030, 1, 1)
    violations = STRICT_ENGINE.validate(subject).violations
    assert {m.split(":", 1)[0] for m in failures} == {f.rule for f in violations} <= set(ISOLATION)
    label = f"Pod {namespace}/{subject.name.removesuffix('*')}"
    for rule_id in ISOLATION:
        engine = [f.message.replace(subject.label, label) for f in violations if f.rule == rule_id]
        assert [m for m in failures if m.startswith(f"{rule_id}:")] == engine[:1]


def test_on_kubectl_debug_the_pod_itself_is_not_judged_again(strict_backstop):
    """A pod the backstop would refuse today (an invalid gpu-mem, the wrong scheduler) can still be debugged."""
    pod = _env_pod([], {MEM: "1500m"}, schedulerName="default-scheduler")
    debugged = copy.deepcopy(pod)
    debugged["spec"]["ephemeralContainers"] = [{"name": "debugger-x", "image": "busybox"}]
    assert {m.split(":", 1)[0] for m in strict_backstop.failures(pod, "default", {})} >= {"GS003", "GM001"}
    assert strict_backstop.failures(debugged, "default", {}, old=pod, sub_resource="ephemeralcontainers") == []
    debugged["spec"]["ephemeralContainers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert strict_backstop.failures(debugged, "default", {}, old=pod, sub_resource="ephemeralcontainers") == [
        "GS011: Pod default/p ephemeral container \"debugger-x\": env NVIDIA_VISIBLE_DEVICES=all exposes the node's "
        "GPUs to a container that requests none; set none or void, or have an admin exempt the pod"]
    # Re-sent by a later kubectl debug, it is not judged again.
    again = copy.deepcopy(debugged)
    again["spec"]["ephemeralContainers"].append({"name": "debugger-y", "image": "busybox"})
    assert strict_backstop.failures(again, "default", {}, old=debugged, sub_resource="ephemeralcontainers") == []


OVERRIDES = "overrides what the GPU-sharing device plugin sets; remove it"


def _env_pod(env: list[dict[str, Any]], limits: dict[str, str], labels: dict[str, str] | None = None,
             init: bool = False, **spec: Any) -> dict[str, Any]:
    app = {"name": "app", "image": "cuda", "resources": {"limits": limits}, **({} if init else {"env": env})}
    pod_spec: dict[str, Any] = {"containers": [app], **spec}
    if init:
        pod_spec["initContainers"] = [{"name": "init", "image": "cuda", "resources": {"limits": limits}, "env": env}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default",
                                                           "labels": labels or {}}, "spec": pod_spec}


MEM_ENV = "ALIYUN_COM_GPU_MEM_CONTAINER"


@pytest.mark.parametrize(("pod", "denial"), [
    (_env_pod([{"name": MEM_ENV, "value": "2"}], {MEM: "2"}), None),  # what GM003 writes
    (_env_pod([{"name": MEM_ENV, "value": "1000"}], {MEM: "1k"}), None),  # 1k is 1000, however spelt
    (_env_pod([{"name": MEM_ENV, "value": "1024"}], {MEM: "1Ki"}), None),
    (_env_pod([{"name": MEM_ENV, "value": "2"}], {MEM: "8"}, {COUNT: "4"}), None),  # N/M on each of M cards
    (_env_pod([{"name": MEM_ENV, "value": "8"}], {MEM: "8"}, {COUNT: "4"}),
     f'container "app": env {MEM_ENV}=8 {OVERRIDES}'),
    (_env_pod([{"name": MEM_ENV, "value": "2"}, {"name": MEM_ENV, "value": "02"}], {MEM: "2"}),
     f'container "app": env {MEM_ENV}=02 {OVERRIDES}'),  # the second entry is judged too
    (_env_pod([{"name": MEM_ENV, "value": "2"}], {MEM: "2"}, init=True),
     f'init container "init": env {MEM_ENV}=2 {OVERRIDES}'),  # GM003 writes nothing on init containers
    (_env_pod([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], {WHOLE: "1"}),
     'container "app": env NVIDIA_VISIBLE_DEVICES=all exposes GPUs the device plugin did not assign to this '
     "container; remove it or set none or void"),
    (_env_pod([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}], {WHOLE: "1"}), None),
    (_env_pod([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], {"cpu": "1"}), None),  # GS011 warns: not here
    (_env_pod([{"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/tmp/mps"}], {MEM: "2"}),
     'container "app": env CUDA_MPS_PIPE_DIRECTORY=/tmp/mps overrides what the GPU-sharing device plugin sets on '
     "mps nodes; remove it"),
    (_env_pod([{"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/tmp/mps"}], {MEM: "2"},
              nodeSelector={"ack.node.gpu.schedule": "cgpu"}), None),
    (_env_pod([{"name": "ALIYUN_COM_GPU_SCHD_WEIGHT", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
              {MEM: "2"}), f'container "app": env ALIYUN_COM_GPU_SCHD_WEIGHT=<from fieldRef> {OVERRIDES}'),
], ids=lambda v: "" if isinstance(v, dict) else str(v)[:30])
def test_gs010_examples_in_the_backstop_word_for_word(backstop, pod, denial):
    failures = [m for m in backstop.failures(pod, "default", {}) if m.startswith("GS010")]
    assert failures == ([f"GS010: Pod default/p {denial}"] if denial else [])
    engine = [f.message for f in ENGINE.validate(ENGINE.subject("Pod", pod, namespace="default")).violations
              if f.rule == "GS010"]
    assert engine[:1] == failures


def test_an_expired_grant_still_holds_in_the_backstop_but_not_in_the_webhook(backstop):
    """CEL has no clock: the backstop honours grants whatever their expiry; the webhook enforces it."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "legacy-1", "namespace": "team-a"},
           "spec": {"schedulerName": "ack-co-scheduler",
                    "containers": [{"name": "c", "resources": {"limits": {MEM: "2Gi"}}}]}}
    assert backstop.failures(pod, "team-a", {}) == []
    subject = ENGINE.subject("Pod", pod, namespace="team-a", namespaces=StaticNamespaces({"team-a": {}}))
    subject.today = date(3000, 1, 1)  # past the grant's expiry
    assert {f.rule for f in ENGINE.validate(subject).violations} == {"GS003"}


def test_a_denial_names_the_container_value_and_what_is_accepted(backstop):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "cuda-33", "namespace": "default"},
           "spec": {"template": {"spec": {"containers": [
               {"name": "ok", "resources": {"limits": {MEM: "2", CORE: "30"}}},
               {"name": "cuda-33", "resources": {"limits": {MEM: "2", CORE: "33"}}}]}}}}
    assert backstop.failures(job, "default", {}) == [
        'GS001: Job default/cuda-33 container "cuda-33": aliyun.com/gpu-core.percentage=33 is not a multiple of 5 '
        "in 5..100; use an integer multiple of 5 from 5 to 100, e.g. 30"]


def test_warn_and_disabled_rules_are_left_out_and_the_default_has_no_scheduler_rule(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("rules:\n  GS001: {severity: warn}\n  GS006: {enabled: false}\n")
    done = run_gpushare("policy", "export", "--format", "json", "--config", config)
    policy = json.loads(done.stdout)["items"][0]
    assert policy["metadata"]["annotations"]["gpushare.io/covers"] == "GS002,GS003,GS005,GS007,GS010"
    assert len(policy["spec"]["validations"]) == 5
    with_rule = run_gpushare("policy", "export", "--format", "json", "--config", config, "--scheduler-rule")
    assert json.loads(with_rule.stdout)["items"][0]["metadata"]["annotations"]["gpushare.io/covers"].endswith(",GM001")


# -- GS007, key by key ------------------------------------------------------------------------------

# Other names, domains and allow-list: the regexes are generated from the settings, not fixed.
CUSTOM = {"names": {"resources": {"gpu_mem": "example.com/gpu-memory-mb", "gpu_core": "example.com/gpu-core.share",
                                  "gpu_topology": "example.com/gpu"}},
          "near_miss": {"lookalike_domains": ["example.org", "sample.com", "Upper.com", " spaced.com"],
                        "allowed": ["example.com/gpu-model"]}}
_CUSTOM_NEAR = st.builds(
    lambda domain, name: f"{domain}/{name}",
    st.sampled_from(["example.com", "example.org", "sample.com", "exampel.com", "upper.com", "spaced.com"]).flatmap(
        lambda d: edited(d, 2)),
    st.sampled_from(["gpu-memory-mb", "gpu-mem-mb", "GPU_MemoryMB", "gpu-core.share", "gpu-core-share-x", "gpu-model",
                     "gpu-core"]).flatmap(lambda n: edited(n, 1)))
CUSTOM_KEYS = st.one_of(_CUSTOM_NEAR, _CUSTOM_NEAR, _CUSTOM_NEAR, RESOURCE_KEYS)


@pytest.fixture(scope="module")
def custom_backstop(tmp_path_factory) -> tuple[Backstop, Settings]:
    config = tmp_path_factory.mktemp("custom") / "config.yaml"
    config.write_text(json.dumps(CUSTOM))
    done = run_gpushare("policy", "export", "--format", "json", "--config", config)
    assert done.returncode == 0, done.stderr
    return Backstop(json.loads(done.stdout)["items"][0]), Settings(**CUSTOM)


def _engine_meant(key: str, settings: Settings) -> str | None:
    """What the engine says a key in a container's limits means (None: not a near miss)."""
    r = settings.names.resources
    if key in (r.gpu_mem, r.gpu_core, r.gpu_topology, r.gpu_exclusive, r.gpu_count):
        return None  # the engine's near_misses() skips the names it knows
    return meant_resource(key, r.gpu_mem, r.gpu_core, settings.near_miss.lookalike_domains, settings.near_miss.allowed)


def _policy_meant(backstop: Backstop, key: str, settings: Settings) -> str | None:
    """What the policy's own variables say (nearMisses), and the name its message would suggest."""
    spec = {"containers": [{"name": "app", "resources": {"limits": {key: "1"}}}]}
    found = backstop.variable("nearMisses", {"spec": spec})
    assert found[0][0] == 'container "app"'
    if len(found[0]) == 1:
        return None
    assert list(found[0][1:]) == [f"limits.{key}"]
    r = settings.names.resources
    mem_only = name_part_regex(r.gpu_mem, r.gpu_core, mem_only=True, before=SECTION)
    return r.gpu_mem if MATCHES.evaluate({"text": celpy.celtypes.StringType(f"limits.{key}"),
                                          "pattern": celpy.celtypes.StringType(mem_only)}) else r.gpu_core


_ENV = celpy.Environment()
MATCHES = _ENV.program(_ENV.compile("text.matches(pattern)"))


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=RESOURCE_KEYS)
def test_gs007_the_policy_finds_exactly_the_keys_the_engine_finds(backstop, key):
    assert _policy_meant(backstop, key, SETTINGS) == _engine_meant(key, SETTINGS), key


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=CUSTOM_KEYS)
def test_gs007_follows_the_configured_names_domains_and_allow_list(custom_backstop, key):
    backstop, custom = custom_backstop
    assert _policy_meant(backstop, key, custom) == _engine_meant(key, custom), key


@st.composite
def near_miss_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A Pod or workload whose containers and init containers name generated keys."""
    def one(name: str) -> dict[str, Any]:
        resources = {section: {key: "1" for key in draw(st.lists(RESOURCE_KEYS, max_size=2))}
                     for section in draw(st.lists(st.sampled_from(["limits", "requests"]), max_size=2, unique=True))}
        return {"name": name, "image": "cuda", "resources": resources}
    spec: dict[str, Any] = {"containers": [one(f"main-{i}") for i in range(draw(st.integers(1, 2)))]}
    if draw(st.booleans()):
        spec["initContainers"] = [one("init-0")]
    kind = draw(st.sampled_from(sorted(WORKLOADS)))
    meta = {"name": "near-miss", "namespace": "default"}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta, "spec": spec}
    template = {"spec": spec}
    if kind == "PodTemplate":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta, "template": template}
    if kind == "CronJob":
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta,
                "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}}
    return {"apiVersion": WORKLOADS[kind], "kind": kind, "metadata": meta, "spec": {"template": template}}


def _engine_gs007(obj: dict[str, Any]) -> list[str]:
    subject = ENGINE.subject(obj["kind"], obj, namespace="default", namespaces=StaticNamespaces({"default": {}}))
    return [f.message for f in ENGINE.validate(subject).violations if f.rule == "GS007"]


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=near_miss_objects())
def test_gs007_on_pods_and_workloads_the_policy_denies_as_the_engine_does_and_says_the_same(backstop, obj):
    engine = _engine_gs007(obj)
    policy = [m for m in backstop.failures(obj, "default", {}) if m.startswith("GS007:")]
    assert bool(policy) == bool(engine), (policy, engine)
    if policy:  # the first near miss, word for word as the engine writes it
        assert policy == [engine[0]]


@pytest.mark.parametrize(("key", "meant"), [
    ("aliyun.com/gpu-memory", MEM),
    ("aliyun.com/GPU_Mem", MEM),
    ("aliyun.com/gpu_mem", MEM),
    ("aliyunn.com/gpu-mem", MEM),  # the domain within two edits
    ("alyun.cm/gpu-mem", MEM),
    ("alibaba.com/gpu-mem", MEM),  # a look-alike domain
    ("gpumem", MEM),  # no domain
    ("aliyun.com/gpu-mam", MEM),  # one edit
    ("aliyun.com/gpu-mems", MEM),
    ("aliyun.com/gpu-memories", None),
    ("aliyun.com/gpu-mem-memory", None),  # "gpumemmem": two edits from gpumem
    ("aliyun.com/xgpu-mem", None),  # "xgp" is two edits from the gpu prefix
    ("aliyun.com/gpu-core", CORE),  # the core stem
    ("aliyun.com/gpu-core-percentage", CORE),
    ("aliyun.com/GPU-Core.Percent", CORE),
    ("aliyun.com/gpu-core-percent-value", CORE),
    ("aliyun.com/gpucorepercentage", CORE),
    ("aliyun.com/gpu-cor-percentage", CORE),  # one edit from gpucorepercent once "percentage" is rewritten
    ("aliyun.com/gpu-cor", None),
    ("alibabacloud.com/gpu-mem", None),  # open-gpu-share's real resource
    ("aliyun.co.jp/gpu-mem", None),  # three edits from aliyun.com
    ("example.com/gpu-mem", None),
    (MEM, None), (CORE, None), (WHOLE, None), (TOPOLOGY, None), (COUNT, None),
    ("aliyun.com/fpga", None), ("aliyun.com/rdma", None),  # allow-listed
    ("cpu", None), ("memory", None),
])
def test_gs007_examples(backstop, key, meant):
    assert _engine_meant(key, SETTINGS) == meant
    assert _policy_meant(backstop, key, SETTINGS) == meant
    for section, init in (("limits", False), ("requests", True)):
        pod = pod_with(key, "1", section=section, init=init)
        policy = [m for m in backstop.failures(pod, "default", {}) if m.startswith("GS007:")]
        if meant is None:
            assert policy == []
        else:
            where = "init container" if init else "container"
            assert policy == [
                f'GS007: Pod default/near-miss {where} "app": {section}.{key} is not a resource any node offers, so '
                f"the pod would stay Pending forever; did you mean {meant}? (accepted: {MEM}, {CORE}; a real resource "
                "of that name can be listed in near_miss.allowed)"]


def test_an_allow_listed_or_exempted_near_miss_passes_the_backstop(backstop):
    exempt = pod_with("aliyun.com/gpu-memory", "4")
    exempt["metadata"]["annotations"] = {"gpushare.io/exempt": "GS007", "gpushare.io/exempt-reason": "vendor plugin"}
    assert backstop.failures(exempt, "team-c", {}) == []  # annotation exemptions are allowed in team-c
    assert backstop.failures(exempt, "team-d", {})[0].startswith("GS007:")  # and nowhere else


def test_a_resource_name_with_white_space_is_refused_in_the_config(tmp_path):
    """The API server refuses such a name, and GS007's domain regex relies on there being none."""
    config = tmp_path / "config.yaml"
    config.write_text("names:\n  resources:\n    gpu_mem: 'aliyun .com/gpu-mem'\n")
    done = run_gpushare("policy", "export", "--config", config)
    assert done.returncode == 2
    assert done.stderr == (f"gpushare: error: {config}: names.resources.gpu_mem: \"aliyun .com/gpu-mem\": value error, "
                           "a resource name is not empty and has no white space\n")


# -- GS003's value rule on every form ------------------------------------------------------------

UNIT_ENGINES = {unit: Engine(Settings(names={"memory_unit": unit})) for unit in ("GiB", "MiB")}


@pytest.fixture(scope="module")
def unit_backstops() -> dict[str, Backstop]:
    """GS003's policy for each memory unit, compiled when a test needs it (not in every xdist worker)."""
    return {unit: Backstop(backstop_policy(engine.settings, frozenset({"GS003"}))[0])
            for unit, engine in UNIT_ENGINES.items()}


SUFFIXES = ["", "", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "e0", "e1", "e3", "e6", "E2", "e-3"]


@st.composite
def written_quantities(draw: st.DrawFn) -> str:
    """gpu-mem as people write it: whole or decimal numbers, signs, every suffix family."""
    whole = draw(st.one_of(st.integers(0, 2100), st.integers(0, 2**21), st.sampled_from([1000, 1024, 16000, 16276])))
    fraction = draw(st.sampled_from(["", "", ".0", ".5", ".25", ".002", "."]))
    sign = draw(st.sampled_from(["", "", "+", "-"]))
    return f"{sign}{whole}{fraction}{draw(st.sampled_from(SUFFIXES))}"


def _gs003(engine: Engine, value: str) -> list[str]:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {MEM: value}}}]}}
    return [f.message for f in engine.validate(engine.subject("Pod", obj, namespace="default")).violations
            if f.rule == "GS003"]


@settings(max_examples=examples(150), deadline=None)
@given(written_quantities(), st.sampled_from(["GiB", "MiB"]))
def test_gs003_judges_the_value_alike_as_written_as_sent_and_in_the_backstop(unit_backstops, written, unit):
    """``check`` reads what people write, the webhook what the API server sends (its canonical form),
    the backstop the same canonical string: all three refuse exactly the same values."""
    sent = canonical(written)
    engine = UNIT_ENGINES[unit]
    as_written, as_sent = _gs003(engine, written), _gs003(engine, sent)
    assert bool(as_written) == bool(as_sent), (written, sent, as_written, as_sent)
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {MEM: sent}}}]}}
    backstop = [m for m in unit_backstops[unit].failures(obj, "default", {}) if m.startswith("GS003")]
    assert bool(backstop) == bool(as_sent), (written, sent, backstop, as_sent)
