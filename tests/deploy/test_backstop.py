"""The backstop policy built in this process (``backstop_policy``) and evaluated with cel-python:
the shipped files are what it gives, each covered rule denies what the engine denies with the
same rule and says what would be accepted, and the configuration decides what is covered.
tests/deploy/test_backstop_equivalence.py compares it with the engine on generated objects
through ``gpushare policy export``."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from policies.admission.engine import Engine
from policies.generate.backstop import backstop_policy, covered_rules
from policies.model.grants import StaticNamespaces
from tests.support.policy_cel import PolicyCel
from tests.support.resource_keys import CORE, COUNT, MEM, TOPOLOGY, WHOLE
from webhook.cli.policy import backstop_text
from webhook.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [ROOT / "deploy" / "helm" / "gpushare-webhook" / "files" / "backstop.yaml",
           ROOT / "deploy" / "kustomize" / "components" / "backstop" / "backstop.yaml"]
# Every covered rule set to deny, the scheduler rule on.
STRICT = Settings(rules={"GS011": {"severity": "deny"}}, backstop={"scheduler_rule": True})
STRICT_ENGINE = Engine(STRICT)


@functools.cache
def strict() -> PolicyCel:
    """STRICT's policy, built when a test first needs it (not at import: a mutant of the generator must reach it)."""
    return PolicyCel(backstop_policy(STRICT, STRICT_ENGINE.known_ids)[0])


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), labels: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "default"}
    if labels:
        meta["labels"] = labels
    body: dict[str, Any] = {"schedulerName": "ack-co-scheduler", **spec,
                            "containers": [{"name": f"c{i}", "image": "cuda", **c} for i, c in enumerate(containers)]}
    if init:
        body["initContainers"] = [{"name": f"i{i}", "image": "cuda", **c} for i, c in enumerate(init)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def limits(**values: str) -> dict[str, Any]:
    return {"resources": {"limits": {KEYS.get(k, k): v for k, v in values.items()}}}


KEYS = {"mem": MEM, "core": CORE, "whole": WHOLE, "topology": TOPOLOGY}


def workload(kind: str, pod_obj: dict[str, Any]) -> dict[str, Any]:
    """``pod_obj`` as the template of a workload of ``kind``."""
    template = {"metadata": {k: v for k, v in pod_obj["metadata"].items() if k == "labels"}, "spec": pod_obj["spec"]}
    meta = {"name": "w", "namespace": "default"}
    if kind == "PodTemplate":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta, "template": template}
    if kind == "CronJob":
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta,
                "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}}
    group = {"Job": "batch/v1", "ReplicationController": "v1"}.get(kind, "apps/v1")
    return {"apiVersion": group, "kind": kind, "metadata": meta, "spec": {"template": template}}


def engine_denials(obj: dict[str, Any], engine: Engine = STRICT_ENGINE, namespace: str = "default",
                   labels: dict[str, str] | None = None) -> set[str]:
    subject = engine.subject(obj["kind"], obj, namespace=namespace,
                             namespaces=StaticNamespaces({namespace: labels or {}}))
    return {f.rule for f in engine.validate(subject).violations}


def denied(policy: PolicyCel, obj: dict[str, Any], namespace: str = "default",
           labels: dict[str, str] | None = None) -> set[str]:
    return {m.split(":", 1)[0] for m in policy.failures(obj, namespace, labels)}


def test_the_shipped_policy_is_what_the_generator_gives():
    text = backstop_text(Settings())
    stale = [str(p.relative_to(ROOT)) for p in SHIPPED if p.read_text() != text]
    assert stale == [], "stale: run `gpushare generate`"


