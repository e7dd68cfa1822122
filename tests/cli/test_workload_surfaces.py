"""Custom workloads on every other surface: /dry-run shows per pod template the pod it creates and the
patch the mutating webhook applies to it; `gpushare audit` judges the ones a snapshot or the live
cluster holds (the fake API server serving the vendored CRDs); `check --snapshot` runs GC001 per
replica; their exemption is read on their own metadata."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.check_helpers import check_json, run_gpushare
from tests.support.cluster_objects import node
from tests.support.fake_apiserver_writes import WritableApiServer
from tests.support.helpers import DATA
from tests.support.workload_cases import CASES, MEM

pytestmark = pytest.mark.processes

CASE = {c.file: c for c in CASES}
WORKLOAD_CRDS = DATA / "workload-crds"


def dry_run(server: Any, session: Any, obj: dict[str, Any]) -> dict[str, Any]:
    reply = session.post(server.url + "/dry-run", data=yaml.safe_dump(obj).encode(),
                         headers={"Content-Type": "application/yaml"}, timeout=15)
    assert reply.status_code == 200, reply.text
    [result] = reply.json()["results"]
    return result


def test_dry_run_shows_each_replica_s_pod_and_its_patch(server, session):
    case = CASE["pytorchjob.yaml"]
    result = dry_run(server, session, case.with_mistake())
    assert result["allowed"] is False and result["patch"] == []  # the PyTorchJob itself is not mutated
    assert [v["path"] for v in result["violations"]] == [
        'spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits["aliyun.com/gpu-mem"]']
    master, worker = result["podTemplates"]
    assert (master["path"], worker["path"]) == ("spec.pytorchReplicaSpecs.Master.template",
                                                "spec.pytorchReplicaSpecs.Worker.template")
    assert master["appliedTo"] == "applied to each pod its operator creates from this template"
    assert master["pod"]["metadata"]["ownerReferences"] == [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "pytorch-simple", "controller": True}]
    assert master["pod"]["metadata"]["namespace"] == "kubeflow"
    assert master["mutations"] == ["GM001", "GM003"]
    assert master["patch"] == [{"op": "add", "path": "/spec/schedulerName", "value": "ack-co-scheduler"},
                               {"op": "add", "path": "/spec/containers/0/env",
                                "value": [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "4"}]}]
    assert master["mutatedTemplate"]["spec"]["schedulerName"] == "ack-co-scheduler"
    # 2Gi is no whole number of GiB: GS003 denies it, and GM003 writes no env var from it.
    assert worker["mutations"] == ["GM001"]


def test_dry_run_of_an_inference_service_makes_its_pods_from_components(server, session):
    result = dry_run(server, session, CASE["inferenceservice.yaml"].manifest())
    assert result["allowed"] is True
    predictor, transformer = result["podTemplates"]
    assert (predictor["path"], transformer["path"]) == ("spec.predictor", "spec.transformer")
    [container] = predictor["pod"]["spec"]["containers"]
    assert container["name"] == "kserve-container" and container["resources"]["limits"] == {MEM: 4}
    assert "storageUri" not in container  # the model format's own fields are not the container's
    assert predictor["mutations"] == ["GM001", "GM003"] and "mutatedTemplate" not in predictor
    # A TrainJob's pods come from its runtime: no pod of its own to show.
    assert "podTemplates" not in dry_run(server, session, CASE["trainjob.yaml"].manifest())


def test_check_with_a_snapshot_runs_gc001_per_replica(tmp_path):
    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        node("cn-beijing.10.0.0.9", mode="cgpu", cards=1, card_gib=15)]}))
    case = CASE["raycluster.yaml"]
    obj = case.manifest()
    obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"][MEM] = 24
    target = tmp_path / "ray.yaml"
    target.write_text(yaml.safe_dump(obj))
    code, report = check_json("--snapshot", snapshot, target)
    assert code == 0
    [warning] = report["findings"]
    assert warning["rule"] == "GC001" and warning["message"].startswith(
        "GC001: RayCluster default/raycluster-complete spec.workerGroupSpecs[0].template cannot run on any node")
    assert warning["field"] == "spec.workerGroupSpecs[0].template.spec"


def test_an_exemption_on_a_workload_s_own_metadata_is_honoured_where_allowed(tmp_path):
    obj = CASE["tfjob.yaml"].with_mistake()
    obj["metadata"].update(namespace="research", annotations={"gpushare.io/exempt": "GS003",
                                                              "gpushare.io/exempt-reason": "vendor image"})
    target = tmp_path / "tfjob.yaml"
    target.write_text(yaml.safe_dump(obj))
    code, report = check_json(target)
    assert code == 1 and {f["rule"] for f in report["findings"]} == {"GE001", "GS003"}
    config = tmp_path / "config.yaml"
    config.write_text("exemptions: {annotation_namespaces: [research]}\n")
    code, report = check_json("--config", config, target)
    assert code == 0 and report["findings"] == []
    assert [f["exemptionReason"] for f in report["exempted"]] == ["vendor image"]


# -- audit ------------------------------------------------------------------------------------------------

def broken(file: str, namespace: str = "ml") -> dict[str, Any]:
    obj = CASE[file].with_mistake()
    if CASE[file].kind.namespaced:
        obj["metadata"]["namespace"] = namespace
    return obj


AUDITED = ["pytorchjob.yaml", "raycluster.yaml", "clustertrainingruntime.yaml"]


def audited(document: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(f["rule"], f["object"]["kind"], f["object"]["name"]) for f in document["findings"]}


EXPECTED = {("GS003", "PyTorchJob", "pytorch-simple"), ("GS003", "RayCluster", "raycluster-complete"),
            ("GS003", "ClusterTrainingRuntime", "torchtune-llama3.2-1b")}


def test_audit_of_a_snapshot_judges_the_custom_workloads_it_holds(tmp_path):
    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        node("cn-beijing.10.0.0.9", mode="cgpu", cards=1, card_gib=31), *(broken(f) for f in AUDITED),
        CASE["jobset.yaml"].manifest()]}))
    done = run_gpushare("audit", "--snapshot", snapshot, "--format", "json")
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    assert audited(document) == EXPECTED
    assert document["summary"]["objects"] == 1 + 0 + 4  # the node, no pods, four workloads


@pytest.fixture
def live(tmp_path: Path) -> Any:
    api = WritableApiServer().start()
    try:
        # The cluster serves the Training Operator's, KubeRay's and Trainer's CRDs, not the others.
        served = ("kubeflow.org_pytorchjobs.yaml", "ray.io_rayclusters.yaml",
                  "trainer.kubeflow.org_clustertrainingruntimes.yaml")
        api.install_crd(*(yaml.safe_load((WORKLOAD_CRDS / name).read_text()) for name in served))
        api.add(node("cn-beijing.10.0.0.9", mode="cgpu", cards=1, card_gib=31))
        for file in AUDITED:
            api.add(broken(file), resource=CASE[file].kind.plural)
        yield api, api.kubeconfig(tmp_path / "kubeconfig")
    finally:
        api.stop()


def test_audit_of_the_live_cluster_lists_the_custom_workloads_it_serves(live, tmp_path):
    api, kubeconfig = live
    reports = tmp_path / "reports.yaml"
    done = run_gpushare("audit", "--kubeconfig", kubeconfig, "--format", "json", "--reports-file", reports,
                        "--report-kind", "openreports")
    assert done.returncode == 1, done.stderr
    assert audited(json.loads(done.stdout)) == EXPECTED
    assert api.count("GET", "/apis/kubeflow.org/v1/pytorchjobs") == 1
    assert api.count("GET", "/apis/ray.io/v1/rayclusters") == 1
    assert api.count("GET", "/apis/argoproj.io/v1alpha1/workflows") == 1  # not served: 404, said nothing
    assert "note" not in done.stderr
    objects = yaml.safe_load(reports.read_text())["items"]
    refs = {(r["apiVersion"], r["kind"]) for report in objects for result in report["results"]
            for r in result["resources"]}
    assert refs == {("kubeflow.org/v1", "PyTorchJob"), ("ray.io/v1", "RayCluster"),
                    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime")}
