"""GS001-GS006 on every kind the webhook handles, with the edge values."""

from __future__ import annotations

import pytest

from policies.admission.engine import Engine
from tests.support.manifests import ALL_KINDS, CORE, MEM, container, pod_spec, workload


def findings(engine: Engine, obj, operation: str = "CREATE"):
    verdict = engine.validate(engine.subject(obj["kind"], obj, operation=operation, namespace="default"))
    return verdict


def rule_ids(verdict) -> list[str]:
    return sorted(f.rule for f in verdict.findings)


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_valid_core_mem_request_passes_everywhere(engine, kind, operation):
    obj = workload(kind, pod_spec(container(limits={MEM: 2, CORE: 30})))
    verdict = findings(engine, obj, operation)
    assert verdict.allowed and verdict.findings == []


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_gs001_denies_33_percent_on_every_kind(engine, kind):
    obj = workload(kind, pod_spec(container("cuda-33", limits={MEM: 2, CORE: 33})), name="cuda-33")
    verdict = findings(engine, obj)
    assert not verdict.allowed
    assert [f.rule for f in verdict.violations] == ["GS001"]
    message = verdict.violations[0].message
    assert message == (f'GS001: {kind} default/cuda-33 container "cuda-33": aliyun.com/gpu-core.percentage=33 '
                       "is not a multiple of 5 in 5..100; use 30 or 35")


@pytest.mark.parametrize(
    ("value", "allowed", "hint"),
    [
        (0, False, "use 5"),
        (5, True, None),
        ("5", True, None),
        (100, True, None),
        (105, False, "use 100"),
        (-5, False, "use 5"),
        ("2500m", False, "use 5"),
        (97, False, "use 95 or 100"),
        ("abc", False, "use an integer multiple of 5"),
        (30.0, True, None),
        (12.5, False, "use 10 or 15"),
    ],
)
def test_gs001_edge_values(engine, value, allowed, hint):
    verdict = findings(engine, workload("Pod", pod_spec(container(limits={MEM: 1, CORE: value}))))
    gs001 = [f for f in verdict.findings if f.rule == "GS001"]
    assert (not gs001) == allowed
    if hint:
        assert hint in gs001[0].message
        assert f"aliyun.com/gpu-core.percentage={value}" in gs001[0].message


def test_gs001_path_points_at_the_value(engine):
    verdict = findings(engine, workload("CronJob", pod_spec(container(limits={MEM: 1, CORE: 33}))))
    assert verdict.violations[0].path_text == (
        'spec.jobTemplate.spec.template.spec.containers[0].resources.limits["aliyun.com/gpu-core.percentage"]')


def test_gs002_core_without_memory(engine):
    verdict = findings(engine, workload("Deployment", pod_spec(container("app", limits={CORE: 30}))))
    assert rule_ids(verdict) == ["GS002"]
    assert 'Deployment default/w container "app": aliyun.com/gpu-core.percentage=30 is requested without ' \
           "aliyun.com/gpu-mem" in verdict.violations[0].message
    assert "add limits.aliyun.com/gpu-mem" in verdict.violations[0].message


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("2Gi", "looks like bytes, but the resource counts GiB; use 2"),
        ("2048Mi", "use 2"),
        ("2G", "use 2"),
        (0, "use a whole number of GiB, 1 or more"),
        (-1, "use a whole number of GiB, 1 or more"),
        ("2500m", "use 3"),
        (1.5, "use 2"),
        ("many", "use a whole number of GiB"),
    ],
)
def test_gs003_memory_must_be_whole_gib(engine, value, hint):
    verdict = findings(engine, workload("StatefulSet", pod_spec(container(limits={MEM: value}))))
    gs003 = [f for f in verdict.violations if f.rule == "GS003"]
    assert len(gs003) == 1, verdict.findings
    assert hint in gs003[0].message
    assert f"aliyun.com/gpu-mem={value}" in gs003[0].message


@pytest.mark.parametrize("value", [1, "1", "4", 60])
def test_gs003_accepts_whole_gib(engine, value):
    assert findings(engine, workload("Pod", pod_spec(container(limits={MEM: value})))).allowed


def test_gs004_request_without_limit(engine):
    verdict = findings(engine, workload("Job", pod_spec(container(requests={MEM: 2}))))
    assert rule_ids(verdict) == ["GS004"]
    assert "requests.aliyun.com/gpu-mem=2 has no limit; set limits.aliyun.com/gpu-mem: 2" in \
        verdict.violations[0].message


