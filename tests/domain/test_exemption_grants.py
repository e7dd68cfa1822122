"""Exemptions are granted by admins: where annotation exemptions are honoured (a Namespace label
or the config), central grants in the config (namespace, name glob or selector, rules, reason,
expiry), and GE001 saying why one is not honoured. Over the real server and CLI:
tests/server/test_exemptions_served.py."""

from __future__ import annotations

import json
import re
from datetime import date, timedelta

import pytest

from policies.admission.engine import Engine
from policies.model.grants import (
    Permission,
    StaticNamespaces,
    annotation_permission,
    glob_regex,
    object_name,
    selector_matches,
)
from policies.model.settings import ExemptionSettings, LabelSelector
from tests.support.manifests import ALL_KINDS, MEM, container, pod_spec, workload
from webhook.settings import ConfigFileError, Settings, load_settings

REASON = "vendor image reads GPU memory in bytes"
TOMORROW = date.today() + timedelta(days=1)  # grants are judged against today's date (UTC)


def _bad(kind: str = "Pod", name: str = "legacy", namespace: str = "team-a") -> dict:
    return workload(kind, pod_spec(container("c", limits={MEM: "2Gi"})), name=name, namespace=namespace)


def _annotated(obj: dict, ids: str = "GS003") -> dict:
    meta = obj["metadata"] if obj["kind"] == "Pod" else (
        obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"] if obj["kind"] == "CronJob"
        else obj["spec"]["template"]["metadata"])
    meta["annotations"] = {"gpushare.io/exempt": ids, "gpushare.io/exempt-reason": REASON}
    return obj


def _judge(engine: Engine, obj: dict, namespaces: dict | None = None, today: date | None = None):
    subject = engine.subject(obj["kind"], obj, namespace=obj["metadata"]["namespace"],
                             namespaces=StaticNamespaces(namespaces) if namespaces is not None else None)
    subject.today = today
    return engine.validate(subject)


def test_secure_by_default_an_annotation_is_honoured_nowhere_and_ge001_says_why():
    verdict = _judge(Engine(Settings()), _annotated(_bad()), {"team-a": {}})
    assert not verdict.allowed and verdict.exempted == []
    assert verdict.findings[0].message == (
        "GE001: Pod team-a/legacy: gpushare.io/exempt=GS003 is not applied: namespace team-a does not allow "
        "exemptions (an admin labels the Namespace gpushare.io/exemptions=allowed or lists it in "
        "exemptions.annotation_namespaces)")
    unknown = _judge(Engine(Settings()), _annotated(_bad()))
    assert "the labels of namespace team-a are not known" in unknown.findings[0].message and not unknown.allowed


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_a_namespace_label_allows_annotation_exemptions_there_alone(kind):
    engine = Engine(Settings())
    labels = {"team-a": {"gpushare.io/exemptions": "allowed"}, "team-b": {"gpushare.io/exemptions": "no"}}
    verdict = _judge(engine, _annotated(_bad(kind)), labels)
    assert verdict.allowed and [f.rule for f in verdict.exempted] == ["GS003"]
    assert verdict.exempted_by == ["annotation"] and verdict.exemption_reason == REASON
    other = _judge(engine, _annotated(_bad(kind, namespace="team-b")), labels)
    assert not other.allowed and other.exempted == []


def test_the_label_key_and_value_are_configurable_and_config_namespaces_need_no_label():
    engine = Engine(Settings(exemptions={"namespace_label": "example.com/gpu-exempt", "namespace_label_value": "yes",
                                         "annotation_namespaces": ["team-c"]}))
    assert _judge(engine, _annotated(_bad()), {"team-a": {"example.com/gpu-exempt": "yes"}}).allowed
    assert not _judge(engine, _annotated(_bad()), {"team-a": {"gpushare.io/exemptions": "allowed"}}).allowed
    assert _judge(engine, _annotated(_bad(namespace="team-c"))).allowed


def test_node_annotations_need_allow_on_nodes():
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "annotations": {
        "gpushare.io/exempt": "GN002", "gpushare.io/exempt-reason": REASON}}}
    off = Engine(Settings()).subject("Node", node).exemption
    on = Engine(Settings(exemptions={"allow_on_nodes": True})).subject("Node", node).exemption
    assert off is not None and not off.honoured and "allow_on_nodes" in off.permission
    assert on is not None and on.honoured


