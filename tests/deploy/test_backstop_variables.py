"""The backstop's exemptions, evaluated in this process with cel-python: every exemption the webhook
could honour holds in the policy too (the annotation where the Namespace label or the config allows
it, every config grant by name glob or pod label selector, whatever its expiry), and nothing else
does. Each case is judged by the engine as well: the two must agree."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from policies.admission.engine import Engine
from policies.generate.backstop import backstop_policy
from tests.deploy.test_backstop import denied, engine_denials, limits, pod, workload
from tests.support.policy_cel import PolicyCel
from webhook.settings import Settings

SELECTOR = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}, {"key": "legacy", "operator": "DoesNotExist"},
                                 {"key": "team", "operator": "In", "values": ["ml", "ai"]}]}
GRANTS = [
    {"name": "by-name", "namespace": "team-a", "names": "legacy-?x*", "rules": ["GS001"], "reason": "vendor image",
     "expires": "2999-01-01"},
    {"name": "by-label", "namespace": "team-b", "selector": {"matchLabels": {"app": "old"}, "matchExpressions": [
        {"key": "tier", "operator": "NotIn", "values": ["prod", "stage"]}]}, "rules": ["gs001"],
     "reason": "migration", "expires": "2999-01-01"},
    {"name": "by-expression", "namespace": "team-e", "selector": SELECTOR, "rules": ["GS001", "GS003"],
     "reason": "migration", "expires": "2999-01-01"},
    {"name": "other-rule", "namespace": "team-f", "names": "*", "rules": ["GS003"], "reason": "r",
     "expires": "2999-01-01"},
]
SETTINGS = Settings(exemptions={"annotation_namespaces": ["team-c"], "grants": GRANTS})
ENGINE = Engine(SETTINGS)


@functools.cache
def exempting() -> PolicyCel:
    """SETTINGS' policy, built when a test first needs it (not at import)."""
    return PolicyCel(backstop_policy(SETTINGS, ENGINE.known_ids)[0])

ALLOWED = {"gpushare.io/exemptions": "allowed"}


def bad(name: str = "p", labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        generate: bool = False) -> dict[str, Any]:
    """A pod GS001 denies (gpu-core 33), named and labelled as given."""
    obj = pod(limits(mem="2", core="33"), labels=labels)
    if generate:
        obj["metadata"] = {"generateName": name, "namespace": "default", **({"labels": labels} if labels else {})}
    else:
        obj["metadata"]["name"] = name
    if annotations:
        obj["metadata"]["annotations"] = annotations
    return obj


def exempt(reason: str = "legacy image", ids: str = "GS001") -> dict[str, str]:
    return {"gpushare.io/exempt": ids, "gpushare.io/exempt-reason": reason}


