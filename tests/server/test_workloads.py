"""Custom workloads (training jobs, Ray, KServe, Argo, Volcano, LeaderWorkerSet): for every kind of
the table a sample from its project (tests/data/workloads), with a shared-GPU mistake in a replica
after the first, denied by `gpushare check` and by the real server's /validate naming the replica's
path; corrected, admitted; without GPU requests, nothing at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.model.resources import render_path
from policies.model.workloads import BUILT_IN, group_of
from tests.support.check_helpers import check_json, run_gpushare
from tests.support.helpers import admission_review
from tests.support.workload_cases import CASES, MEM, Case

pytestmark = pytest.mark.processes

IDS = [c.file.removesuffix(".yaml") for c in CASES]
# The tables' own scheduler: the samples that keep it get GW001's warning, never a denial.
VOLCANO = {"volcanojob.yaml", "volcanocronjob.yaml"}


def test_every_kind_of_the_table_has_a_sample():
    assert sorted(c.kind.name for c in CASES) == sorted(k.name for k in BUILT_IN)


VARIANTS = ("broken", "sample", "cpu")


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """One `gpushare check` over every sample in three variants (one process, not 63): the findings of
    each file, by (variant, sample)."""
    root = tmp_path_factory.mktemp("workloads")
    for case in CASES:
        for variant, obj in zip(VARIANTS, (case.with_mistake(), case.manifest(), case.without_gpus()), strict=True):
            (root / f"{variant}-{case.file}").write_text(yaml.safe_dump(obj, sort_keys=False))
    code, report = check_json(root)
    assert code == 1 and report["summary"]["skipped"] == 0, report["summary"]
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for finding in report["findings"]:
        variant, _, file = Path(finding["file"]).name.partition("-")
        found.setdefault((variant, file), []).append(finding)
    return found


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_check_denies_the_mistake_naming_the_replica_passes_the_sample_and_says_nothing_without_gpus(case, checked,
                                                                                                     tmp_path):
    [denial] = [f for f in checked.get(("broken", case.file), []) if f["severity"] == "deny"]
    where = render_path(case.broken)
    assert denial["rule"] == "GS003"
    assert f" {where}" in denial["message"] and "aliyun.com/gpu-mem=2Gi looks like bytes" in denial["message"], denial
    assert denial["field"] == render_path((*case.resources, "limits", MEM))
    # A cluster-scoped kind (ClusterTrainingRuntime, ClusterWorkflowTemplate) has no namespace.
    assert (denial["object"]["namespace"] == "") is (not case.kind.namespaced)
    lines = Path(denial["file"]).read_text().splitlines()
    assert lines[denial["line"] - 1].strip().startswith(f"{MEM}: 2Gi")  # the offending line itself
    assert [f["rule"] for f in checked.get(("sample", case.file), [])] == (["GW001"] if case.file in VOLCANO else [])
    assert checked.get(("cpu", case.file), []) == []


def test_check_fails_on_a_mistake_and_passes_the_samples(tmp_path):
    [case] = [c for c in CASES if c.file == "raycluster.yaml"]
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(case.with_mistake()))
    assert check_json(broken)[0] == 1
    code, report = check_json(*(c.path for c in CASES))
    assert code == 0 and report["summary"]["denials"] == 0 and report["summary"]["objects"] == len(CASES)


def review(case: Case, obj: dict[str, Any]) -> dict[str, Any]:
    group, _, version = obj["apiVersion"].rpartition("/")
    return admission_review(obj, kind=obj["kind"], group=group, version=version, resource=case.kind.plural,
                            namespace="" if not case.kind.namespaced else None)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_server_denies_the_mistake_naming_the_replica_and_admits_the_rest(case, server, session):
    def answer(obj: dict[str, Any]) -> dict[str, Any]:
        reply = session.post(server.url + "/validate", json=review(case, obj), timeout=10)
        assert reply.status_code == 200, reply.text
        return reply.json()["response"]

    denied = answer(case.with_mistake())
    assert denied["allowed"] is False
    assert f"GS003: {case.kind.kind}" in denied["status"]["message"] or \
        f"GS003: {case.kind.name}" in denied["status"]["message"]
    assert f" {render_path(case.broken)}" in denied["status"]["message"]
    admitted = answer(case.manifest())
    assert admitted["allowed"] is True
    assert [w.split(":")[0] for w in admitted.get("warnings", [])] == (["GW001"] if case.file in VOLCANO else [])
    quiet = answer(case.without_gpus())
    assert quiet["allowed"] is True and "warnings" not in quiet


def test_a_volcano_job_scheduled_by_volcano_is_warned_naming_the_scheduler_and_where_it_comes_from(engine):
    [case] = [c for c in CASES if c.file == "volcanojob.yaml"]
    obj = case.manifest()

    def findings() -> list:
        return engine.validate(engine.subject(obj["kind"], obj, namespace="default")).findings

    [warning] = findings()
    assert warning.message.startswith("GW001: Job.batch.volcano.sh default/tensorflow-dist-mnist "
                                      "spec.tasks[1].template: its pods ask for aliyun.com/gpu-mem and will be "
                                      "scheduled by volcano (spec.schedulerName)")
    assert "set schedulerName: ack-co-scheduler" in warning.message
    assert warning.path == ("spec", "schedulerName")
    del obj["spec"]["schedulerName"]  # Volcano's admission sets it: its own name, volcano by default
    [warning] = findings()
    assert "scheduled by volcano (the default of spec.schedulerName in a Job.batch.volcano.sh)" in warning.message
    # A scheduler the template names is its own choice, as a Pod's is (GM001 keeps it too).
    obj["spec"]["tasks"][1]["template"]["spec"]["schedulerName"] = "volcano"
    assert findings() == []
    obj["spec"]["tasks"][1]["template"]["spec"].pop("schedulerName")
    obj["spec"]["schedulerName"] = "ack-co-scheduler"
    assert findings() == []


def test_a_batch_job_is_still_kubernetes_job_whatever_volcano_calls_its_own():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "default"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"limits": {MEM: "2Gi"}}}]}}}}
    code, report = check_json("-", stdin=json.dumps(job))
    assert code == 1 and report["findings"][0]["message"].startswith('GS003: Job default/j container "c"')


POD_SPEC_PATCH = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: pod-spec-patch-
spec:
  entrypoint: hello-world
  arguments:
    parameters:
      - name: gpu-mem
        value: "4"
  templates:
  - name: hello-world
    podSpecPatch: '{"containers":[{"name":"main", "resources":{"limits":{"aliyun.com/gpu-mem": "{{inputs.mem}}"}}}]}'
    container:
      image: busybox
      command: [echo]
      args: ["hello world"]
"""