def _grant(**overrides) -> dict:
    grant = {"name": "legacy-bytes", "namespace": "team-a", "names": "legacy*", "rules": ["GS003"],
             "reason": "vendor driver, replaced in Q3", "expires": TOMORROW.isoformat()}
    grant.update(overrides)
    return grant


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_a_config_grant_exempts_matching_objects_in_its_namespace_without_any_annotation(kind):
    engine = Engine(Settings(exemptions={"grants": [_grant()]}))
    verdict = _judge(engine, _bad(kind))
    assert verdict.allowed and [f.rule for f in verdict.exempted] == ["GS003"]
    assert verdict.exempted_by == ["grant:legacy-bytes"] and verdict.exemption_reason == "vendor driver, replaced in Q3"
    assert not _judge(engine, _bad(kind, name="other")).allowed  # the glob does not match
    assert not _judge(engine, _bad(kind, namespace="team-b")).allowed  # another namespace


def test_a_grant_matches_a_pod_without_a_name_by_its_generate_name():
    engine = Engine(Settings(exemptions={"grants": [_grant(names="legacy-7d9f-*")]}))
    pod = _bad()
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "legacy-7d9f-"
    assert _judge(engine, pod).allowed


def test_a_grant_by_label_selector_reads_the_pod_template_labels():
    selector = {"matchLabels": {"app": "legacy"}, "matchExpressions": [
        {"key": "tier", "operator": "NotIn", "values": ["prod"]}, {"key": "app", "operator": "Exists"}]}
    engine = Engine(Settings(exemptions={"grants": [_grant(names=None, selector=selector)]}))
    assert _judge(engine, _bad("Deployment")).allowed  # template labels {"app": "legacy"}
    prod = _bad("Deployment")
    prod["spec"]["template"]["metadata"]["labels"]["tier"] = "prod"
    assert not _judge(engine, prod).allowed
    assert not _judge(engine, _bad("Deployment", name="other")).allowed


def test_an_expired_grant_is_not_honoured_and_says_so():
    engine = Engine(Settings(exemptions={"grants": [_grant(expires="2024-03-31")]}))
    verdict = _judge(engine, _bad())
    assert not verdict.allowed and verdict.exempted == []
    assert verdict.findings[0].message == (
        "GE001: Pod team-a/legacy: exemption grant 'legacy-bytes' (GS003) expired on 2024-03-31, so it is not "
        "applied; an admin renews it in exemptions.grants")
    # The expiry day itself still counts (through the end of the day, UTC).
    assert _judge(engine, _bad(), today=date(2024, 3, 31)).allowed


def test_a_grant_naming_unknown_rules_honours_the_known_ones_and_says_so():
    engine = Engine(Settings(exemptions={"grants": [_grant(rules=["GS003", "GX999"])]}))
    verdict = _judge(engine, _bad())
    assert verdict.allowed and [f.rule for f in verdict.exempted] == ["GS003"]
    assert [f.message for f in verdict.findings] == [
        "GE001: Pod team-a/legacy: exemption grant 'legacy-bytes' names unknown rule id(s) GX999, which are not "
        "applied; use ids listed by `gpushare rules`"]


def test_pod_authors_cannot_widen_a_grant_with_an_annotation():
    """A grant for GS003 does not make the namespace allow annotations for other rules."""
    engine = Engine(Settings(exemptions={"grants": [_grant()]}))
    spec = pod_spec(container("c", limits={MEM: "2Gi", "aliyun.com/gpu-core.percentage": 33}))
    obj = _annotated(workload("Pod", spec, name="legacy", namespace="team-a"), "GS001,GS003")
    verdict = _judge(engine, obj, {"team-a": {}})
    assert [f.rule for f in verdict.exempted] == ["GS003"] and [f.rule for f in verdict.violations] == ["GS001"]
    assert verdict.exempted_by == ["grant:legacy-bytes"]


def test_a_grant_sets_mutations_aside_too():
    engine = Engine(Settings(exemptions={"grants": [_grant(rules=["GM001"])]}))
    pod = workload("Pod", pod_spec(container("c", limits={MEM: 2})), name="legacy", namespace="team-a")
    assert "GM001" not in engine.mutate(engine.subject("Pod", pod, namespace="team-a")).patch_ids