def test_gs004_request_differs_from_limit(engine):
    verdict = findings(engine, workload("Job", pod_spec(container(limits={MEM: 4, CORE: 30},
                                                                   requests={MEM: 2, CORE: 30}))))
    assert rule_ids(verdict) == ["GS004"]
    assert "requests.aliyun.com/gpu-mem=2 differs from limits.aliyun.com/gpu-mem=4; set the request to 4" in \
        verdict.violations[0].message


def test_gs004_equal_quantities_in_different_spelling_pass(engine):
    verdict = findings(engine, workload("Pod", pod_spec(container(limits={MEM: 4, CORE: "30"},
                                                                   requests={MEM: "4", CORE: 30}))))
    assert verdict.allowed


def test_missing_limits_with_only_limits_is_fine(engine):
    # Limits alone are normal for extended resources: the API server copies them to requests.
    verdict = findings(engine, workload("Pod", pod_spec(container(limits={MEM: 3}))))
    assert verdict.allowed


def test_gs005_mixing_job_types_in_one_pod(engine):
    spec = pod_spec(container("core", limits={MEM: 2, CORE: 30}), container("mem", limits={MEM: 2}))
    verdict = findings(engine, workload("ReplicaSet", spec))
    assert rule_ids(verdict) == ["GS005"]
    assert 'mixes mem-only containers ("mem") with core+mem containers ("core")' in verdict.violations[0].message


def test_gs005_counts_init_containers(engine):
    spec = pod_spec(container("main", limits={MEM: 2, CORE: 30}),
                    init=[container("warmup", limits={MEM: 1})])
    verdict = findings(engine, workload("Job", spec))
    assert rule_ids(verdict) == ["GS005", "GS008"]  # GS008: an init container's gpu-mem holds no card


def test_init_container_values_are_checked(engine):
    spec = pod_spec(container("main"), init=[container("setup", limits={MEM: 1, CORE: 7})])
    verdict = findings(engine, workload("DaemonSet", spec))
    assert rule_ids(verdict) == ["GS001", "GS008"]
    assert 'DaemonSet default/w init container "setup"' in verdict.violations[0].message


def test_gs006_exclusive_and_shared_in_one_container(engine):
    verdict = findings(engine, workload("Pod", pod_spec(container("x", limits={MEM: 2, "nvidia.com/gpu": 1}))))
    assert rule_ids(verdict) == ["GS006"]
    assert "requests nvidia.com/gpu and aliyun.com/gpu-mem together" in verdict.violations[0].message


def test_gs006_exclusive_and_shared_across_containers(engine):
    spec = pod_spec(container("a", limits={"nvidia.com/gpu": 1}), container("b", limits={MEM: 2}))
    verdict = findings(engine, workload("Pod", spec))
    assert rule_ids(verdict) == ["GS006"]
    assert 'whole GPUs ("a") and containers with shared GPU ("b")' in verdict.violations[0].message


def test_pods_without_gpu_are_untouched(engine):
    obj = workload("Deployment", pod_spec(container(limits={"cpu": "2", "memory": "1Gi"})))
    assert findings(engine, obj).findings == []


def test_generate_name_is_used_when_name_is_missing(engine):
    obj = workload("Pod", pod_spec(container("c", limits={MEM: 2, CORE: 33})))
    del obj["metadata"]["name"]
    obj["metadata"]["generateName"] = "cuda-sample-"
    assert "Pod default/cuda-sample-* container" in findings(engine, obj).violations[0].message


def test_config_can_disable_a_rule_and_change_severity():
    from webhook.settings import Settings

    engine = Engine(Settings(rules={"GS001": {"severity": "warn"}, "GS003": {"enabled": False}}))
    obj = workload("Pod", pod_spec(container(limits={MEM: "2Gi", CORE: 33})))
    verdict = findings(engine, obj)
    assert verdict.allowed
    assert [f.rule for f in verdict.warnings] == ["GS001"]


def test_config_with_an_unknown_rule_is_refused():
    from webhook.settings import Settings

    with pytest.raises(ValueError, match="GS999"):
        Engine(Settings(rules={"GS999": {"enabled": False}}))


def test_shape_errors_name_the_field(engine):
    from policies.model.resources import ShapeError

    obj = workload("Job", pod_spec(container()))
    obj["spec"]["template"]["spec"]["containers"] = {"not": "a list"}
    with pytest.raises(ShapeError, match=r"spec\.template\.spec\.containers: must be a list"):
        findings(engine, obj)


def _pytorch_job(master: dict, worker: dict) -> dict:
    """A PyTorchJob (kubeflow.org/v1) whose Master and Worker replicas are pods of their own."""
    def replica(limits: dict) -> dict:
        return {"replicas": 1, "template": {"spec": {"containers": [container("pytorch", limits=limits)]}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "job", "namespace": "default"},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(master), "Worker": replica(worker)}}}


