"""The backstop's CEL and the engine give the same verdict on every covered rule.

Hypothesis builds pods and workloads with GPU quantities in the canonical form the API server
stores and sends (``5``, ``30500m``, ``1k``, ``2Gi``...), exemption annotations, namespace
labels and config grants; the policy printed by ``gpushare policy export`` is evaluated with
cel-python (variables in order, as the API server binds ``variables.*``) and compared rule by
rule with the engine: a validation fails exactly when the engine denies with that rule, and its
message starts with the rule id. Examples per run: ``GPUSHARE_EQUIVALENCE_EXAMPLES`` (default 50;
the figure in docs/operations.md is from a larger run).
"""

from __future__ import annotations

import json
import os
from datetime import date
from typing import Any

import celpy
import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.backstop import BACKSTOP_RULES, SCHEDULER_RULE
from policies.engine import Engine
from policies.grants import StaticNamespaces
from policies.settings import Settings

from .check_helpers import run_gpushare

EXAMPLES = int(os.environ.get("GPUSHARE_EQUIVALENCE_EXAMPLES", "50"))
MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"
WHOLE, TOPOLOGY = "nvidia.com/gpu", "aliyun.com/gpu"
# Canonical quantity strings (Quantity.String() after the API server parsed what was written).
CANONICAL = {
    CORE: ["5", "10", "30", "35", "95", "100", "33", "0", "105", "-5", "30500m", "1k", "2500m", "1Ki"],
    MEM: ["1", "2", "15", "999", "1500", "0", "1k", "2k", "2Gi", "1Mi", "500m", "-1", "1500m"],
    WHOLE: ["1", "2"], TOPOLOGY: ["1", "4"],
}
GRANTS = [
    {"name": "by-name", "namespace": "team-a", "names": "legacy-*", "rules": ["GS003", "GM001"],
     "reason": "vendor image", "expires": "2999-01-01"},
    {"name": "by-label", "namespace": "team-b", "selector": {"matchLabels": {"app": "old"}, "matchExpressions": [
        {"key": "tier", "operator": "NotIn", "values": ["prod"]}]}, "rules": ["GS001", "GS005", "gs006"],
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

    def failures(self, obj: dict[str, Any], namespace: str, labels: dict[str, str]) -> list[str]:
        """The messages of the validations that fail (a CEL error fails the test: policy is failurePolicy Fail)."""
        request = {"namespace": namespace, "operation": "CREATE", "kind": {"kind": obj["kind"]}}
        activation: dict[str, Any] = {"object": celpy.json_to_cel(obj), "request": celpy.json_to_cel(request),
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


def _exported(tmp_path_factory) -> dict[str, Any]:
    """The policy as users get it: ``gpushare policy export --format json`` with the config file."""
    config = tmp_path_factory.mktemp("backstop") / "config.yaml"
    config.write_text(json.dumps(CONFIG))
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
        limits = draw(_block([MEM, CORE, WHOLE, TOPOLOGY]))
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
        resources: dict[str, Any] = {}
        if limits or draw(st.booleans()):
            resources["limits"] = {**limits, "cpu": "1"}
        if requests:
            resources["requests"] = requests
        if resources:
            container["resources"] = resources
        out.append(container)
    return out


ID_TEXT = st.lists(st.sampled_from(["GS001", "gs003", "GS005", "Gs006", "GS002", "GM001", "GX999", "GS00"]),
                   max_size=3).flatmap(lambda ids: st.sampled_from([",", ", ", ";", " ", " ,; "]).map(
                       lambda sep: sep.join(ids)))


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, Any], str, dict[str, str]]:
    kind = draw(st.sampled_from(sorted(WORKLOADS)))
    namespace = draw(st.sampled_from(["team-a", "team-b", "team-c", "team-d"]))
    labels = draw(st.sampled_from([{}, {"gpushare.io/exemptions": "allowed"}, {"gpushare.io/exemptions": "no"}]))
    pod_labels = draw(st.sampled_from([{}, {"app": "old"}, {"app": "old", "tier": "prod"}, {"app": "new"}]))
    spec: dict[str, Any] = {"containers": draw(containers("main"))}
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


def _engine_denials(obj: dict[str, Any], namespace: str, labels: dict[str, str]) -> set[str]:
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
    assert policy["metadata"]["annotations"]["gpushare.io/covers"] == "GS002,GS003,GS005"
    assert len(policy["spec"]["validations"]) == 3
    with_rule = run_gpushare("policy", "export", "--format", "json", "--config", config, "--scheduler-rule")
    assert json.loads(with_rule.stdout)["items"][0]["metadata"]["annotations"]["gpushare.io/covers"].endswith(",GM001")