@pytest.mark.parametrize("text, needle", [
    ("exemptions:\n  grants:\n  - {name: g, namespace: a, rules: [GS003], reason: r, expires: 2030-01-01}\n",
     "needs names (a glob) or selector"),
    ("exemptions:\n  grants:\n  - {name: g, namespace: a, names: x, rules: [GS003], reason: r, expires: someday}\n",
     "expires"),
    ("exemptions:\n  grants:\n  - {name: g, namespace: a, names: x, rules: [GS003], reason: ' ', expires: 2030-01-01}\n"
     "  - {name: g, namespace: b, names: x, rules: [GS003], reason: r, expires: 2030-01-01}\n", "reason"),
])
def test_a_malformed_grant_is_a_config_error(tmp_path, text, needle):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigFileError, match=re.escape(needle)):
        load_settings(path)


@pytest.mark.parametrize("pattern, name, matches", [
    ("legacy*", "legacy-1", True), ("legacy*", "a-legacy", False), ("le?acy", "legacy", True),
    ("a.b", "axb", False), ("a.b", "a.b", True), ("*", "", True), ("x[1]", "x[1]", True),
    ("x(1)", "x(1)", True), ("x(1)", "xyz1)", False), ("a b", "a b", True), ("a b", "a--b", False),
])
def test_name_globs_become_anchored_regexes(pattern, name, matches):
    assert bool(re.match(glob_regex(pattern), name, re.DOTALL)) is matches


# ---- the helpers, word for word and at their edges -------------------------------------------------------

def _received_settings(**config) -> ExemptionSettings:
    """Exemption settings as read from a config file: every string decoded, none the code's own."""
    return ExemptionSettings.model_validate(json.loads(json.dumps(config)))


@pytest.mark.parametrize(("namespace", "config", "labels", "expected"), [
    ("", {}, None, Permission(False, "exemptions on cluster-scoped objects are not allowed (an admin sets "
                                     "exemptions.allow_on_nodes)")),
    ("", {"allow_on_nodes": True}, None, Permission(True, "config exemptions.allow_on_nodes")),
    ("team-a", {"annotation_namespaces": ["team-a"]}, None,
     Permission(True, "config exemptions.annotation_namespaces")),
    ("team-a", {}, None, Permission(False, "the labels of namespace team-a are not known, so its "
                                           "gpushare.io/exemptions=allowed permission cannot be confirmed")),
    ("team-a", {}, {"team-b": {"gpushare.io/exemptions": "allowed"}},
     Permission(False, "the labels of namespace team-a are not known, so its gpushare.io/exemptions=allowed "
                       "permission cannot be confirmed")),
    ("team-a", {}, {"team-a": {"gpushare.io/exemptions": "allowed"}},
     Permission(True, "namespace label gpushare.io/exemptions=allowed")),
    ("team-a", {}, {"team-a": {"gpushare.io/exemptions": "yes"}},
     Permission(False, "namespace team-a does not allow exemptions (an admin labels the Namespace "
                       "gpushare.io/exemptions=allowed or lists it in exemptions.annotation_namespaces)")),
    ("team-a", {"namespace_label": "x/ok", "namespace_label_value": "1"}, {"team-a": {"x/ok": "1"}},
     Permission(True, "namespace label x/ok=1")),
])
def test_annotation_permission_word_for_word(namespace, config, labels, expected):
    namespaces = StaticNamespaces(json.loads(json.dumps(labels))) if labels is not None else None
    assert annotation_permission(namespace, _received_settings(**config), namespaces) == expected


@pytest.mark.parametrize(("metadata", "name"), [
    ({"name": "web-1", "generateName": "web-"}, "web-1"),
    ({"name": "", "generateName": "web-"}, "web-"),
    ({"name": 5, "generateName": "web-"}, "web-"),  # a malformed name is no name
    ({"generateName": "web-"}, "web-"),
    ({"generateName": 7}, ""),
    ({}, ""),
])
def test_the_name_a_grant_matches(metadata, name):
    assert object_name(metadata) == name