def test_a_pod_spec_patch_that_writes_gpu_requests_is_named_unjudgeable(tmp_path):
    # argoproj/argo-workflows examples/pod-spec-patch.yaml (release v4.1.2), its cpu limit made a gpu-mem one.
    code, report = check_json("-", stdin=POD_SPEC_PATCH)
    assert code == 0
    [warning] = report["findings"]
    assert (warning["rule"], warning["field"], warning["line"]) == ("GW002", "spec.templates[0].podSpecPatch", 13)
    assert "mentions aliyun.com/gpu-mem" in warning["message"] and "cannot be checked here" in warning["message"]
    code, report = check_json("-", stdin=POD_SPEC_PATCH.replace("aliyun.com/gpu-mem", "cpu"))
    assert (code, report["findings"]) == (0, [])


# -- kinds of one's own, through the configuration ------------------------------------------------------

MY_JOB = {"apiVersion": "example.com/v1", "kind": "TrainingRun", "metadata": {"name": "run-1", "namespace": "ml"},
          "spec": {"roles": {"launcher": {"template": {"spec": {"containers": [{"name": "l", "image": "x"}]}}},
                             "trainer": {"template": {"spec": {"containers": [
                                 {"name": "t", "image": "x", "resources": {"limits": {MEM: "2Gi"}}}]}}}},
                   "sidecar": {"name": "s", "image": "x", "resources": {"limits": {MEM: 1}}}}}
MY_KINDS = {"workloads": {"kinds": [{"group": "example.com", "kind": "TrainingRun",
                                     "paths": ["spec.roles.*.template", {"path": "spec.sidecar", "holds": "container"},
                                               "spec.absent.template"]}]}}


def configured(tmp_path: Path, config: dict[str, Any], *objects: dict[str, Any]) -> tuple[Path, Path]:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    manifests = tmp_path / "objects.yaml"
    manifests.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return tmp_path / "config.yaml", manifests


def test_a_kind_of_ones_own_is_checked_through_the_configuration(tmp_path):
    config, manifests = configured(tmp_path, MY_KINDS, MY_JOB)
    code, report = check_json("--config", config, manifests)
    assert code == 1
    [denial] = report["findings"]
    assert denial["message"].startswith('GS003: TrainingRun ml/run-1 spec.roles.trainer.template.spec.containers[0] '
                                        '(container "t"): aliyun.com/gpu-mem=2Gi looks like bytes')
    # Without the configuration the kind is skipped, and the summary says how to have it checked.
    done = run_gpushare("check", manifests, cwd=tmp_path)
    assert done.returncode == 0
    assert ("(and 1 object of kinds no rule checks: TrainingRun.example.com; a custom resource that holds pod "
            "templates is checked once listed under workloads.kinds in the config (docs/workloads.md))") in done.stdout


def test_a_configured_path_that_holds_something_else_is_a_configuration_error(tmp_path):
    wrong = {"workloads": {"kinds": [{"group": "example.com", "kind": "TrainingRun",
                                      "paths": ["spec.roles.*.template", "spec.sidecar"]}]}}
    config, manifests = configured(tmp_path, wrong, MY_JOB)
    done = run_gpushare("check", "--config", config, manifests)
    assert done.returncode == 2, done.stdout
    line = manifests.read_text().splitlines().index("  sidecar:") + 1
    assert (f"{manifests}:{line}: TrainingRun: configuration workloads.kinds[0] (TrainingRun.example.com) path "
            "spec.sidecar (holds: template): spec.sidecar has image, name, resources, so it is not a pod template "
            "(metadata and spec); fix the path or what it holds") in done.stderr
    scalar = {"workloads": {"kinds": [{"group": "example.com", "kind": "TrainingRun",
                                       "paths": ["spec.roles.*.template.spec.containers"]}]}}
    config, manifests = configured(tmp_path, scalar, MY_JOB)
    done = run_gpushare("check", "--config", config, manifests)
    assert done.returncode == 2 and "is a list, not a pod template (metadata and spec)" in done.stderr


