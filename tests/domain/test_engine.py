"""The engine in-process: one object, one operation, the cluster state -> a Verdict. Rules as configured
(disabled, severities, unknown ids refused at start), an UPDATE judged on what it changes, exemptions set
apart, the fail mode when the state is not usable, the patch, and what an admission records."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from policies.admission.engine import EXISTING, Engine, Verdict
from policies.model.cluster import Availability
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.placement.assume import PlacementLedger
from policies.rules.base import Finding
from tests.support.cluster_objects import binding, gpu_pod, node, state_of
from webhook.settings import Settings

MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"
NODE = "cn-beijing.192.168.1.10"


def pod(name: str = "p", *, core: Any = None, mem: Any = 2, namespace: str = "default", **meta: Any) -> dict:
    limits = {MEM: mem} if core is None else {MEM: mem, CORE: core}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, **meta},
            "spec": {"containers": [{"name": "c", "image": "cuda:12", "resources": {"limits": limits}}]}}


def judge(engine: Engine, obj: dict[str, Any], **review: Any) -> Verdict:
    return engine.validate(engine.subject(obj["kind"], obj, namespace="default", **review))


def found(verdict: Verdict) -> list[tuple[str, str]]:
    return [(f.rule, f.severity) for f in verdict.findings]


def test_a_verdict_says_whether_it_allows_and_what_fired():
    deny, warn = Finding("GS001", "deny", "GS001: x"), Finding("GW001", "warn", "GW001: y")
    empty = Verdict("Pod", "p", "default", patch_ids=["GM001", "GM003"])
    assert empty.allowed and empty.violations == [] and empty.warnings == []
    assert empty.rule_ids == ["GM001", "GM003"]
    warned = Verdict("Pod", "p", "default", [warn, warn], patch_ids=["GM001"])
    assert warned.allowed and warned.warnings == [warn, warn] and warned.violations == []
    assert warned.rule_ids == ["GW001", "GM001"]
    denied = Verdict("Pod", "p", "default", [warn, deny, Finding("GS001", "deny", "GS001: z")], patch_ids=["GS001"])
    assert not denied.allowed and [f.message for f in denied.violations] == ["GS001: x", "GS001: z"]
    assert denied.warnings == [warn] and denied.rule_ids == ["GW001", "GS001"]


def test_rules_are_judged_as_configured(engine):
    bad = pod(core=33)
    assert found(judge(engine, bad)) == [("GS001", "deny")]
    assert found(judge(Engine(Settings(rules={"GS001": {"severity": "warn"}})), bad)) == [("GS001", "warn")]
    assert found(judge(Engine(Settings(rules={"GS001": {"enabled": False}})), bad)) == []
    assert found(judge(Engine(Settings(rules={"GS001": {"enabled": True}})), bad)) == [("GS001", "deny")]
    [finding] = judge(engine, bad).findings
    assert finding.message.startswith('GS001: Pod default/p container "c": aliyun.com/gpu-core.percentage=33 ')
    assert finding.path == ("spec", "containers", 0, "resources", "limits", CORE)


def test_a_config_naming_unknown_rules_is_refused_at_start():
    with pytest.raises(ValueError, match=r"^config names unknown rules: GS999, XX001$"):
        Engine(Settings(rules={"XX001": {"enabled": False}, "GS999": {"severity": "warn"}, "GS001": {}}))
    assert Engine(Settings(rules={"GM001": {"enabled": False}})).mutation_enabled("GM003")  # mutations are known


def test_a_disabled_mutation_is_not_planned(engine):
    assert engine.mutate(engine.subject("Pod", pod())).patch_ids == ["GM001", "GM003"]
    quiet = Engine(Settings(rules={"GM001": {"enabled": False}}))
    assert not quiet.mutation_enabled("GM001") and quiet.mutation_enabled("GM003")
    planned = quiet.mutate(quiet.subject("Pod", pod()))
    assert planned.patch_ids == ["GM003"] and [op["path"] for op in planned.patch] == ["/spec/containers/0/env"]
    assert Engine(Settings(rules={"GM001": {"enabled": True}})).mutation_enabled("GM001")


def test_a_subresource_is_neither_patched_nor_placed(engine):
    subject = engine.subject("Pod", pod(), sub_resource="ephemeralcontainers", operation="UPDATE", old=pod())
    assert engine.mutate(subject).patch == []
    assert engine.admit(subject, PlacementLedger()).allowed


def test_which_kinds_the_engine_handles(engine):
    assert engine.handles("Pod") and engine.handles("DaemonSet") and engine.handles("Job")
    assert engine.handles("Node") and engine.handles("ResourceQuota")
    assert not engine.handles("ConfigMap")
    assert engine.handles("PyTorchJob", "kubeflow.org") and not engine.handles("PyTorchJob", "example.com")
    assert engine.workload("PyTorchJob", "kubeflow.org").kind == "PyTorchJob"
    assert engine.workload("Pod", "") is None
    assert {"GS001", "GM001", "GB001", "GA001"} <= engine.known_ids


def test_the_rules_for_a_subresource_are_those_registered_for_it(engine):
    all_update = {a.id for a in engine.rules_for("Pod", "UPDATE")}
    debug = {a.id for a in engine.rules_for("Pod", "UPDATE", "ephemeralcontainers")}
    assert debug and debug < all_update
    assert engine.rules_for("Pod", "UPDATE", "status") == []
    assert engine.rules_for("Pod", "CREATE") is engine.rules_for("Pod", "CREATE")  # built once per kind
    assert {a.id for a in engine.rules_for("Binding", "CREATE")} >= {"GB001", "GB002", "GB003", "GB004", "GB005"}
    disabled = Engine(Settings(rules={"GB003": {"enabled": False}, "GS002": {"severity": "deny"}}))
    assert "GB003" not in {a.id for a in disabled.rules_for("Binding", "CREATE")}
    assert {a.id: a.severity for a in disabled.rules_for("Pod", "CREATE")}["GS002"] == "deny"


def test_the_subject_reads_the_group_and_the_namespace_labels(engine, settings):
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}, "spec": {}}
    assert engine.subject("PyTorchJob", job).workload.kind == "PyTorchJob"
    assert engine.subject("PyTorchJob", job, group="example.com").workload is None
    assert engine.subject("Pod", pod()).workload is None

    class Labelled(ClusterSnapshot):
        def namespace_labels(self, namespace: str) -> dict[str, str]:
            return {"gpushare.io/exemptions": "allowed"} if namespace == "research" else {}

    exempt = pod("p", core=33, namespace="research",
                 annotations={"gpushare.io/exempt": "GS001", "gpushare.io/exempt-reason": "vendor image"})
    verdict = engine.validate(engine.subject("Pod", exempt, namespace="research", state=Labelled()))
    assert not {"GS001", "GE001"} & {f.rule for f in verdict.findings} and [f.rule for f in verdict.exempted] == [
        "GS001"]
    assert verdict.exemption_reason == "vendor image" and verdict.exempted_by == ["annotation"]
    unknown = engine.validate(engine.subject("Pod", exempt, namespace="research"))
    assert [f.rule for f in unknown.findings if f.rule != "GC001"] == ["GE001", "GS001"] and unknown.exempted == []


def test_an_update_is_judged_on_what_it_changes(engine):
    old = pod(core=33)
    same = copy.deepcopy(old)
    same["metadata"]["labels"] = {"team": "a"}  # nothing judged changed: the denial becomes a warning
    [kept] = judge(engine, same, operation="UPDATE", old=old).findings
    assert kept.severity == "warn" and kept.message.endswith(EXISTING) and kept.rule == "GS001"
    worse = pod(core=33)
    worse["spec"]["containers"].append({"name": "d", "image": "x", "resources": {"limits": {MEM: 1, CORE: 7}}})
    verdict = judge(engine, worse, operation="UPDATE", old=old)
    # The first container's denial was there before, word for word; the second's is new.
    assert [(f.severity, f.message.endswith(EXISTING)) for f in verdict.findings] == [("warn", True),
                                                                                      ("deny", False)]
    assert not verdict.allowed
    fixed = judge(engine, pod(core=30), operation="UPDATE", old=old)
    assert fixed.findings == []
    new = judge(engine, pod(core=33), operation="UPDATE", old=pod(core=30))
    assert found(new) == [("GS001", "deny")]
    created = judge(engine, pod(core=33), operation="CREATE", old=pod(core=33))
    assert found(created) == [("GS001", "deny")]  # only an UPDATE ratchets


def test_an_object_being_deleted_is_admitted_unjudged(engine):
    going = pod(core=33, deletionTimestamp="2026-01-01T00:00:00Z", finalizers=[])
    verdict = judge(engine, going, operation="UPDATE", old=pod(core=33))
    assert verdict.findings == [] and (verdict.kind, verdict.name, verdict.namespace) == ("Pod", "p", "default")
    assert found(judge(engine, pod(core=33, deletionTimestamp=""), operation="UPDATE", old=pod(core=31))) == [
        ("GS001", "deny")]


def test_a_warning_s_brief_keeps_the_existing_clause():
    engine = Engine(Settings(budget={"max_containers": 1}))
    old = pod()
    old["spec"]["containers"].append({"name": "d", "image": "x"})
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"a": "b"}
    [finding] = engine.validate(engine.subject("Pod", new, operation="UPDATE", old=old)).findings
    assert finding.rule == "budget" and finding.severity == "warn"
    assert finding.message.endswith(EXISTING) and finding.brief.endswith(f"(budget.when_exceeded: deny){EXISTING}")


class Stale(ClusterSnapshot):
    def availability(self) -> Availability:
        return Availability(False, "API server unreachable for 45s (stale after 30s)")


@pytest.mark.parametrize(("mode", "severity", "tail"), [
    ("open", "warn", "; admitted without the check (state.when_unavailable.placement: open)"),
    ("closed", "deny", "; denied (state.when_unavailable.placement: closed), retry when the webhook has synced"),
])
def test_rules_that_cannot_run_for_one_reason_are_reported_once_in_the_configured_mode(mode, severity, tail):
    engine = Engine(Settings(state={"when_unavailable": {"placement": mode}}))
    verdict = engine.validate(engine.subject("Binding", binding("p", NODE), namespace="default", state=Stale()))
    [finding] = verdict.findings
    assert (finding.rule, finding.severity) == ("GB001", severity)
    assert finding.message == (f"GB001, GB002, GB003, GB004, GB005: Binding default/p to node {NODE}: GPU placement "
                               "not checked because the cluster state is not usable (API server unreachable for 45s "
                               f"(stale after 30s)){tail}")


def test_stateful_rules_are_skipped_without_state(engine):
    assert engine.validate(engine.subject("Binding", binding("p", NODE), namespace="default")).findings == []
    disabled = Engine(Settings(rules={f"GB00{i}": {"enabled": False} for i in range(1, 6)}))
    assert disabled.validate(disabled.subject("Binding", binding("p", NODE), namespace="default",
                                              state=Stale())).findings == []


def test_a_rule_exempted_from_reports_no_unavailable_state(settings):
    engine = Engine(Settings(exemptions={"annotation_namespaces": ["default"]}))
    bind = binding("p", NODE)
    bind["metadata"]["annotations"] = {"gpushare.io/exempt": "GB001,GB002,GB003,GB004,GB005",
                                       "gpushare.io/exempt-reason": "migration"}
    verdict = engine.validate(engine.subject("Binding", bind, namespace="default", state=Stale()))
    assert verdict.findings == []


def test_admission_records_what_it_admitted(engine, settings):
    ledger = PlacementLedger()
    base = state_of(settings, [node(mode="core_mem")], [gpu_pod("mem-a", node_name=NODE), gpu_pod("mem-b")])
    view = ledger.view(base)
    fresh = gpu_pod("core-new", core=25)
    verdict = engine.admit(engine.subject("Pod", fresh, namespace="default", state=view), ledger)
    assert verdict.allowed and view.has_pod("default", "core-new")
    # A pod that names no namespace is recorded in the review's; one that names its own, there.
    other = gpu_pod("core-other", core=25)
    del other["metadata"]["namespace"]
    engine.admit(engine.subject("Pod", other, namespace="team", state=view), ledger)
    assert view.has_pod("team", "core-other") and not view.has_pod("default", "core-other")
    engine.admit(engine.subject("Pod", copy.deepcopy(other), namespace="apps", state=view), ledger)
    assert view.has_pod("apps", "core-other")  # a namespace that sorts before "default" too
    own = gpu_pod("core-own", core=25, namespace="elsewhere")
    engine.admit(engine.subject("Pod", own, namespace="team", state=view), ledger)
    assert view.has_pod("elsewhere", "core-own") and not view.has_pod("team", "core-own")
    # A pod named by generateName has no name yet: nothing to record.
    nameless = gpu_pod("x", core=25)
    del nameless["metadata"]["name"]
    nameless["metadata"]["generateName"] = "x-"
    before = len(view.pods())
    assert engine.admit(engine.subject("Pod", nameless, namespace="default", state=view), ledger).allowed
    assert len(view.pods()) == before
    denied = gpu_pod("bad", core=33)
    assert not engine.admit(engine.subject("Pod", denied, namespace="default", state=view), ledger).allowed
    assert not view.has_pod("default", "bad")
    update = engine.admit(engine.subject("Pod", gpu_pod("upd", core=25), namespace="default", state=view,
                                         operation="UPDATE", old=gpu_pod("upd", core=25)), ledger)
    assert update.allowed and not view.has_pod("default", "upd")
    # A binding admitted is assumed on its node; one denied is not.
    assert engine.admit(engine.subject("Binding", binding("core-new", NODE), namespace="default", state=view),
                        ledger).findings[0].rule == "GB001"
    assert ledger.counts()[0] == 0
    ok = engine.admit(engine.subject("Binding", binding("mem-b", NODE), namespace="default", state=view), ledger)
    assert ok.allowed and ledger.counts()[0] == 1


def test_warm_reads_the_shipped_catalog_once(settings):
    engine = Engine(Settings())
    assert engine.catalog is None
    engine.warm()
    catalog = engine.catalog
    assert catalog is not None
    engine.warm()
    assert engine.catalog is catalog
    overridden = Engine(Settings(catalog={"regions": {"cn-test": ["ecs.gn7i-c8g1.2xlarge"]}}))
    assert overridden.catalog is not None and overridden.catalog is not catalog


def test_findings_come_in_rule_order_whatever_family_a_rule_belongs_to():
    engine = Engine(Settings())  # its own: the plan of runs is built on a kind's first review
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
                  "spec": {"template": {"spec": pod(core=33, mem="2Gi")["spec"]}}}
    # GC001 and GS003 test for GPU memory, GS001 between them for compute: the order stays the ids'.
    assert [f.rule for f in judge(engine, deployment).findings] == ["GS001", "GS003"]


def test_the_namespace_labels_given_win_over_the_state_s(engine):
    class Labelled(ClusterSnapshot):
        def namespace_labels(self, namespace: str) -> dict[str, str]:
            return {}  # the state does not allow exemptions here...

    class Allowed:
        def namespace_labels(self, namespace: str) -> dict[str, str]:
            return {"gpushare.io/exemptions": "allowed"}  # ...the labels the caller read do

    exempt = pod("p", core=33, namespace="research",
                 annotations={"gpushare.io/exempt": "GS001", "gpushare.io/exempt-reason": "vendor image"})
    verdict = engine.validate(engine.subject("Pod", exempt, namespace="research", state=Labelled(),
                                             namespaces=Allowed()))
    assert [f.rule for f in verdict.exempted] == ["GS001"] and "GS001" not in {f.rule for f in verdict.findings}


def test_a_custom_workload_s_update_is_judged_on_its_replicas(engine):
    from tests.support.workload_cases import CASES

    case = next(c for c in CASES if c.file == "pytorchjob.yaml")
    verdict = engine.validate(engine.subject("PyTorchJob", case.with_mistake(), operation="UPDATE",
                                             old=case.manifest()))
    [finding] = verdict.findings
    assert (finding.rule, finding.severity) == ("GS003", "deny") and not finding.message.endswith(EXISTING)
    unchanged = case.with_mistake()
    relabelled = copy.deepcopy(unchanged)
    relabelled["metadata"]["labels"] = {"team": "a"}
    [kept] = engine.validate(engine.subject("PyTorchJob", relabelled, operation="UPDATE", old=unchanged)).findings
    assert kept.severity == "warn" and kept.message.endswith(EXISTING)


def test_a_finding_s_brief_is_named_by_its_rule_and_absent_when_the_rule_gives_none(engine, settings):
    [plain] = judge(engine, pod(core=33)).findings
    assert plain.brief == ""
    state = state_of(settings, [node(mode="cgpu", cards=1, card_gib=15)], [])
    [capacity] = judge(engine, pod(mem=20), state=state).findings
    assert capacity.rule == "GC001" and capacity.brief.startswith("GC001: Pod default/p cannot run on any node")
    assert len(capacity.brief) < len(capacity.message)


def test_an_honoured_exemption_sets_its_mutations_aside_too():
    engine = Engine(Settings(exemptions={"annotation_namespaces": ["research"]}))
    exempt = pod("p", namespace="research",
                 annotations={"gpushare.io/exempt": "GM001", "gpushare.io/exempt-reason": "its own scheduler"})
    assert engine.mutate(engine.subject("Pod", exempt, namespace="research")).patch_ids == ["GM003"]
    assert engine.mutate(engine.subject("Pod", pod("q", namespace="research"), namespace="research")).patch_ids == [
        "GM001", "GM003"]


def test_a_node_update_without_state_still_runs_the_rules_after_the_stateful_one(engine):
    from tests.support.cluster_objects import with_mode

    old = node(mode="cgpu")
    verdict = engine.validate(engine.subject("Node", with_mode(old, "mps"), operation="UPDATE", old=old))
    assert [f.rule for f in verdict.findings] == ["GN005", "GN008"]  # GN008 after GN006, which needs the state


def test_the_user_reviewed_is_the_one_the_rules_see(engine):
    from policies.model.subject import UserInfo
    from tests.support.cluster_objects import with_mode

    old = node(mode="cgpu")
    verdict = engine.validate(engine.subject("Node", with_mode(old, "core_mem"), operation="UPDATE", old=old,
                                             user=UserInfo("alice", ("system:authenticated",))))
    [finding] = [f for f in verdict.findings if f.rule == "GN005"]
    assert " -> core_mem by alice relabels an existing node" in finding.message


def test_two_exemptions_covering_a_pod_are_both_named():
    engine = Engine(Settings(exemptions={
        "annotation_namespaces": ["research"],
        "grants": [{"name": "legacy", "namespace": "research", "names": "p*", "rules": ["GS001"],
                    "reason": "old images", "expires": "2099-01-01"}]}))
    exempt = pod("p", core=33, namespace="research",
                 annotations={"gpushare.io/exempt": "GS001", "gpushare.io/exempt-reason": "vendor image"})
    verdict = engine.validate(engine.subject("Pod", exempt, namespace="research"))
    assert verdict.exempted_by == ["annotation", "grant:legacy"]
    assert verdict.exemption_reason == "annotation: vendor image; grant:legacy: old images"


def test_a_configuration_read_from_yaml_is_applied_word_for_word():
    import yaml

    settings = Settings(**yaml.safe_load("""