EXAMPLES = [  # (what, object, the covered rules that deny it)
    ("a valid shared pod", pod(limits(mem="2", core="30")), set()),
    ("a CPU pod on any scheduler", pod(limits(cpu="1"), schedulerName="default-scheduler"), set()),
    ("gpu-core not a multiple of 5", pod(limits(mem="2", core="33")), {"GS001"}),
    ("gpu-core over 100", pod(limits(mem="2", core="105")), {"GS001"}),
    ("gpu-core 5 and 100 are fine", pod(limits(mem="2", core="5"), limits(mem="2", core="100")), set()),
    ("gpu-core in milli units", pod(limits(mem="2", core="30500m")), {"GS001"}),
    ("gpu-core requested alone", pod({"resources": {"requests": {CORE: "30"}}}), {"GS002"}),
    ("gpu-core without gpu-mem", pod(limits(core="30")), {"GS002"}),
    ("gpu-mem a fraction", pod(limits(mem="1500m")), {"GS003"}),
    ("gpu-mem zero", pod(limits(mem="0")), {"GS003"}),
    ("gpu-mem over the card", pod(limits(mem="2k")), {"GS003"}),
    ("gpu-mem up to the card", pod(limits(mem="1024"), limits(mem="1Ki")), set()),
    ("gpu-mem in binary units", pod(limits(mem="2Gi")), {"GS003"}),
    ("gpu-mem requested only, too large", pod({"resources": {"requests": {MEM: "100000"}}}), {"GS003"}),
    ("gpu-mem over one card within four", pod(limits(mem="4096"), labels={COUNT: "4"}), set()),
    ("gpu-mem over four cards", pod(limits(mem="4097"), labels={COUNT: "4"}), {"GS003"}),
    ("mem-only beside core+mem", pod(limits(mem="2"), limits(mem="2", core="30")), {"GS005"}),
    ("mem-only in an init container beside core+mem", pod(limits(mem="2", core="30"), init=(limits(mem="2"),)),
     {"GS005"}),
    ("whole and shared GPUs", pod(limits(mem="2"), limits(whole="1")), {"GS006"}),
    ("topology and shared GPUs", pod(limits(topology="1"), limits(core="30", mem="2")), {"GS006"}),
    ("whole GPUs alone", pod(limits(whole="1"), limits(topology="2")), set()),
    ("a near miss", pod(limits(**{"aliyun.com/gpu-memory": "2"})), {"GS007"}),
    ("a near miss in requests", pod({"resources": {"requests": {"aliyun.com/gpu_mem": "2"}}}), {"GS007"}),
    ("a real other resource", pod(limits(**{"aliyun.com/fpga": "1", "nvidia.com/gpu": "1"})), set()),
    ("the default scheduler", pod(limits(mem="2"), schedulerName="default-scheduler"), {"GM001"}),
    ("no scheduler named", {**pod(limits(mem="2")), "spec": {"containers": [{"name": "c", **limits(mem="2")}]}},
     {"GM001"}),
    ("a device plugin variable", pod({**limits(mem="2"), "env": [{"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "8"}]}),
     {"GS010"}),
    ("isolation lifted", pod({**limits(mem="2"), "env": [{"name": "CGPU_DISABLE", "value": "true"}]}), {"GS011"}),
]


def test_each_covered_rule_denies_what_the_engine_denies_on_pods_and_every_template_kind():
    """One test over every example, stopping at the first wrong one: the policy is built once, and a change
    to the generator is seen by the test that builds it (tests/support/policy_cel.py)."""
    covered = {r.id for r in covered_rules(STRICT)}
    for what, obj, rules in EXAMPLES:
        # GM001 is a mutation in the webhook (it sets the scheduler); the backstop's rule stands in for it.
        if denied(strict(), obj) != rules or engine_denials(obj) & covered != rules - {"GM001"}:
            pytest.fail(repr((what, denied(strict(), obj), engine_denials(obj))))
    for kind in TEMPLATE_KINDS:
        bad = workload(kind, pod(limits(mem="2", core="33"), limits(mem="1500m"), labels={COUNT: "2"}))
        if not denied(strict(), bad) == {"GS001", "GS003", "GS005"} == engine_denials(bad) - {"GS008"}:
            pytest.fail(repr((kind, denied(strict(), bad), engine_denials(bad))))
        good = workload(kind, pod(limits(mem="2048"), labels={COUNT: "2"}))
        # The scheduler rule judges pods only: their templates get the scheduler from the pod webhook.
        elsewhere = workload(kind, pod(limits(mem="2"), schedulerName="default-scheduler"))
        if denied(strict(), good) or denied(strict(), elsewhere):
            pytest.fail(repr((kind, denied(strict(), good), denied(strict(), elsewhere))))
    for obj, message in MESSAGES:  # each names the object, the container, the value and what is accepted
        if strict().failures(obj) != [message]:
            pytest.fail(repr((message, strict().failures(obj))))
    named = pod(limits(mem="2", core="7"))
    named["metadata"] = {"generateName": "trainer-", "namespace": "default"}
    for obj, start in ((named, 'GS001: Pod default/trainer- container "c0": aliyun.com/gpu-core.percentage=7 is not'),
                       (workload("Job", pod(limits(mem="2", core="7"))), "GS001: Job default/w ")):
        if not strict().failures(obj)[0].startswith(start):
            pytest.fail(repr((start, strict().failures(obj))))


TEMPLATE_KINDS = ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "ReplicationController",
                  "PodTemplate"]


MESSAGES = [
    (pod(limits(core="5"), limits(core="30", mem="1")),
     'GS002: Pod default/p container "c0": aliyun.com/gpu-core.percentage is requested without aliyun.com/gpu-mem; '
     "add limits.aliyun.com/gpu-mem with a whole number of GiB (1 or more)"),
    (pod(limits(mem="4"), limits(mem="1500m")),
     'GS003: Pod default/p container "c1": aliyun.com/gpu-mem=1500m is not a whole number of GiB from 1 to 1024 '
     "(1024 a card, times the cards of the pod label aliyun.com/gpu-count); use a whole number of GiB such as 2"),
    (pod(limits(mem="5000"), labels={COUNT: "4"}),
     'GS003: Pod default/p container "c0": aliyun.com/gpu-mem=5000 is not a whole number of GiB from 1 to 4096 '
     "(1024 a card, times the cards of the pod label aliyun.com/gpu-count); use a whole number of GiB such as 2"),
    (pod({"resources": {"requests": {MEM: "2k"}}}, schedulerName="ack-co-scheduler"),
     'GS003: Pod default/p container "c0": aliyun.com/gpu-mem=2k is not a whole number of GiB from 1 to 1024 '
     "(1024 a card, times the cards of the pod label aliyun.com/gpu-count); use a whole number of GiB such as 2"),
    (pod(limits(mem="2"), limits(mem="2", core="30")),
     "GS005: Pod default/p mixes mem-only containers with core+mem containers; give every GPU container "
     "aliyun.com/gpu-core.percentage or none of them"),
    (pod(limits(mem="2"), limits(whole="1")),
     "GS006: Pod default/p asks for whole GPUs (nvidia.com/gpu or aliyun.com/gpu) and shared GPU "
     "(aliyun.com/gpu-mem, aliyun.com/gpu-core.percentage) together; a node runs one GPU mode, so use one kind"),
    (pod(limits(mem="2"), schedulerName="volcano"),
     "GM001: Pod default/p asks for aliyun.com/gpu-mem but names scheduler volcano; set schedulerName: "
     "ack-co-scheduler (the gpushare webhook sets it when it is up; this backstop rule holds while it is not)"),
]


def _covers(settings: Settings) -> tuple[str, int]:
    policy = backstop_policy(settings, Engine(settings).known_ids)[0]
    return policy["metadata"]["annotations"]["gpushare.io/covers"], len(policy["spec"]["validations"])


@pytest.mark.parametrize(("config", "covers"), [
    ({}, "GS001,GS002,GS003,GS005,GS006,GS007,GS010"),
    ({"rules": {"GS001": {"severity": "warn"}, "GS006": {"enabled": False}}}, "GS002,GS003,GS005,GS007,GS010"),
    ({"rules": {"GS011": {"severity": "deny"}, "GS003": {"severity": "deny"}}},
     "GS001,GS002,GS003,GS005,GS006,GS007,GS010,GS011"),
    ({"rules": {"GS010": {"enabled": True, "severity": "warn"}}, "backstop": {"scheduler_rule": True}},
     "GS001,GS002,GS003,GS005,GS006,GS007,GM001"),
    ({"backstop": {"scheduler_rule": True}, "names": {"scheduler_name": "none"}},
     "GS001,GS002,GS003,GS005,GS006,GS007,GS010"),
])
def test_warn_and_disabled_rules_are_left_out_and_the_scheduler_rule_is_opt_in(config, covers):
    assert _covers(Settings(**config)) == (covers, covers.count(",") + 1)


def test_a_warn_rule_never_denies_in_the_backstop():
    relaxed = Settings(rules={"GS001": {"severity": "warn"}})
    policy = PolicyCel(backstop_policy(relaxed, Engine(relaxed).known_ids)[0])
    assert denied(policy, pod(limits(mem="2", core="33"), schedulerName="default-scheduler")) == set()


def test_the_binding_denies_outside_the_excluded_namespaces():
    settings = Settings(backstop={"policy_name": "gpu-backstop", "excluded_namespaces": ["kube-system", "ops"]})
    policy, binding = backstop_policy(settings, Engine(settings).known_ids)
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == binding["spec"]["policyName"] == "gpu-backstop"
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "ops"]}]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    resources = {(g, r) for rule in policy["spec"]["matchConstraints"]["resourceRules"] for g in rule["apiGroups"]
                 for r in rule["resources"]}
    assert {("", "pods"), ("apps", "deployments"), ("batch", "cronjobs"), ("", "podtemplates")} <= resources


JUDGED_CHANGE = [  # (old, new, deleting, judged)
    (None, pod(limits(mem="2")), False, True),
    (pod(limits(mem="2")), pod(limits(mem="2")), False, False),
    (pod(limits(mem="2")), pod(limits(mem="3")), False, True),
    (pod(limits(mem="2")), pod(limits(mem="3")), True, False),
]


@pytest.mark.parametrize(("old", "new", "deleting", "judged"), JUDGED_CHANGE)
def test_the_policy_judges_a_create_and_an_update_that_changes_a_judged_part(old, new, deleting, judged):
    from tests.support.policy_cel import evaluate, request

    (condition,) = backstop_policy(STRICT, STRICT_ENGINE.known_ids)[0]["spec"]["matchConditions"]
    if deleting:
        new = {**new, "metadata": {**new["metadata"], "deletionTimestamp": "2030-01-01T00:00:00Z"}}
    assert bool(evaluate(condition["expression"], {"object": new, "oldObject": old,
                                                   "request": request(new, "default", old=old)})) is judged
