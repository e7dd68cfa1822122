"""The audit in-process (what `gpushare audit`, the server's periodic audit and the dashboard report):
the invariants GA001-GA007 a running cluster can break, the admission rules on the objects as the state
records them, exemptions, configured severities, and custom workloads. The real CLI and server are in
tests/cli/test_audit.py and tests/state/test_isolation_audit.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from policies.audit.audit import AuditFinding, Auditor, audit_state, node_manifest, pod_manifest
from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from tests.support import audit_cluster, isolation_cluster
from tests.support.cluster_objects import gpu_pod, node
from tests.support.workload_cases import CASES
from webhook.settings import Settings
from webhook.state.snapshot import snapshot_from_objects

CORE, CGPU, PLAIN, EDGE = (audit_cluster.CORE_NODE, audit_cluster.CGPU_NODE, audit_cluster.PLAIN_NODE,
                           audit_cluster.EDGE_NODE)
AUDIT = {"expected_scheduler": "ack-co-scheduler", "unassigned_after_seconds": 600}
NOW = 1_700_000_000.0
CASE = {c.file: c for c in CASES}


def audited(objects: list[dict[str, Any]], now: float | None = None, workloads: list[dict[str, Any]] = (),
            **settings: Any) -> Any:
    config = Settings(**{"audit": AUDIT, **settings})
    return audit_state(snapshot_from_objects(objects, config.names), config, now if now is not None else time.time(),
                       workloads=workloads)


def found(result: Any) -> set[tuple[str, str]]:
    return {(f.rule, f.label) for f in result.findings}


def annotated(pod: dict[str, Any], **annotations: str) -> dict[str, Any]:
    pod["metadata"]["annotations"] = {k.replace("__", "/").replace("_dot_", "."): v for k, v in annotations.items()}
    return pod


def test_a_cluster_that_breaks_every_invariant_once_is_reported_word_for_word():
    result = audited(audit_cluster.objects())
    assert found(result) == audit_cluster.EXPECTED
    assert (result.nodes, result.pods, result.workloads, result.unjudged) == (4, 31, 0, [])
    by_rule = {f.rule: f for f in result.findings}
    assert by_rule["GA001"] == AuditFinding(
        "GA001", "deny", f"GA001: node {CORE} GPU0: 18 GiB of gpu-mem assigned on a 15 GiB card (default/big-a, "
        "default/big-b)", "Node", CORE, "", CORE)
    assert by_rule["GA002"].message == f"GA002: node {CGPU} GPU0: 21 pods on one card, the cGPU limit is 20"
    assert by_rule["GA003"].message == (
        f"GA003: node {CORE} runs mem-only pods (team-b/mem-only) and core+mem pods (default/big-a, default/big-b, "
        "default/core-33) together; move one kind to another node")
    assert by_rule["GA004"] == AuditFinding(
        "GA004", "deny", f"GA004: Pod default/stray runs on node {PLAIN}, but node {PLAIN} has "
        "ack.node.gpu.schedule=default; shared-GPU pods need one of cgpu, core_mem, mps, share", "Pod", "stray",
        "default", PLAIN)
    assert by_rule["GA005"].message == (f'GA005: Pod default/index-past container "cuda" is recorded on GPU5, but node '
                                        f"{EDGE} has 2 cards (GPU0..GPU1)")
    assert by_rule["GA006"].severity == "warn" and by_rule["GA006"].message.startswith(
        f"GA006: Pod default/never-assigned on node {EDGE} is still ALIYUN_COM_GPU_MEM_ASSIGNED=false ")
    assert by_rule["GA006"].message.endswith("s after its ALIYUN_COM_GPU_MEM_ASSUME_TIME (bound 600s): the device "
                                             "plugin has not assigned its card")
    assert by_rule["GA007"] == AuditFinding(
        "GA007", "warn", f"GA007: Pod default/foreign (on node {EDGE}) asks for aliyun.com/gpu-mem and has "
        "schedulerName default-scheduler; GPU pods are scheduled by ack-co-scheduler (audit.expected_scheduler)",
        "Pod", "foreign", "default", EDGE)
    assert by_rule["GS001"] == AuditFinding(
        "GS001", "deny", 'GS001: Pod default/core-33 container "cuda": aliyun.com/gpu-core.percentage=33 is not a '
        "multiple of 5 in 5..100; use 30 or 35", "Pod", "core-33", "default", CORE)
    assert result.counts() == {(f.rule, f.severity): 1 for f in result.findings}
    assert {node: sorted(f.rule for f in fs) for node, fs in result.by_node().items()} == {
        CORE: ["GA001", "GA003", "GS001"], CGPU: ["GA002"], PLAIN: ["GA004"], EDGE: ["GA005", "GA006", "GA007"]}


def test_each_pod_s_variables_are_reported_once_per_rule():
    result = audited(isolation_cluster.objects())
    isolation = {(f.rule, f.label): f.message for f in result.findings if f.rule in ("GS010", "GS011")}
    assert set(isolation) == isolation_cluster.EXPECTED
    assert isolation[("GS010", "Pod team-a/forged")] == isolation_cluster.FORGED_MESSAGE  # "(and 1 more in this pod)"
    assert isolation[("GS011", "Pod team-a/no-isolation")] == isolation_cluster.DISABLED_MESSAGE
    assert isolation[("GS011", "Pod monitoring/gpu-monitor")] == isolation_cluster.MONITOR_MESSAGE
    # The two replicas share one shape, judged once; each is named in its own finding.
    replicas = [f for f in result.findings if f.name.startswith("all-devices-")]
    assert [(f.name, f.namespace, f.node) for f in replicas] == [
        ("all-devices-0", "team-a", isolation_cluster.NODE), ("all-devices-1", "team-a", isolation_cluster.NODE)]
    assert all(f"Pod team-a/{f.name} " in f.message for f in replicas)


def test_three_variables_of_one_rule_in_one_pod_are_one_finding():
    pod = gpu_pod("forged", node_name="n1")
    pod["spec"]["containers"][0]["env"] = [{"name": n, "value": "1"} for n in (
        "ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_MEM_DEV", "ALIYUN_COM_GPU_MEM_IDX")] + [
        {"name": "CGPU_DISABLE", "value": "true"}]
    result = audited([node("n1", cards=2), pod])
    messages = {f.rule: f.message for f in result.findings}
    assert messages["GS010"].endswith("remove it (and 2 more in this pod)")
    assert "(and" not in messages["GS011"]  # GS011 found once: left as it is
    assert [f.rule for f in result.findings].count("GS010") == 1


@pytest.mark.parametrize(("rules", "expected"), [
    ({"GA001": {"severity": "warn"}, "GS001": {"severity": "warn"}}, {"GA001": "warn", "GS001": "warn"}),
    ({"GA001": {"enabled": False}, "GA002": {"enabled": False}, "GA003": {"enabled": True}}, {"GA003": "deny"}),
    ({"GS001": {"enabled": False}, "GA007": {"severity": "deny"}}, {"GA007": "deny"}),
])
def test_severities_are_as_configured(rules, expected):
    result = audited(audit_cluster.objects(), rules=rules)
    severities = {f.rule: f.severity for f in result.findings}
    for rule, severity in expected.items():
        assert severities[rule] == severity
    disabled = {rule for rule, override in rules.items() if override.get("enabled") is False}
    assert not disabled & set(severities)
    assert severities["GA004"] == "deny"  # the others as registered


def test_an_exempted_pod_is_reported_apart_with_its_reason():
    exempt = gpu_pod("core-33", mem=1, core=33, node_name="n1", namespace="research")
    exempt["metadata"]["annotations"] = {"gpushare.io/exempt": "GS001", "gpushare.io/exempt-reason": "vendor image"}
    plain = gpu_pod("also-33", mem=1, core=33, node_name="n1", namespace="research")
    result = audited([node("n1", mode="core_mem", cards=2), exempt, plain],
                     exemptions={"annotation_namespaces": ["research"]})
    [kept, apart] = sorted(result.findings, key=lambda f: f.exempted)
    assert (kept.name, kept.exempted, kept.exemption_reason) == ("also-33", False, "")
    assert (apart.name, apart.exempted, apart.exemption_reason) == ("core-33", True, "vendor image")
    assert apart.message.startswith('GS001: Pod research/core-33 container "cuda"') and apart.node == "n1"
    assert result.active == [kept] and result.counts() == {("GS001", "deny"): 1}
    assert result.by_node() == {"n1": [kept]}
    # Outside the namespaces allowed to exempt, the annotation is not honoured, and GE001 names the pod's own
    # namespace (the audit judged such pods in a placeholder namespace once, and honoured none).
    elsewhere = gpu_pod("core-33", mem=1, core=33, node_name="n1", namespace="other")
    elsewhere["metadata"]["annotations"] = dict(exempt["metadata"]["annotations"])
    result = audited([node("n1", mode="core_mem", cards=2), exempt, elsewhere],
                     exemptions={"annotation_namespaces": ["research"]})
    assert [(f.rule, f.namespace, f.exempted) for f in result.findings] == [
        ("GS001", "research", True), ("GE001", "other", False), ("GS001", "other", False)]
    assert result.findings[1].message.startswith("GE001: Pod other/core-33: gpushare.io/exempt=GS001 is not applied: "
                                                 "the labels of namespace other are not known")


def test_the_device_plugin_s_assignment_is_awaited_for_the_configured_time():
    def pod(name: str, assigned: str, stamp: str, *, names: str = "ALIYUN_COM_GPU_MEM") -> dict[str, Any]:
        return annotated(gpu_pod(name, node_name="n1"), **{f"{names}_ASSIGNED": assigned,
                                                           f"{names}_ASSUME_TIME": stamp})
    ns = int(NOW * 1e9)
    ack = annotated(gpu_pod("ack", node_name="n1"), **{"scheduler_dot_framework_dot_gpushare_dot_assigned": "false",
                                                       "scheduler_dot_framework_dot_gpushare_dot_assume-time":
                                                           str(ns - 601 * 10**9)})
    objects = [node("n1", cards=2),
               pod("old", "false", str(ns - 601 * 10**9)), pod("shouty", " FALSE ", str(ns - 700 * 10**9)),
               pod("fresh", "false", str(ns - 599 * 10**9)), pod("done", "true", str(ns - 10**12)),
               pod("no-stamp", "false", "soon"), ack]
    result = audited(objects, NOW, rules={"GA007": {"enabled": False}})
    messages = {f.name: f.message for f in result.findings if f.rule == "GA006"}
    assert set(messages) == {"old", "shouty", "ack"}
    assert messages["old"] == ("GA006: Pod default/old on node n1 is still ALIYUN_COM_GPU_MEM_ASSIGNED=false 601s "
                               "after its ALIYUN_COM_GPU_MEM_ASSUME_TIME (bound 600s): the device plugin has not "
                               "assigned its card")
    assert "scheduler.framework.gpushare.assigned=false 601s after its scheduler.framework.gpushare.assume-time" \
        in messages["ack"]
    longer = audited(objects, NOW, rules={"GA007": {"enabled": False}},
                     audit={**AUDIT, "unassigned_after_seconds": 650})
    assert {f.name for f in longer.findings if f.rule == "GA006"} == {"shouty"}


def test_the_first_assignment_annotation_present_decides():
    # Both names written: ACK's pair is read first; assigned there, nothing to say.
    pod = annotated(gpu_pod("both", node_name="n1"), ALIYUN_COM_GPU_MEM_ASSIGNED="false",
                    ALIYUN_COM_GPU_MEM_ASSUME_TIME="1",
                    **{"scheduler_dot_framework_dot_gpushare_dot_assigned": "true",
                       "scheduler_dot_framework_dot_gpushare_dot_assume-time": "1"})
    assert not [f for f in audited([node("n1", cards=2), pod], NOW).findings if f.rule == "GA006"]


def test_pods_of_another_scheduler_are_reported_only_where_one_is_expected():
    bound = gpu_pod("bound", node_name="n1")
    unbound = gpu_pod("unbound")
    elsewhere = gpu_pod("elsewhere", node_name="gone")  # bound to a node the state does not hold
    own = gpu_pod("own", node_name="n1")
    own["spec"]["schedulerName"] = "ack-co-scheduler"
    cpu = gpu_pod("cpu", mem=None, node_name="n1")
    done = gpu_pod("done", node_name="n1", phase="Succeeded")
    for pod in (bound, unbound, elsewhere, cpu, done):
        pod["spec"].pop("schedulerName", None)  # kube-scheduler's default-scheduler
    objects = [node("n1", cards=2), bound, unbound, elsewhere, own, cpu, done]
    result = audited(objects)
    messages = {f.name: f.message for f in result.findings if f.rule == "GA007"}
    assert set(messages) == {"bound", "unbound", "elsewhere"}
    assert messages["unbound"] == ("GA007: Pod default/unbound (not bound yet) asks for aliyun.com/gpu-mem and has "
                                   "schedulerName default-scheduler; GPU pods are scheduled by ack-co-scheduler "
                                   "(audit.expected_scheduler)")
    assert "(on node gone)" in messages["elsewhere"]
    assert result.pods == 5 and result.nodes == 1  # the finished pod counted; the state keeps no CPU pod
    assert not [f for f in audited(objects, audit={"expected_scheduler": ""}).findings if f.rule == "GA007"]


def test_card_indices_past_the_node_s_cards():
    one = annotated(gpu_pod("one", node_name="n1"), ALIYUN_COM_GPU_MEM_IDX="1")
    fine = annotated(gpu_pod("fine", node_name="n1"), ALIYUN_COM_GPU_MEM_IDX="0")
    result = audited([node("n1", cards=1), one, fine])
    [finding] = [f for f in result.findings if f.rule == "GA005"]
    assert finding.message == ('GA005: Pod default/one container "cuda" is recorded on GPU1, but node n1 has 1 card '
                               "(GPU0..GPU0)")


def test_compute_over_a_whole_card_and_pods_per_card_only_where_they_count():
    def on_card(name: str, **kw: Any) -> dict[str, Any]:
        return annotated(gpu_pod(name, node_name="n1", **kw),
                         scheduler_dot_framework_dot_gpushare_dot_allocation='{"0": {"0": 1}}')
    core = audited([node("n1", mode="core_mem", cards=1), on_card("a", mem=1, core=60), on_card("b", mem=1, core=50)])
    [over] = [f for f in core.findings if f.rule == "GA001"]
    assert over.message == "GA001: node n1 GPU0: 110% compute assigned on one card, at most 100% (default/a, default/b)"
    full = audited([node("n1", mode="core_mem", cards=1), on_card("a", mem=1, core=50), on_card("b", mem=1, core=50)])
    assert not [f for f in full.findings if f.rule == "GA001"]
    many = [on_card(f"p{i:02d}") for i in range(21)]
    assert [f.rule for f in audited([node("n1", mode="share", cards=1, card_gib=31), *many]).findings] == []
    assert [f.rule for f in audited([node("n1", mode="cgpu", cards=1, card_gib=31), *many[:20]]).findings] == []
    crowded = audited([node("n1", mode="cgpu", cards=1, card_gib=31), *many])
    assert [f.rule for f in crowded.findings] == ["GA002"]
    holders = audited([node("n1", mode="cgpu", cards=1, card_gib=2), *many[:3]])
    [finding] = holders.findings
    assert finding.message == ("GA001: node n1 GPU0: 3 GiB of gpu-mem assigned on a 2 GiB card (default/p00, "
                               "default/p01, default/p02)")
    assert audited([node("n1", mode="cgpu", cards=1, card_gib=2), *many[:4]]).findings[0].message.endswith(
        "(default/p00, default/p01, default/p02 and 1 more)")


def test_a_node_running_only_finished_or_cpu_pods_has_no_invariant_to_break():
    done = gpu_pod("done", node_name="n1", mem=40, phase="Failed")
    result = audited([node("n1", mode="default", cards=1), done, gpu_pod("cpu", mem=None, node_name="n1")])
    assert result.findings == [] and result.pods == 1  # the state keeps no CPU pod


def test_custom_workloads_are_judged_as_at_admission():
    broken = CASE["pytorchjob.yaml"].with_mistake()
    fine = CASE["raycluster.yaml"].manifest()
    malformed = CASE["pytorchjob.yaml"].manifest()
    malformed["metadata"]["name"] = "malformed"
    malformed["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"] = 5
    result = audited([node("n1", cards=2)], workloads=[broken, fine, malformed])
    assert result.workloads == 3
    [finding] = result.findings
    assert (finding.rule, finding.kind, finding.name, finding.namespace, finding.api_version, finding.node) == (
        "GS003", "PyTorchJob", "pytorch-simple", "kubeflow", "kubeflow.org/v1", "")
    assert finding.label == "PyTorchJob kubeflow/pytorch-simple"
    assert result.unjudged == ["PyTorchJob kubeflow/malformed could not be judged: "
                               "spec.pytorchReplicaSpecs.Master.template.spec.containers: must be a list of "
                               "containers, got int"]


def test_an_exempted_custom_workload_is_reported_apart():
    obj = CASE["tfjob.yaml"].with_mistake()
    obj["metadata"].update(namespace="research", annotations={"gpushare.io/exempt": "GS003",
                                                              "gpushare.io/exempt-reason": "vendor image"})
    result = audited([node("n1", cards=2)], workloads=[obj], exemptions={"annotation_namespaces": ["research"]})
    [finding] = [f for f in result.findings if f.rule == "GS003"]
    assert (finding.rule, finding.exempted, finding.exemption_reason, finding.kind) == (
        "GS003", True, "vendor image", "TFJob")
    assert finding.api_version == "kubeflow.org/v1" and finding not in result.active


def test_node_rules_are_judged_on_the_node_as_recorded():
    broken = node("n1", mode="cgpu", cards=2)
    broken["metadata"]["labels"]["ack.node.gpu.schedule"] = "cGPU"  # not a mode ACK knows
    result = audited([broken])
    assert {(f.rule, f.kind, f.name, f.node) for f in result.findings} == {("GN001", "Node", "n1", "n1")}
    exempt = node("n1", mode="cgpu", cards=2)
    exempt["metadata"]["labels"]["ack.node.gpu.schedule"] = "cGPU"
    exempt["metadata"]["annotations"] = {"gpushare.io/exempt": "GN001", "gpushare.io/exempt-reason": "migrating"}
    [apart] = audited([exempt], exemptions={"allow_on_nodes": True}).findings
    assert (apart.rule, apart.exempted, apart.exemption_reason, apart.label) == ("GN001", True, "migrating", "Node n1")


def test_node_manifest_keeps_what_the_node_rules_read(settings):
    obj = node("n1", cards=2)
    obj["status"]["addresses"] = [{"type": "InternalIP", "address": "10.0.0.9"}]
    info = node_from_manifest(obj, settings.names)
    rebuilt = node_manifest(info)
    assert rebuilt["metadata"] == {"name": "n1", "labels": obj["metadata"]["labels"],
                                   "annotations": obj["metadata"].get("annotations") or {}}
    assert rebuilt["spec"] == {"providerID": obj["spec"]["providerID"]}
    assert rebuilt["status"]["addresses"] == [{"type": "InternalIP", "address": "10.0.0.9"}]
    assert rebuilt["status"]["nodeInfo"] == {"kubeletVersion": "v1.28.3-aliyun.1",
                                             "containerRuntimeVersion": "containerd://1.6.20",
                                             "osImage": "Alibaba Cloud Linux 3.2104 U8 (OpenAnolis Edition)"}
    assert rebuilt["status"]["allocatable"]["aliyun.com/gpu-mem"] == "30"
    assert rebuilt["status"]["capacity"]["aliyun.com/gpu-mem"] == "30"
    plain = node("n2", provider_id=None)
    plain["status"].pop("addresses", None)
    bare = node_manifest(node_from_manifest(plain, settings.names))
    assert bare["spec"] == {} and "addresses" not in bare["status"]


def test_pod_manifest_rebuilds_what_the_pod_rules_read(settings):
    names = settings.names
    exempt = ("gpushare.io/exempt", "gpushare.io/exempt-reason")
    obj = gpu_pod("p", mem=4, core=30, node_name="n1")
    obj["metadata"]["labels"] = {"aliyun.com/gpu-count": "2"}
    obj["metadata"]["annotations"] = {"gpushare.io/exempt": "GS001", "other": "x"}
    obj["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {"aliyun.com/gpu-mem": 1}}}]
    built = pod_manifest(pod_from_manifest(obj, names), names, exempt)
    assert built["metadata"] == {"name": "gpushare-audit-pod", "namespace": "gpushare-audit-ns",
                                 "annotations": {"gpushare.io/exempt": "GS001"},
                                 "labels": {"aliyun.com/gpu-count": "2"}}
    assert built["spec"] == {
        "containers": [{"name": "cuda", "resources": {"limits": {"aliyun.com/gpu-mem": "4",
                                                                 "aliyun.com/gpu-core.percentage": "30"}}}],
        "initContainers": [{"name": "warm", "resources": {"limits": {"aliyun.com/gpu-mem": "1"}}}]}
    cpu_only = pod_manifest(pod_from_manifest(gpu_pod("c", mem=None), names), names, exempt)
    assert cpu_only["spec"] == {"containers": [{"name": "main"}]} and "labels" not in cpu_only["metadata"]


def test_pod_manifest_rebuilds_the_variables_a_pod_sets(settings):
    names = settings.names
    obj = gpu_pod("p", mem=2, node_name="n1")
    obj["spec"]["containers"][0]["env"] = [{"name": "CGPU_DISABLE", "value": "true"}]
    obj["spec"]["containers"].append({"name": "side", "image": "x",
                                      "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})
    obj["spec"]["nodeSelector"] = {"ack.node.gpu.schedule": "cgpu"}
    obj["spec"]["enableServiceLinks"] = False
    built = pod_manifest(pod_from_manifest(obj, names), names, ())
    containers = {c["name"]: c for c in built["spec"]["containers"]}
    assert set(containers) == {"cuda", "side"}  # the GPU container rebuilt once, with its env
    assert containers["cuda"]["env"] == [{"name": "CGPU_DISABLE", "value": "true"}]
    assert containers["side"]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert built["spec"]["nodeSelector"] == {"ack.node.gpu.schedule": "cgpu"}
    assert built["spec"]["enableServiceLinks"] is False


def test_the_auditor_judges_each_pod_shape_once_between_runs(settings):
    config = Settings(audit=AUDIT)
    auditor = Auditor(config)
    objects = audit_cluster.objects()
    state = snapshot_from_objects(objects, config.names)
    first = auditor.audit(state, time.time())
    again = auditor.audit(state, time.time())
    assert found(first) == found(again) == audit_cluster.EXPECTED
    assert auditor.engine.settings is config and auditor.names is config.names


def test_pods_alike_but_for_their_exemption_are_judged_apart():
    def exempt(name: str, ids: str, reason: str) -> dict[str, Any]:
        pod = gpu_pod(name, mem=1, core=33, node_name="n1", namespace="research")
        pod["metadata"]["annotations"] = {"gpushare.io/exempt": ids, "gpushare.io/exempt-reason": reason}
        return pod
    objects = [node("n1", mode="core_mem", cards=2), exempt("a", "GS001", "vendor image"),
               exempt("b", "GS003", "vendor image"), exempt("c", "GS001", "migrating")]
    result = audited(objects, exemptions={"annotation_namespaces": ["research"]})
    assert [(f.name, f.rule, f.exempted, f.exemption_reason) for f in result.findings] == [
        ("a", "GS001", True, "vendor image"), ("b", "GS001", False, ""), ("c", "GS001", True, "migrating")]


def test_the_first_card_index_past_the_node_s_cards_is_named():
    pod = annotated(gpu_pod("two", node_name="n1"),
                    scheduler_dot_framework_dot_gpushare_dot_allocation='{"0": {"5": 1, "7": 1}}')
    [finding] = [f for f in audited([node("n1", cards=2), pod]).findings if f.rule == "GA005"]
    assert "is recorded on GPU5, but node n1 has 2 cards (GPU0..GPU1)" in finding.message
    lone = annotated(gpu_pod("lone", node_name="n0"), ALIYUN_COM_GPU_MEM_IDX="0")
    [finding] = [f for f in audited([node("n0", cards=0, card_name=None), lone]).findings if f.rule == "GA005"]
    assert finding.message.endswith("is recorded on GPU0, but node n0 has 0 cards (GPU0..GPU0)")


def test_a_pod_s_other_findings_are_kept_whole_beside_its_variables():
    pod = gpu_pod("forged", mem=1, core=33, node_name="n1")
    pod["spec"]["containers"][0]["env"] = [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "15"},
                                           {"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "15"}]
    result = audited([node("n1", mode="core_mem", cards=2), pod])
    messages = {f.rule: f.message for f in result.findings if f.kind == "Pod"}
    assert set(messages) == {"GS001", "GS010"}
    assert messages["GS010"].endswith("(and 1 more in this pod)") and "more in this pod" not in messages["GS001"]


def on_card(name: str, node_name: str = "n1", card: int = 0, gib: int = 1, **kw: Any) -> dict[str, Any]:
    return annotated(gpu_pod(name, node_name=node_name, mem=gib, **kw),
                     scheduler_dot_framework_dot_gpushare_dot_allocation=f'{{"0": {{"{card}": {gib}}}}}')


def test_a_card_exactly_full_is_not_over_committed_and_seven_holders_are_three_and_four_more():
    assert audited([node("n1", mode="cgpu", cards=1, card_gib=2), on_card("a"), on_card("b")]).findings == []
    crowded = audited([node("n1", mode="cgpu", cards=1, card_gib=6), *(on_card(f"p{i}") for i in range(7))])
    [finding] = crowded.findings
    assert finding.message == ("GA001: node n1 GPU0: 7 GiB of gpu-mem assigned on a 6 GiB card (default/p0, "
                               "default/p1, default/p2 and 4 more)")


def test_a_card_index_past_three_cards():
    pod = annotated(gpu_pod("far", node_name="n1"), ALIYUN_COM_GPU_MEM_IDX="3")
    [finding] = [f for f in audited([node("n1", cards=3), pod]).findings if f.rule == "GA005"]
    assert finding.message.endswith("is recorded on GPU3, but node n1 has 3 cards (GPU0..GPU2)")


@pytest.mark.parametrize("mode", ["cgpu", "share"])
def test_compute_over_a_card_counts_only_on_core_mem_nodes(mode):
    import json

    objects = json.loads(json.dumps([node("n1", mode=mode, cards=1), on_card("a", core=60), on_card("b", core=50)]))
    assert not [f for f in audited(objects).findings if f.rule == "GA001"]
    core_mem = json.loads(json.dumps([node("n1", mode="core_mem", cards=1), on_card("a", core=60),
                                      on_card("b", core=50)]))  # as read from the API server's JSON
    assert [f.rule for f in audited(core_mem).findings if f.rule == "GA001"] == ["GA001"]


def test_the_assignment_wait_is_measured_to_the_fraction_and_its_bound_is_allowed():
    ns = int(NOW * 1e9)

    def pod(name: str, waited: float, assigned: str = "false") -> dict[str, Any]:
        return annotated(gpu_pod(name, node_name="n1"), ALIYUN_COM_GPU_MEM_ASSIGNED=assigned,
                         ALIYUN_COM_GPU_MEM_ASSUME_TIME=str(ns - int(waited * 1e9)))
    objects = [node("n1", cards=2), pod("exact", 600), pod("half", 599.5), pod("done", 900, assigned="done")]
    result = audited(objects, NOW, rules={"GA007": {"enabled": False}},
                     audit={**AUDIT, "unassigned_after_seconds": 599.8})
    assert {f.name for f in result.findings if f.rule == "GA006"} == {"exact"}
    at_bound = audited(objects, NOW, rules={"GA007": {"enabled": False}})
    assert {f.name for f in at_bound.findings if f.rule == "GA006"} == set()  # 600 s is not past a bound of 600


def test_any_other_scheduler_is_reported_whatever_its_name_sorts_as():
    pod = gpu_pod("early", node_name="n1")
    pod["spec"]["schedulerName"] = "abc-scheduler"
    [finding] = [f for f in audited([node("n1", cards=2), pod]).findings if f.rule == "GA007"]
    assert "has schedulerName abc-scheduler" in finding.message


def test_finished_pods_are_not_judged_and_init_containers_are():
    done = gpu_pod("done", mem=1, core=33, phase="Succeeded", node_name="gone")  # on a node the state lacks
    done["spec"]["schedulerName"] = "default-scheduler"
    warm = gpu_pod("warm", mem=None, node_name="n1")
    warm["spec"]["initContainers"] = [{"name": "init", "image": "x",
                                       "resources": {"limits": {"aliyun.com/gpu-mem": 1,
                                                                "aliyun.com/gpu-core.percentage": 33}}}]
    whole = gpu_pod("whole", mem=None, extra_limits={"aliyun.com/gpu": 1})
    whole["spec"]["schedulerName"] = "default-scheduler"
    result = audited([node("n1", mode="core_mem", cards=2), done, warm, whole])
    assert [(f.rule, f.name) for f in result.findings] == [("GS001", "warm"), ("GS008", "warm")]  # GS008: init GPU