@pytest.mark.parametrize(("expressions", "labels", "matches"), [
    ([{"key": "app", "operator": "Exists"}], {"app": "x"}, True),
    ([{"key": "app", "operator": "Exists"}], {"team": "x"}, False),
    ([{"key": "app", "operator": "DoesNotExist"}], {"team": "x"}, True),
    ([{"key": "app", "operator": "DoesNotExist"}], {"app": "x"}, False),
    ([{"key": "app", "operator": "In", "values": ["a", "b"]}], {"app": "b"}, True),
    ([{"key": "app", "operator": "In", "values": ["a", "b"]}], {"app": "c"}, False),
    ([{"key": "app", "operator": "In", "values": ["a"]}], {}, False),
    ([{"key": "app", "operator": "NotIn", "values": ["a"]}], {"app": "a"}, False),
    ([{"key": "app", "operator": "NotIn", "values": ["a"]}], {"app": "b"}, True),
    ([{"key": "app", "operator": "NotIn", "values": ["a"]}], {}, True),
    ([{"key": "app", "operator": "Exists"}, {"key": "tier", "operator": "In", "values": ["gpu"]}],
     {"app": "x", "tier": "cpu"}, False),
])
def test_selector_operators_as_read_from_the_config(expressions, labels, matches):
    selector = LabelSelector.model_validate(json.loads(json.dumps({"matchExpressions": expressions})))
    assert selector_matches(selector, json.loads(json.dumps(labels))) is matches


def test_match_labels_all_hold():
    selector = LabelSelector.model_validate({"matchLabels": {"app": "x", "tier": "gpu"}})
    assert selector_matches(selector, {"app": "x", "tier": "gpu", "other": "1"})
    assert not selector_matches(selector, {"app": "x"})
    assert not selector_matches(selector, {"app": "x", "tier": "cpu"})


def test_each_exemption_is_credited_only_with_the_findings_it_covers():
    # the annotation (allowed in team-a) exempts GS003; a grant exempts GS001, which the pod does not break
    engine = Engine(Settings(exemptions={"annotation_namespaces": ["team-a"],
                                         "grants": [_grant(rules=["GS001"], reason="compute is checked upstream")]}))
    verdict = _judge(engine, _annotated(_bad()))
    assert [f.rule for f in verdict.exempted] == ["GS003"]
    assert (verdict.exempted_by, verdict.exemption_reason) == (["annotation"], REASON)
    # the other way round: the annotation names GS001, the grant GS003
    engine = Engine(Settings(exemptions={"annotation_namespaces": ["team-a"], "grants": [_grant()]}))
    verdict = _judge(engine, _annotated(_bad(), "GS001"))
    assert (verdict.exempted_by, verdict.exemption_reason) == (["grant:legacy-bytes"], "vendor driver, replaced in Q3")


def test_two_exemptions_of_the_same_rule_both_exempt_it():
    second = _grant(name="second", reason="also known")
    engine = Engine(Settings(exemptions={"annotation_namespaces": ["team-a"], "grants": [_grant(), second]}))
    for obj in (_bad(), _annotated(_bad())):
        verdict = _judge(engine, obj)
        assert verdict.allowed and [f.rule for f in verdict.exempted] == ["GS003"]
    assert _judge(engine, _bad()).exempted_by == ["grant:legacy-bytes", "grant:second"]


def test_grant_matching_on_values_as_received():
    from policies.model.grants import grant_matches
    from policies.model.settings import ExemptionGrant

    grant = ExemptionGrant.model_validate(json.loads(json.dumps(
        {**_grant(names=None, selector={"matchLabels": {"app": "legacy"}}), "expires": TOMORROW.isoformat()})))
    labels = json.loads(json.dumps({"app": "legacy"}))
    assert grant_matches(grant, json.loads('"team-a"'), {"name": "x"}, labels)
    assert not grant_matches(grant, "team-0", {"name": "x"}, labels)  # sorts before team-a: still another namespace
    assert not grant_matches(grant, "team-b", {"name": "x"}, labels)
    assert not grant_matches(grant, "team-a", {"name": "x"}, {"app": "new"})


def test_a_later_grant_applies_when_an_earlier_one_does_not_match():
    engine = Engine(Settings(exemptions={"grants": [_grant(name="other", names="web*"), _grant()]}))
    verdict = _judge(engine, _bad())
    assert verdict.allowed and verdict.exempted_by == ["grant:legacy-bytes"]