rules: {GS002: {severity: deny}, GS001: {severity: warn}}
budget: {max_containers: 1, when_exceeded: admit}
state: {when_unavailable: {placement: closed}}
"""))
    engine = Engine(settings)
    compute_only = pod(core=1)
    del compute_only["spec"]["containers"][0]["resources"]["limits"][MEM]
    verdict = judge(engine, compute_only)  # GS001 (not a multiple of 5) and GS002 (compute without memory)
    assert found(verdict) == [("GS001", "warn"), ("GS002", "deny")]
    assert not verdict.allowed and [f.rule for f in verdict.violations] == ["GS002"]
    assert [f.rule for f in verdict.warnings] == ["GS001"]
    same = copy.deepcopy(compute_only)
    same["metadata"]["labels"] = {"a": "b"}
    assert found(judge(engine, same, operation="UPDATE", old=compute_only)) == [("GS001", "warn"), ("GS002", "warn")]
    two = pod()
    two["spec"]["containers"].append({"name": "d", "image": "x"})
    assert found(judge(engine, two)) == [("budget", "warn")]
    stale = engine.validate(engine.subject("Binding", binding("p", NODE), namespace="default", state=Stale()))
    assert found(stale) == [("GB001", "deny")]


def test_a_review_s_kind_and_operation_as_the_api_server_sends_them(engine, settings):
    import json

    kind, create, update = json.loads('["Pod", "CREATE", "UPDATE"]')  # parsed, as from an AdmissionReview
    ledger = PlacementLedger()
    view = ledger.view(state_of(settings, [node(mode="core_mem")], []))
    assert engine.admit(engine.subject(kind, gpu_pod("fresh", core=25), namespace="default", state=view,
                                       operation=create), ledger).allowed
    assert view.has_pod("default", "fresh")
    old = pod(core=33)
    same = copy.deepcopy(old)
    same["metadata"]["labels"] = {"a": "b"}
    assert found(judge(engine, same, operation=update, old=old)) == [("GS001", "warn")]


def test_only_a_pod_created_is_recorded(engine, settings):
    ledger = PlacementLedger()
    view = ledger.view(state_of(settings, [node(mode="core_mem")], []))
    workload = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "sts", "namespace": "default"},
                "spec": {"template": {"spec": gpu_pod("x", core=25)["spec"]}}}
    assert engine.admit(engine.subject("StatefulSet", workload, namespace="default", state=view), ledger).allowed
    assert not view.has_pod("default", "sts")
    going = gpu_pod("going", core=25)
    engine.admit(engine.subject("Pod", going, namespace="default", state=view, operation="DELETE"), ledger)
    assert not view.has_pod("default", "going")
    bare = gpu_pod("bare", core=25)
    del bare["metadata"]["namespace"]
    assert engine.admit(engine.subject("Pod", bare, state=view), ledger).allowed  # a review without a namespace
    assert view.has_pod("default", "bare")


def test_an_update_leaves_an_existing_warning_as_it_was(engine):
    env = [{"name": "CGPU_DISABLE", "value": "true"}]
    old = pod(core=30)
    old["spec"]["containers"][0]["env"] = env
    new = pod(core=33)
    new["spec"]["containers"][0]["env"] = env
    verdict = judge(engine, new, operation="UPDATE", old=old)
    assert found(verdict) == [("GS001", "deny"), ("GS011", "warn")]
    assert not any(f.message.endswith(EXISTING) for f in verdict.findings)


def test_no_workload_admitted_is_recorded_as_a_pod(engine, settings):
    ledger = PlacementLedger()
    view = ledger.view(state_of(settings, [node(mode="core_mem")], []))
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job", "namespace": "default"},
           "spec": {"template": {"spec": gpu_pod("x", core=25)["spec"]}}}
    assert engine.admit(engine.subject("Job", job, namespace="default", state=view), ledger).allowed
    assert not view.has_pod("default", "job")


def test_a_pod_s_update_of_its_multi_gpu_label_is_judged(engine):
    old = pod(core=30)
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"aliyun.com/gpu-count": "abc"}  # only the label changed: judged, and new
    assert found(judge(engine, new, operation="UPDATE", old=old)) == [("GS009", "deny")]


def test_an_exemption_never_brings_back_a_disabled_mutation():
    engine = Engine(Settings(rules={"GM001": {"enabled": False}}, exemptions={"annotation_namespaces": ["research"]}))
    exempt = pod("p", namespace="research",
                 annotations={"gpushare.io/exempt": "GM001", "gpushare.io/exempt-reason": "its own scheduler"})
    assert engine.mutate(engine.subject("Pod", exempt, namespace="research")).patch_ids == ["GM003"]