def test_gs005_and_gs006_judge_each_pod_a_custom_workload_makes_on_its_own(engine):
    # Each replica is a pod of its own, scheduled on its own node: what one pod asks does not mix with another's.
    assert findings(engine, _pytorch_job({MEM: 4}, {MEM: 4, CORE: 30})).findings == []
    assert findings(engine, _pytorch_job({MEM: 4}, {"nvidia.com/gpu": 1})).findings == []
    job = _pytorch_job({MEM: 4}, {MEM: 4, CORE: 30})
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        container("side", limits={MEM: 2}))
    [mixed] = findings(engine, job).findings
    assert mixed.message == (
        "GS005: PyTorchJob default/job spec.pytorchReplicaSpecs.Worker.template mixes mem-only containers (\"side\") "
        "with core+mem containers (\"pytorch\"); give every GPU container aliyun.com/gpu-core.percentage or none of "
        "them")
    assert mixed.path_text == "spec.pytorchReplicaSpecs.Worker.template.spec.containers[1]"


def test_gs007_names_the_container_of_a_custom_workload_by_its_path(engine):
    [miss] = findings(engine, _pytorch_job({MEM: 4}, {"aliyun.com/gpu-memory": 4})).findings
    worker = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]"
    assert miss.message == (
        f'GS007: PyTorchJob default/job {worker} (container "pytorch"): limits.aliyun.com/gpu-memory is not a resource '
        "any node offers, so the pod would stay Pending forever; did you mean aliyun.com/gpu-mem? (accepted: "
        "aliyun.com/gpu-mem, aliyun.com/gpu-core.percentage; a real resource of that name can be listed in "
        "near_miss.allowed)")
    assert miss.path_text == f'{worker}.resources.limits["aliyun.com/gpu-memory"]'


def test_gs003_reads_the_multi_gpu_label_of_each_replica_of_a_custom_workload(engine):
    # aliyun.com/gpu-count on a replica's template: its gpu-mem is spread over that many cards (ACK "Use cGPU to
    # achieve GPU sharing based on multiple GPUs"), 1000 GiB on each of 2 cards here
    job = _pytorch_job({MEM: 4}, {MEM: 2000})
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {"labels": {"aliyun.com/gpu-count": "2"}}
    assert findings(engine, job).findings == []
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
    assert rule_ids(findings(engine, job)) == ["GS003"]


def test_gs007_honours_the_configured_real_resources():
    from webhook.settings import Settings

    obj = workload("Pod", pod_spec(container("c", limits={"aliyun.com/gpu-memory": 4})))
    configured = Engine(Settings(near_miss={"allowed": ["aliyun.com/gpu-memory"]}))
    assert findings(configured, obj).findings == []


def test_gs007_names_a_configured_resources_field_by_its_path():
    # a custom resource that holds a ResourceRequirements for the pods it makes (workloads.kinds, holds: resources)
    from webhook.settings import Settings

    configured = Engine(Settings(workloads={"kinds": [{"group": "example.com", "kind": "TrainingRun", "paths": [
        {"path": "spec.launcher.resources", "holds": "resources"}]}]}))
    obj = {"apiVersion": "example.com/v1", "kind": "TrainingRun", "metadata": {"name": "run-1", "namespace": "ml"},
           "spec": {"launcher": {"resources": {"limits": {"aliyun.com/gpu-memory": 2}}}}}
    [miss] = configured.validate(configured.subject("TrainingRun", obj)).findings
    assert miss.message == (
        "GS007: TrainingRun ml/run-1 spec.launcher.resources: limits.aliyun.com/gpu-memory is not a resource any node "
        "offers, so the pod would stay Pending forever; did you mean aliyun.com/gpu-mem? (accepted: "
        "aliyun.com/gpu-mem, aliyun.com/gpu-core.percentage; a real resource of that name can be listed in "
        "near_miss.allowed)")
    assert miss.path_text == 'spec.launcher.resources.limits["aliyun.com/gpu-memory"]'


def test_gs001_suggests_the_bound_for_a_value_past_decimal_precision(engine):
    [finding] = findings(engine, workload("Pod", pod_spec(container("c", limits={MEM: 2, CORE: "1e30"})))).findings
    assert finding.message == ('GS001: Pod default/w container "c": aliyun.com/gpu-core.percentage=1e30 is not a '
                               "multiple of 5 in 5..100; use 100")


def test_an_object_gs007_refuses_is_sent_to_the_webhook(settings):
    from policies.rules.base import REGISTRY
    from policies.rules.relevance import resolve

    obj = workload("Pod", pod_spec(container("c", limits={"aliyun.com/gpu-memory": 4})))
    assert resolve([REGISTRY["GS007"].relevance], settings).sends("Pod", obj, settings)
