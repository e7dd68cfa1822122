"""gpushare.io/exempt in the engine: honoured with a reason where an admin allows it (here: the
config lists the namespace), explained (GE001) otherwise. Permission and grants:
tests/domain/test_exemption_grants.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from policies.admission.engine import Engine
from policies.generate.match_conditions import SCOPES, triggers
from policies.model.exemptions import Exemption, annotations_path, parse_ids, read_exemption
from policies.model.settings import Names
from tests.support.helpers import admission_review
from tests.support.manifests import ALL_KINDS, CORE, MEM, container, pod_spec, workload
from tests.support.near_miss_cases import pod_with
from webhook.routes.review import build_response, parse_review
from webhook.settings import Settings

REASON = "vendor image reads GPU memory in bytes; tracked in INC-42"


@pytest.fixture(scope="module")
def engine() -> Engine:
    """Annotation exemptions allowed in namespace default (secure by default: nowhere otherwise)."""
    return Engine(Settings(exemptions={"annotation_namespaces": ["default"]}))


def _with_exemption(obj: dict, ids: str, reason: str | None, *, on_template: bool) -> dict:
    annotations = {"gpushare.io/exempt": ids}
    if reason is not None:
        annotations["gpushare.io/exempt-reason"] = reason
    if not on_template or obj["kind"] == "Pod":
        meta = obj["metadata"]
    elif obj["kind"] == "CronJob":
        meta = obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
    else:
        meta = obj["spec"]["template"]["metadata"]
    meta["annotations"] = annotations
    return obj


def _verdict(engine: Engine, obj: dict):
    return engine.validate(engine.subject(obj["kind"], obj, namespace="default"))


def _bad(kind: str) -> dict:
    return workload(kind, pod_spec(container("c", limits={MEM: "2Gi"})), name="legacy")


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_an_exemption_with_a_reason_sets_the_finding_aside_on_every_kind(engine, kind):
    verdict = _verdict(engine, _with_exemption(_bad(kind), "GS003", REASON, on_template=True))
    assert verdict.allowed and verdict.findings == []
    assert [f.rule for f in verdict.exempted] == ["GS003"] and verdict.exemption_reason == REASON


def test_ids_are_read_in_any_case_with_commas_semicolons_or_spaces(engine):
    obj = workload("Pod", pod_spec(container("c", limits={MEM: "2Gi", CORE: 33})), name="p")
    verdict = _verdict(engine, _with_exemption(obj, " gs001; GS003 ,", REASON, on_template=False))
    assert verdict.allowed and sorted(f.rule for f in verdict.exempted) == ["GS001", "GS003"]


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_without_a_reason_the_exemption_is_not_applied_and_ge001_says_why(engine, reason):
    verdict = _verdict(engine, _with_exemption(_bad("Pod"), "GS003", reason, on_template=False))
    assert not verdict.allowed and verdict.exempted == []
    assert [(f.rule, f.severity) for f in verdict.findings] == [("GE001", "warn"), ("GS003", "deny")]
    assert verdict.findings[0].message == (
        "GE001: Pod default/legacy: gpushare.io/exempt=GS003 has no gpushare.io/exempt-reason, so it is not "
        "applied; add gpushare.io/exempt-reason saying why the rules do not apply here")
    assert verdict.findings[0].path == ("metadata", "annotations", "gpushare.io/exempt")


def test_on_a_workloads_own_metadata_it_is_not_applied_because_pods_do_not_inherit_it(engine):
    verdict = _verdict(engine, _with_exemption(_bad("Deployment"), "GS003", REASON, on_template=False))
    assert not verdict.allowed
    assert verdict.findings[0].message == (
        "GE001: Deployment default/legacy: gpushare.io/exempt=GS003 is on the Deployment's own metadata, which its "
        "pods do not inherit, so it is not applied; put it and gpushare.io/exempt-reason in the pod template's "
        "annotations, spec.template.metadata.annotations")


def test_unknown_ids_warn_and_known_ones_still_apply(engine):
    verdict = _verdict(engine, _with_exemption(_bad("Pod"), "GS003,GX999", REASON, on_template=False))
    assert verdict.allowed and [f.rule for f in verdict.exempted] == ["GS003"]
    assert [f.message for f in verdict.findings] == [
        "GE001: Pod default/legacy: gpushare.io/exempt names unknown rule id(s) GX999; use ids listed by "
        "`gpushare rules`"]
    empty = _verdict(engine, _with_exemption(_bad("Pod"), " , ", REASON, on_template=False))
    assert "names no rule" in empty.findings[0].message and not empty.allowed


def test_mutations_can_be_exempted_too(engine):
    pod = workload("Pod", pod_spec(container("c", limits={MEM: 2})), name="own-scheduler")
    assert "GM001" in engine.mutate(engine.subject("Pod", pod, namespace="default")).patch_ids
    exempt = _with_exemption(pod, "GM001", "scheduled by our own GPU-aware scheduler", on_template=False)
    assert "GM001" not in engine.mutate(engine.subject("Pod", exempt, namespace="default")).patch_ids
    no_reason = _with_exemption(pod, "GM001", None, on_template=False)
    assert "GM001" in engine.mutate(engine.subject("Pod", no_reason, namespace="default")).patch_ids


def test_the_admission_response_keeps_an_audit_trail_of_exemptions(engine):
    pod = _with_exemption(_bad("Pod"), "GS003", REASON, on_template=False)
    review = parse_review(admission_review(pod))
    response = build_response(review, engine.validate(engine.subject("Pod", pod, namespace="default")))["response"]
    assert response["allowed"] is True
    assert response["auditAnnotations"] == {"decision": "allowed", "rules": "", "exempted": "GS003",
                                            "exemption_reason": REASON, "exempted_by": "annotation"}
    assert "warnings" not in response


# ---- where the annotation is read, word for word -------------------------------------------------

@pytest.mark.parametrize(("kind", "path"), [
    ("Pod", ("metadata", "annotations")),
    ("Node", ("metadata", "annotations")),
    ("Binding", ("metadata", "annotations")),
    ("Deployment", ("spec", "template", "metadata", "annotations")),
    ("PodTemplate", ("template", "metadata", "annotations")),
    ("CronJob", ("spec", "jobTemplate", "spec", "template", "metadata", "annotations")),
])
def test_annotations_path_by_kind(kind, path):
    assert annotations_path(kind) == path


@pytest.mark.parametrize(("value", "ids"), [
    ("GS003", ("GS003",)), ("gs003 GS003,gs001", ("GS003", "GS001")), ("\tGN002;;GS001\n", ("GN002", "GS001")),
    ("", ()), (" ,; ", ()), (3, ()), (None, ()), (["GS003"], ()),
])
def test_parse_ids(value, ids):
    assert parse_ids(value) == ids


def test_on_the_pod_template_it_wins_over_the_workloads_own_metadata():
    obj = _with_exemption(_bad("Job"), "GS003", REASON, on_template=True)
    obj["metadata"]["annotations"] = {"gpushare.io/exempt": "GS001"}
    assert read_exemption(obj, "Job", Names()) == Exemption(
        ("GS003",), REASON, ("spec", "template", "metadata", "annotations", "gpushare.io/exempt"))


def test_annotations_that_are_not_a_mapping_ask_for_nothing():
    obj = _bad("Pod")
    obj["metadata"]["annotations"] = ["gpushare.io/exempt"]
    assert read_exemption(obj, "Pod", Names()) is None
    assert read_exemption({"metadata": "x"}, "Pod", Names()) is None


def test_a_reason_that_is_not_text_is_no_reason():
    obj = _with_exemption(_bad("Pod"), "GS003", None, on_template=False)
    obj["metadata"]["annotations"]["gpushare.io/exempt-reason"] = 42
    exemption = read_exemption(obj, "Pod", Names())
    assert exemption is not None and exemption.reason == "" and exemption.set_aside == frozenset()


def test_only_an_honoured_exemption_sets_ids_aside():
    assert Exemption(("GS003", "GM001"), "why", (), allowed=True).set_aside == {"GS003", "GM001"}
    assert Exemption(("GS003", "GM001"), "why", ()).set_aside == frozenset()  # no admin allowed it
    assert Exemption(("GS003",), "", (), allowed=True).set_aside == frozenset()
    assert Exemption((), "why", (), allowed=True).set_aside == frozenset()
    assert Exemption(("GS003",), "why", (), misplaced=True, allowed=True).set_aside == frozenset()


def test_a_misplaced_exemption_naming_nothing_gets_both_explanations(engine):
    verdict = _verdict(engine, _with_exemption(_bad("CronJob"), ",", REASON, on_template=False))
    assert [f.message for f in verdict.findings if f.rule == "GE001"] == [
        "GE001: CronJob default/legacy: gpushare.io/exempt=(nothing) is on the CronJob's own metadata, which its "
        "pods do not inherit, so it is not applied; put it and gpushare.io/exempt-reason in the pod template's "
        "annotations, spec.jobTemplate.spec.template.metadata.annotations",
        "GE001: CronJob default/legacy: gpushare.io/exempt names no rule; list rule ids such as GS003,GN002 "
        "(see `gpushare rules`)",
    ]


def test_a_misplaced_exemption_without_a_reason_says_where_it_belongs_only(engine):
    verdict = _verdict(engine, _with_exemption(_bad("Deployment"), "GS003", None, on_template=False))
    messages = [f.message for f in verdict.findings if f.rule == "GE001"]
    assert len(messages) == 1 and "own metadata" in messages[0]


def test_mutation_ids_are_known_to_ge001(engine):
    pod = _with_exemption(_bad("Pod"), "GS003,GM003,gm001", REASON, on_template=False)
    verdict = _verdict(engine, pod)
    assert verdict.findings == [] and verdict.allowed


def test_a_node_exemption_is_read_from_its_own_metadata():
    engine = Engine(Settings(exemptions={"allow_on_nodes": True}))  # Nodes have no namespace to label
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "gpu-1", "annotations": {"gpushare.io/exempt": "GN999", "gpushare.io/exempt-reason": REASON}}}
    verdict = engine.validate(engine.subject("Node", node))
    assert [f.message for f in verdict.findings if f.rule == "GE001"] == [
        "GE001: Node gpu-1: gpushare.io/exempt names unknown rule id(s) GN999; use ids listed by `gpushare rules`"]


def test_an_exemption_cannot_be_changed_once_read():
    """The engine and GE001 read the same Exemption of a subject."""
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        Exemption(("GS003",), "", ()).reason = "now honoured"  # type: ignore[misc]


# ---- config grants: news only where a shared-GPU rule judges ------------------------------------------

EXPIRED = {"name": "old", "namespace": "team-a", "names": "*", "rules": ["GS003"], "reason": "vendor image",
           "expires": "2020-01-01"}


def _grant_news(engine: Engine, obj: dict) -> list[tuple[str, str]]:
    subject = engine.subject(obj["kind"], obj, namespace="team-a")
    return [(f.message, f.path_text) for f in engine.validate(subject).findings if f.rule == "GE001"]


def test_an_expired_grant_is_news_only_on_objects_a_shared_gpu_rule_judges():
    engine = Engine(Settings(exemptions={"grants": [EXPIRED]}))
    news = ("GE001: {} team-a/{}: exemption grant 'old' (GS003) expired on 2020-01-01, so it is not applied; an "
            "admin renews it in exemptions.grants", "metadata")
    # A pod or a custom workload asking for no shared GPU: the grant's rules judge nothing there.
    web = workload("Pod", pod_spec(container("c")), name="web", namespace="team-a")
    job = yaml.safe_load((Path(__file__).parents[1] / "data" / "workloads" / "pytorchjob.yaml").read_text())
    job["metadata"]["namespace"] = "team-a"
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        del replica["template"]["spec"]["containers"][0]["resources"]
    assert _grant_news(engine, web) == []
    assert _grant_news(engine, job) == []
    # One naming a near miss of a shared-GPU name is judged (GS007), and so is every Binding.
    near = pod_with("aliyun.com/gpu-memory", 4)
    near["metadata"]["namespace"] = "team-a"
    assert _grant_news(engine, near) == [(news[0].format("Pod", "near-miss"), news[1])]
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": "team-a"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    assert _grant_news(engine, binding) == [(news[0].format("Binding", "p"), news[1])]


def test_a_pod_naming_a_near_miss_is_sent_for_grant_news_even_with_gs007_off():
    # GE001's own declaration makes such a pod relevant: the pods webhook must send it for the news above.
    settings = Settings(rules={"GS007": {"enabled": False}}, exemptions={"grants": [EXPIRED]})
    near = pod_with("aliyun.com/gpu-memory", 4)
    near["metadata"]["namespace"] = "team-a"
    [pods] = [scope for scope in SCOPES if scope.name == "pods.validate.gpushare.io"]
    assert triggers(pods, settings).sends("Pod", near, settings)
    assert [message for message, _ in _grant_news(Engine(settings), near)] == [
        "GE001: Pod team-a/near-miss: exemption grant 'old' (GS003) expired on 2020-01-01, so it is not applied; "
        "an admin renews it in exemptions.grants"]