@pytest.mark.parametrize(("paths", "says"), [
    (["spec..template"], "'spec..template': '(empty)' is not a field name"),
    (["*.template"], "a path starts with a field name, not *"),
    ([{"path": "spec.x", "holds": "pod"}], "holds"),
])
def test_a_path_that_cannot_be_read_is_refused_when_the_configuration_is_loaded(paths, says, tmp_path):
    config, manifests = configured(tmp_path, {"workloads": {"kinds": [{"group": "example.com", "kind": "TrainingRun",
                                                                      "paths": paths}]}}, MY_JOB)
    done = run_gpushare("check", "--config", config, manifests)
    assert done.returncode == 2 and says in done.stderr and "workloads" in done.stderr, done.stderr


def test_the_configuration_cannot_redefine_kubernetes_own_kinds(tmp_path):
    config, manifests = configured(tmp_path, {"workloads": {"kinds": [{"group": "batch", "kind": "Job",
                                                                      "paths": ["spec.template"]}]}}, MY_JOB)
    done = run_gpushare("check", "--config", config, manifests)
    assert done.returncode == 2 and "holds Kubernetes' own kinds" in done.stderr


def test_the_server_admits_an_object_whose_configured_path_is_wrong_saying_why_it_was_not_checked(tmp_path):
    from tests.support.helpers import gpushare_server, wait_until

    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"workloads": {"kinds": [
        {"group": "example.com", "kind": "TrainingRun", "paths": ["spec.sidecar", "spec.roles.*.template"]}]}}))
    with gpushare_server(tmp_path, "--config", str(tmp_path / "config.yaml")) as running, running.session() as http:
        body = admission_review(MY_JOB, group="example.com", resource="trainingruns")
        response = http.post(running.url + "/validate", json=body, timeout=10).json()["response"]
        said = "TrainingRun ml/run-1 was not checked: configuration workloads.kinds[0]"
        wait_until(lambda: said in running.log_path.read_text(), what="the warning in the server's log")
    assert response["allowed"] is True
    [warning] = response["warnings"]
    assert warning.startswith(f"gpushare: {said}")


def test_the_group_decides_between_a_kind_of_the_table_and_a_namesake(engine):
    other = {"apiVersion": "example.com/v1", "kind": "PyTorchJob", "metadata": {"name": "x"}, "spec": {}}
    assert not engine.handles("PyTorchJob", group_of(other))
    assert engine.handles("PyTorchJob", "kubeflow.org")


# ---- the rules that came with the counting model and the isolation rules judge custom workloads too ----

def _pytorchjob() -> dict[str, Any]:
    return yaml.safe_load((Path(__file__).parents[1] / "data" / "workloads" / "pytorchjob.yaml").read_text())


def test_a_worker_that_forges_what_the_device_plugin_sets_is_denied_naming_the_replica(tmp_path):
    job = _pytorchjob()
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["env"] = [{"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "40"}]
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    code, report = check_json(tmp_path / "job.yaml")
    assert code == 1
    (finding,) = [f for f in report["findings"] if f["rule"] == "GS010"]
    assert finding["message"].startswith(
        "GS010: PyTorchJob kubeflow/pytorch-simple spec.pytorchReplicaSpecs.Worker.template.spec.containers[0] "
        '(container "pytorch"): env ALIYUN_COM_GPU_MEM_DEV')
    assert finding["field"] == "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0]"


def test_a_replica_spread_over_cards_it_does_not_divide_and_memory_on_its_init_container_are_named(tmp_path):
    job = _pytorchjob()
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    template["metadata"] = {"labels": {"aliyun.com/gpu-count": "3"}}
    template["spec"]["initContainers"] = [{"name": "warm", "image": "busybox",
                                           "resources": {"limits": {MEM: 2}}}]
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    code, report = check_json(tmp_path / "job.yaml")
    assert code == 1
    by_rule = {f["rule"]: f for f in report["findings"]}
    assert by_rule["GS009"]["message"].startswith(
        "GS009: PyTorchJob kubeflow/pytorch-simple spec.pytorchReplicaSpecs.Worker.template.spec.containers[0] "
        '(container "pytorch"): aliyun.com/gpu-mem=4 over 3 cards')
    assert by_rule["GS008"]["message"].startswith(
        "GS008: PyTorchJob kubeflow/pytorch-simple spec.pytorchReplicaSpecs.Worker.template.spec.initContainers[0] "
        '(init container "warm"): aliyun.com/gpu-mem=2 holds no card')
    assert {f["rule"] for f in report["findings"]} & {"GS008", "GS009"} == {"GS008", "GS009"}
    assert not [f for f in report["findings"] if "Master" in f["message"]]  # the Master has no label
