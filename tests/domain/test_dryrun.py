"""The dry run in-process (what `POST /dry-run` and `gpushare score` print): each object's verdict, its
patch and mutated form, the pod a workload's template creates with the webhook's patch on it, the
ranking, and the placement judged on a named or pinned node."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from policies.admission.dryrun import APPLIED_TO_EACH_POD, APPLIED_TO_OPERATOR_PODS, DryRun, template_pod
from policies.admission.engine import Engine
from policies.scoring.scoring import Scorer, ranking_entry
from tests.support.cluster_builders import gpu_node, snapshot
from tests.support.helpers import DATA
from tests.support.workload_cases import CASES
from webhook.settings import Settings

CORE_MEM_NODE = "cn-beijing.192.168.1.10"  # demo: core_mem, 4 x 15 GiB, runs a 2 GiB + 30 % job
CGPU_NODE = "cn-hangzhou.192.168.2.20"  # demo: cgpu, 2 x 31 GiB, spread
SHARE_NODE = "cn-zhangjiakou.192.168.66.139"  # demo: share, 1 x 15 GiB Tesla-T4, 3 GiB used
TOPOLOGY_NODE = "cn-shanghai.192.168.3.30"  # demo: topology, 8 x A100
SEED_JOB = yaml.safe_load((DATA / "seeds" / "000-cuda-sample.yaml").read_text())  # 2 GiB + 30 %
CASE = {c.file: c for c in CASES}
SCHEDULER_PATCH = {"op": "add", "path": "/spec/schedulerName", "value": "ack-co-scheduler"}


@pytest.fixture
def dry(engine: Engine) -> DryRun:
    return DryRun(engine, Scorer(engine.names))


def pod(name: str = "p", mem: int | None = 4, core: int | None = None, **spec: Any) -> dict[str, Any]:
    limits = {k: v for k, v in (("aliyun.com/gpu-mem", mem), ("aliyun.com/gpu-core.percentage", core)) if v}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {**spec, "containers": [{"name": "c", "image": "cuda:12", "resources": {"limits": limits}}]}}


def deployment(kind: str = "Deployment") -> dict[str, Any]:
    template = {"metadata": {"name": "ignored", "labels": {"app": "serve"}}, "spec": pod()["spec"]}
    if kind == "CronJob":
        spec: dict[str, Any] = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
        api = "batch/v1"
    else:
        spec, api = {"replicas": 2, "template": template}, "apps/v1" if kind != "Job" else "batch/v1"
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "serve", "namespace": "ml"}, "spec": spec}


def test_a_job_is_ranked_and_its_pod_previewed_with_the_webhook_patch(dry, demo_state):
    report = dry.report("Job", copy.deepcopy(SEED_JOB), demo_state)
    verdict = report.verdict
    assert (verdict.kind, verdict.name, verdict.namespace, verdict.allowed) == ("Job", "cuda-sample", "default", True)
    assert verdict.findings == [] and verdict.patch == [] and report.mutated == SEED_JOB  # templates are not patched
    assert report.judged_node == "" and report.request is not None
    first, *others = report.ranking
    assert (first.node, first.fits, first.score, first.cards) == (CORE_MEM_NODE, True, round(100 * (4 / 15 + 0.6) / 2),
                                                                  [0])
    assert others and not any(s.fits for s in others)
    preview = report.pod_preview
    assert preview.applied == APPLIED_TO_EACH_POD and preview.path == ""
    meta = preview.pod["metadata"]
    assert meta["generateName"] == "cuda-sample-" and meta["namespace"] == "default" and "name" not in meta
    assert meta["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "cuda-sample",
                                        "controller": True}]
    assert preview.pod["spec"] == SEED_JOB["spec"]["template"]["spec"]
    assert preview.patch_ids == ["GM001", "GM003"] and preview.patch[0] == SCHEDULER_PATCH
    assert preview.mutated_pod["spec"]["schedulerName"] == "ack-co-scheduler"
    assert "schedulerName" not in preview.pod["spec"]  # the pod shown is the one the controller sends
    assert preview.mutated_template["spec"] == preview.mutated_pod["spec"]
    assert preview.mutated_template["metadata"] == SEED_JOB["spec"]["template"].get("metadata", {}) or \
        "metadata" not in SEED_JOB["spec"]["template"]
    assert report.pod_previews == []


@pytest.mark.parametrize(("kind", "owner"), [
    ("Deployment", ("apps/v1", "ReplicaSet")),  # a Deployment's pods are its ReplicaSets'
    ("CronJob", ("batch/v1", "Job")),  # a CronJob's its Jobs'
    ("Job", ("batch/v1", "Job")),
])
def test_the_preview_pod_is_owned_by_the_controller_that_creates_it(dry, demo_state, kind, owner):
    obj = deployment(kind)
    report = dry.report(kind, obj, demo_state, namespace="default")
    pod_ = report.pod_preview.pod
    assert pod_["metadata"] == {"labels": {"app": "serve"}, "namespace": "ml", "generateName": "serve-",
                                "ownerReferences": [{"apiVersion": owner[0], "kind": owner[1], "name": "serve",
                                                     "controller": True}]}
    assert report.pod_preview.mutated_template["metadata"] == {"name": "ignored", "labels": {"app": "serve"}}
    assert report.ranking[0].node == CGPU_NODE and report.ranking[0].fits  # 4 GiB: the spread V100 first


def test_a_template_without_a_pod_spec_makes_no_preview(dry, demo_state):
    obj = deployment()
    del obj["spec"]["template"]["spec"]
    assert template_pod("Deployment", obj, "ml") is None
    assert dry.report("Deployment", obj, None).pod_preview is None
    nameless = deployment()
    del nameless["metadata"]["name"]
    made, path = template_pod("Deployment", nameless, "ml")
    assert path == ("spec", "template")
    assert made["metadata"]["generateName"] == "replicaset-"
    assert made["metadata"]["ownerReferences"][0]["name"] == ""
    bare = deployment()
    bare["spec"]["template"]["metadata"] = "not a mapping"
    made, _ = template_pod("Deployment", bare, "ns")
    assert made["metadata"]["namespace"] == "ns" and "labels" not in made["metadata"]


def test_a_pod_gets_its_patch_its_mutated_form_and_no_ranking_without_state(dry):
    obj = pod("solo", mem=4)
    report = dry.report("Pod", obj, None, namespace="ml")
    assert report.verdict.namespace == "ml" and report.verdict.patch_ids == ["GM001", "GM003"]
    assert report.mutated["spec"]["schedulerName"] == "ack-co-scheduler"
    assert "schedulerName" not in obj["spec"]  # the object sent is not changed
    assert report.ranking is None and report.request.demand.gpus[0].mem == 4
    assert report.pod_preview is None and report.pod_previews == []


def test_an_object_no_rule_judges_is_passed_through(dry, demo_state):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
    report = dry.report("ConfigMap", config_map, demo_state)
    assert report.verdict.allowed and report.verdict.patch == [] and report.mutated is config_map
    assert report.request is None and report.ranking is None and report.pod_preview is None


def test_the_ranking_uses_the_mutated_pod(dry, demo_state):
    report = dry.report("Pod", pod(mem=4, core=30), demo_state)
    assert [s.node for s in report.ranking if s.fits] == [CORE_MEM_NODE]
    assert report.verdict.findings == [] and report.judged_node == ""


def test_a_named_node_that_does_not_fit_is_a_finding_naming_the_nodes_that_do(dry, demo_state):
    report = dry.report("Job", copy.deepcopy(SEED_JOB), demo_state, node=CGPU_NODE)
    assert report.judged_node == CGPU_NODE and not report.verdict.allowed
    [finding] = report.verdict.findings
    assert (finding.rule, finding.severity, finding.path) == ("GB002", "deny", ("spec", "template", "spec", "nodeName"))
    assert finding.message == (f"GB002: Job default/cuda-sample: node {CGPU_NODE} has ack.node.gpu.schedule=cgpu; "
                               f"core+mem pods need core_mem; nodes that fit: {CORE_MEM_NODE}")
    fine = dry.report("Job", copy.deepcopy(SEED_JOB), demo_state, node=CORE_MEM_NODE)
    assert fine.judged_node == CORE_MEM_NODE and fine.verdict.findings == []


def test_when_no_node_fits_the_finding_says_so(dry, demo_state):
    report = dry.report("Pod", pod("huge", mem=40), demo_state, node=SHARE_NODE)
    judged = [f for f in report.verdict.findings if f.path == ("spec", "nodeName")]  # besides GC001's
    assert [f.rule for f in judged] == ["GB004"]
    assert judged[0].message.endswith('needs 40; no node in the state fits')


def test_at_most_three_fitting_nodes_are_named(engine, settings):
    names = settings.names
    state = snapshot(*(gpu_node(f"n{i}", "cgpu", 1, 15) for i in range(5)), gpu_node("exclusive", "default"),
                     names=names)
    report = DryRun(engine, Scorer(names)).report("Pod", pod(mem=4), state, node="exclusive")
    [finding] = report.verdict.findings
    assert finding.message.endswith("; nodes that fit: n0, n1, n2")


def test_a_pod_pinned_by_node_name_is_judged_there_once(dry, demo_state):
    report = dry.report("Pod", pod("big", mem=13, nodeName=SHARE_NODE), demo_state)
    assert report.judged_node == SHARE_NODE and report.request.pinned_node == SHARE_NODE
    # The engine's GB004 already reported it: the dry run adds no second finding of the same rule.
    assert [f.rule for f in report.verdict.findings] == ["GB004"]
    assert report.verdict.findings[0].message.startswith(
        f'GB004: Pod default/big (container "c" aliyun.com/gpu-mem=13): node {SHARE_NODE}: container "c" fits no card')


def test_an_unknown_node_is_a_warning_instead_of_the_placement_rules_not_checked(dry, demo_state):
    report = dry.report("Pod", pod("elsewhere", mem=1, nodeName="node-the-state-lacks"), demo_state)
    assert report.verdict.allowed and report.judged_node == "node-the-state-lacks"
    [warning] = report.verdict.findings
    assert (warning.rule, warning.severity, warning.path) == ("state", "warn", ("spec", "nodeName"))
    assert warning.message == ("state: Pod default/elsewhere: node node-the-state-lacks is not in the cluster "
                               "state; its placement is not judged")
    named = dry.report("Job", copy.deepcopy(SEED_JOB), demo_state, node="nowhere")
    assert [f.rule for f in named.verdict.findings] == ["state"]


@pytest.mark.parametrize(("rules", "expected"), [
    ({}, [("GB002", "deny")]),
    ({"GB002": {"severity": "warn"}}, [("GB002", "warn")]),
    ({"GB002": {"enabled": False}}, []),
    ({"GB002": {"enabled": True}}, [("GB002", "deny")]),
])
def test_a_placement_finding_on_a_named_node_counts_as_configured(demo_state, rules, expected):
    engine = Engine(Settings(rules=rules))
    report = DryRun(engine, Scorer(engine.names)).report("Job", copy.deepcopy(SEED_JOB), demo_state, node=CGPU_NODE)
    assert [(f.rule, f.severity) for f in report.verdict.findings] == expected


def test_a_selector_mismatch_on_a_named_node_is_denied(dry, demo_state):
    obj = pod("picky", mem=2, nodeSelector={"aliyun.accelerator/nvidia_name": "Tesla-T4"})
    report = dry.report("Pod", obj, demo_state, node=CGPU_NODE)
    [finding] = report.verdict.findings
    assert (finding.rule, finding.severity) == ("NodeAffinity", "deny")
    assert finding.message.endswith(f"; nodes that fit: {SHARE_NODE}")


def test_a_custom_workload_shows_each_template_s_pod_and_patch(dry, demo_state):
    obj = CASE["pytorchjob.yaml"].manifest()
    report = dry.report("PyTorchJob", obj, demo_state)
    assert report.verdict.allowed and report.verdict.patch == [] and report.ranking is None
    assert report.request is None and report.pod_preview is None
    master, worker = report.pod_previews
    assert (master.path, worker.path) == ("spec.pytorchReplicaSpecs.Master.template",
                                          "spec.pytorchReplicaSpecs.Worker.template")
    assert master.applied == worker.applied == APPLIED_TO_OPERATOR_PODS
    assert master.pod["metadata"] == {"namespace": "kubeflow", "generateName": "pytorch-simple-", "ownerReferences": [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "pytorch-simple", "controller": True}]}
    assert master.patch_ids == ["GM001", "GM003"] and master.patch[0] == SCHEDULER_PATCH
    assert master.mutated_template == {"spec": master.mutated_pod["spec"]}
    assert master.mutated_template["spec"]["schedulerName"] == "ack-co-scheduler"


def test_an_inference_service_s_pods_are_made_of_its_components(dry):
    obj = CASE["inferenceservice.yaml"].manifest()
    # A component's labels and annotations are its pods'; minReplicas and the like are its own.
    obj["spec"]["predictor"].update(nodeSelector={"aliyun.accelerator/nvidia_name": "Tesla-T4"}, minReplicas=1,
                                    labels={"team": "a"}, annotations={"note": "n"}, logger={"mode": "all"})
    report = dry.report("InferenceService", obj, None, namespace="serving")
    predictor, transformer = report.pod_previews
    assert (predictor.path, transformer.path) == ("spec.predictor", "spec.transformer")
    assert predictor.mutated_template is None and transformer.mutated_template is None
    spec = predictor.pod["spec"]
    assert spec["nodeSelector"] == {"aliyun.accelerator/nvidia_name": "Tesla-T4"} and "minReplicas" not in spec
    [container] = spec["containers"]
    assert container == {"name": "kserve-container", "resources": {"limits": {"aliyun.com/gpu-mem": 4}}}
    meta = predictor.pod["metadata"]
    assert (meta["labels"], meta["annotations"], meta["namespace"]) == ({"team": "a"}, {"note": "n"}, "serving")
    assert "labels" not in transformer.pod["metadata"] and "annotations" not in transformer.pod["metadata"]
    assert transformer.pod["spec"]["containers"][0]["image"] == "kserve/image-transformer:latest"
    assert predictor.patch_ids == ["GM001", "GM003"]


def test_a_train_job_has_no_pod_of_its_own_to_show(dry):
    assert dry.report("TrainJob", CASE["trainjob.yaml"].manifest(), None).pod_previews == []


def test_a_mistaken_custom_workload_is_denied_on_its_template(dry):
    report = dry.report("PyTorchJob", CASE["pytorchjob.yaml"].with_mistake(), None)
    assert not report.verdict.allowed
    assert [f.path for f in report.verdict.violations] == [
        ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers", 0, "resources", "limits",
         "aliyun.com/gpu-mem")]
    assert [p.patch_ids for p in report.pod_previews] == [["GM001", "GM003"], ["GM001"]]


def test_the_state_is_not_changed_by_a_dry_run(dry, demo_state):
    first = dry.report("Pod", pod(mem=12), demo_state, node=SHARE_NODE)
    again = dry.report("Pod", pod(mem=12), demo_state, node=SHARE_NODE)
    assert first.verdict.findings == again.verdict.findings == []  # the 12 GiB were not taken by the first
    share = next(s for s in again.ranking if s.node == SHARE_NODE)
    assert ranking_entry(share, again.request.demand)["cards"][0]["gpu_mem_before"] == "3/15"


def test_a_location_that_is_no_whole_pod_is_skipped_and_the_next_shown(dry):
    obj = CASE["rayjob.yaml"].manifest()
    cluster = obj["spec"]["rayClusterSpec"]
    cluster["autoscalerOptions"] = {"image": "rayproject/ray:2.9.0", "resources": {"limits": {"cpu": "1"}}}
    obj["spec"]["submitterPodTemplate"] = {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "submit", "image": "rayproject/ray:2.9.0"}]}}
    report = dry.report("RayJob", obj, None)
    assert [p.path for p in report.pod_previews] == [
        "spec.rayClusterSpec.headGroupSpec.template", "spec.rayClusterSpec.workerGroupSpecs[0].template",
        "spec.submitterPodTemplate"]  # the autoscaler's options are a container of the head pod, not a pod
    assert report.pod_previews[-1].pod["spec"]["containers"][0]["name"] == "submit"


def test_a_disabled_rule_s_problem_is_left_out_and_the_others_kept(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 1, 15, labels={"gpushare.io/cpu-manager-policy": "static"}),
                     gpu_node("n2", "cgpu", 1, 31), names=names)
    engine = Engine(Settings(rules={"GB005": {"enabled": False}}))
    report = DryRun(engine, Scorer(names)).report("Pod", pod("big", mem=20), state, node="n1")
    assert [f.rule for f in report.verdict.findings] == ["GB004"]  # GB005 (first on n1) is disabled
    assert report.verdict.findings[0].message.endswith("needs 20; nodes that fit: n2")
    both = DryRun(Engine(Settings()), Scorer(names)).report("Pod", pod("big", mem=20), state, node="n1")
    assert [f.rule for f in both.verdict.findings] == ["GB005", "GB004"]