CASES = [  # (what, object, namespace, the namespace's labels, exempt from GS001)
    ("no exemption", bad(), "team-d", {}, False),
    ("a grant by name", bad("legacy-1x"), "team-a", {}, True),
    ("a grant by name, glob ? needs one character", bad("legacy-x"), "team-a", {}, False),
    ("a grant by name, another name", bad("trainer"), "team-a", {}, False),
    ("a grant by name, a generated name", bad("legacy-7x-", generate=True), "team-a", {}, True),
    ("a grant in another namespace", bad("legacy-1x"), "team-b", {}, False),
    ("a grant for another rule", bad(), "team-f", {}, False),
    ("a grant by labels", bad(labels={"app": "old"}), "team-b", {}, True),
    ("a grant by labels, NotIn a listed value", bad(labels={"app": "old", "tier": "stage"}), "team-b", {}, False),
    ("a grant by labels, NotIn another value", bad(labels={"app": "old", "tier": "dev"}), "team-b", {}, True),
    ("a grant by labels, another value", bad(labels={"app": "new"}), "team-b", {}, False),
    ("a grant by labels, none", bad(), "team-b", {}, False),
    ("a grant by expressions", bad(labels={"gpu": "", "team": "ai"}), "team-e", {}, True),
    ("a grant by expressions, a forbidden label", bad(labels={"gpu": "1", "team": "ml", "legacy": "1"}), "team-e",
     {}, False),
    ("a grant by expressions, a value not In", bad(labels={"gpu": "1", "team": "ops"}), "team-e", {}, False),
    ("a grant by expressions, In needs the label", bad(labels={"gpu": "1"}), "team-e", {}, False),
    ("a grant by expressions, Exists needs the label", bad(labels={"team": "ml"}), "team-e", {}, False),
    ("the annotation where the config allows it", bad(annotations=exempt()), "team-c", {}, True),
    ("the annotation, lower case among others", bad(annotations=exempt(ids="GS003, gs001;GS007")), "team-c", {},
     True),
    ("the annotation, another id that starts alike", bad(annotations=exempt(ids="GS0011 XGS001")), "team-c", {},
     False),
    ("the annotation without a reason", bad(annotations={"gpushare.io/exempt": "GS001"}), "team-c", {}, False),
    ("the annotation with a blank reason", bad(annotations=exempt(reason=" \t")), "team-c", {}, False),
    ("the annotation where the namespace label allows it", bad(annotations=exempt()), "team-d", ALLOWED, True),
    ("the annotation, the label says no", bad(annotations=exempt()), "team-d", {"gpushare.io/exemptions": "no"},
     False),
    ("the annotation, another namespace", bad(annotations=exempt()), "team-d", {}, False),
]


def _template(kind: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    obj = workload(kind, bad(labels=labels))
    template = obj["template"] if kind == "PodTemplate" else (
        obj["spec"]["jobTemplate"]["spec"]["template"] if kind == "CronJob" else obj["spec"]["template"])
    if annotations:
        template["metadata"]["annotations"] = annotations
    return obj


def test_the_backstop_honours_exactly_the_exemptions_the_webhook_could():
    """One test over every case, stopping at the first wrong one: the policy is built once, and a change to
    the generator is seen by the test that builds it (tests/support/policy_cel.py)."""
    for what, obj, namespace, labels, exempted in CASES:
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
        if ("GS001" not in denied(exempting(), obj, namespace, labels)) is not exempted or (
                "GS001" not in engine_denials(obj, ENGINE, namespace, labels)) is not exempted:
            pytest.fail(repr(what))
    for kind in ("Deployment", "CronJob", "PodTemplate", "Job"):  # a workload is exempted by its pod template
        for obj, namespace, exempted in ((_template(kind, {"app": "old"}), "team-b", True),
                                         (_template(kind, {"app": "new"}), "team-b", False),
                                         (_template(kind, {}, exempt()), "team-c", True),
                                         (_template(kind, {}, exempt(ids="GS003")), "team-c", False)):
            if ("GS001" not in denied(exempting(), obj, namespace)) is not exempted:
                pytest.fail(repr((kind, namespace, exempted)))
    # One grant exempts only from its rules.
    obj = pod(limits(mem="2", core="33"), limits(mem="1500m", core="30"), labels={"gpu": "1", "team": "ml"})
    if denied(exempting(), obj, "team-e") != set():
        pytest.fail(repr("GS001 and GS003 granted"))
    if not denied(exempting(), obj, "team-d") == {"GS001", "GS003"} == engine_denials(obj, ENGINE, "team-d"):
        pytest.fail(repr("no grant in team-d"))
    if denied(exempting(), bad("legacy-1x"), "team-f") != {"GS001"}:
        pytest.fail(repr("a grant for GS003 only"))


def test_a_grant_for_a_rule_the_webhook_does_not_know_is_left_out():
    policy = PolicyCel(backstop_policy(SETTINGS, frozenset())[0])
    assert "GS001" in denied(policy, bad("legacy-1x"), "team-a")
    assert "GS001" not in denied(policy, bad(annotations=exempt()), "team-c")
