"""gpushare.io/exempt in the engine: honoured with a reason where an admin allows it (here: the
config lists the namespace), explained (GE001) otherwise. Permission and grants:
tests/test_exemption_grants.py."""

from __future__ import annotations

import pytest

from policies.engine import Engine
from policies.settings import Settings
from webhook.routes.review import build_response, parse_review

from .helpers import admission_review
from .manifests import ALL_KINDS, CORE, MEM, container, pod_spec, workload

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
