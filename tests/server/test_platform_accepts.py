"""Never stricter than the system guarded: what ACK, kube-scheduler, the kubelet and the operators accept
is accepted, through the real server (/validate) and `gpushare check`.

- ``ack.node.gpu.schedule`` values ACK documents beyond the six modes: ``mig`` ("Labels for enabling GPU
  scheduling policies") and ``disabled`` (the DRA guide): nodes admitted, and shown as nodes that offer
  no shared GPU where a shared-GPU pod meets them.
- A pod spread over several big cards (``aliyun.com/gpu-count``): GS003's ceiling is per card.
- A zero request is no request: ``nvidia.com/gpu: "0"`` beside ``aliyun.com/gpu-mem``.
- Fields a workload kind puts into its pods: a TrainJob's trainer env and runtime patches, a KServe
  (Cluster)ServingRuntime's containers.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.check_helpers import check_json, run_gpushare
from tests.support.cluster_builders import snapshot_yaml
from tests.support.cluster_objects import binding, gpu_pod, node
from tests.support.helpers import admission_review, gpushare_server
from tests.support.workload_cases import CASES, MEM

pytestmark = pytest.mark.processes

CASE = {c.file: c for c in CASES}
COUNT = "aliyun.com/gpu-count"


def validate(server: Any, session: Any, review: dict[str, Any]) -> dict[str, Any]:
    reply = session.post(server.url + "/validate", json=review, timeout=15)
    assert reply.status_code == 200, reply.text
    return reply.json()["response"]


def write(tmp_path: Path, name: str, *objects: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


# -- ack.node.gpu.schedule: mig and disabled ---------------------------------------------------------------

def offering_no_shared_gpu(name: str, mode: str) -> dict[str, Any]:
    """A GPU node ACK's sharing components do not serve: whole GPUs only (the DRA driver's, or MIG's)."""
    obj = node(name, mode=mode, cards=8, card_gib=80, card_name="NVIDIA-H100-80GB")
    for section in ("capacity", "allocatable"):
        resources = obj["status"][section]
        resources.pop("aliyun.com/gpu-mem")
        resources.pop("aliyun.com/gpu-count")
    return obj


@pytest.mark.parametrize("mode", ["disabled", "mig"])
def test_a_node_labelled_with_a_value_ack_documents_is_admitted_by_the_server_and_check(mode, server, session,
                                                                                        tmp_path):
    created = offering_no_shared_gpu(f"cn-beijing.10.0.1.{len(mode)}", mode)
    answer = validate(server, session, admission_review(created, kind="Node", resource="nodes", namespace=""))
    assert answer["allowed"] is True and "warnings" not in answer, answer
    # Relabelled from default, as the DRA guide tells users to do with a node pool's label.
    before = copy.deepcopy(created)
    before["metadata"]["labels"]["ack.node.gpu.schedule"] = "default"
    answer = validate(server, session, admission_review(created, kind="Node", resource="nodes", namespace="",
                                                        operation="UPDATE", old=before))
    assert answer["allowed"] is True and "warnings" not in answer, answer
    code, report = check_json(write(tmp_path, "node.yaml", created))
    assert code == 0 and report["findings"] == [], report


def test_relabelling_a_mig_node_is_warned_in_the_labels_page_s_words(server, session):
    mig = offering_no_shared_gpu("cn-beijing.10.0.1.7", "mig")
    relabelled = copy.deepcopy(mig)
    relabelled["metadata"]["labels"]["ack.node.gpu.schedule"] = "default"
    answer = validate(server, session, admission_review(relabelled, kind="Node", resource="nodes", namespace="",
                                                        operation="UPDATE", old=mig, username="ops", groups=()))
    assert answer["allowed"] is True
    assert answer["warnings"] == [
        'GN005: Node cn-beijing.10.0.1.7: ack.node.gpu.schedule mig -> default: "Labels for enabling GPU '
        'scheduling policies" supports no other value on a mig node; use a node pool labelled default'], answer


def test_an_unknown_value_is_still_refused_naming_every_documented_one(server, session):
    answer = validate(server, session, admission_review(offering_no_shared_gpu("cn-beijing.10.0.1.9", "vgpu"),
                                                        kind="Node", resource="nodes", namespace=""))
    assert answer["allowed"] is False
    assert answer["status"]["message"].startswith(
        "GN001: Node cn-beijing.10.0.1.9: ack.node.gpu.schedule='vgpu' is not a GPU scheduling mode; use one of "
        "cgpu, core_mem, default, disabled, mig, mps, share, topology")


@pytest.mark.parametrize("mode", ["disabled", "mig"])
def test_a_shared_gpu_pod_placed_on_such_a_node_is_shown_the_node_s_mode(mode, tmp_path):
    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(snapshot_yaml(offering_no_shared_gpu("h100-1", mode)))
    pod = gpu_pod("infer", mem=4, node_name="h100-1")
    pod["status"] = {}
    code, report = check_json("--snapshot", snapshot, write(tmp_path, "pod.yaml", pod))
    assert code == 1
    [denial] = [f for f in report["findings"] if f["rule"] == "GB002"]
    assert (f"node h100-1 has ack.node.gpu.schedule={mode}; shared-GPU pods need one of cgpu, core_mem, mps, share"
            in denial["message"]), denial
    # A pod of whole GPUs is the node's own scheduling's: nothing to say.
    whole = gpu_pod("train", mem=None, node_name="h100-1", extra_limits={"nvidia.com/gpu": "8"})
    whole["status"] = {}
    code, report = check_json("--snapshot", snapshot, write(tmp_path, "whole.yaml", whole))
    assert code == 0 and report["findings"] == [], report


@pytest.mark.parametrize("mode", ["disabled", "mig"])
def test_the_audit_names_the_mode_of_a_node_a_shared_gpu_pod_runs_on(mode, tmp_path):
    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(snapshot_yaml(offering_no_shared_gpu("h100-1", mode),
                                      gpu_pod("infer", mem=4, node_name="h100-1", card=0)))
    done = run_gpushare("audit", "--snapshot", snapshot, "--format", "json")
    assert "Traceback" not in done.stderr, done.stderr
    found = json.loads(done.stdout)
    text = json.dumps(found)
    assert "GA004" in text and f"ack.node.gpu.schedule={mode}" in text, text


# -- a pod spread over 8 big cards ----------------------------------------------------------------------------

def spread_pod(gib: int | str, cards: int = 8, node_name: str | None = None) -> dict[str, Any]:
    pod = gpu_pod("llm", mem=None, node_name=node_name, extra_limits={MEM: str(gib)})
    pod["metadata"]["labels"] = {COUNT: str(cards)}
    pod["spec"]["schedulerName"] = "ack-co-scheduler"
    pod["status"] = {}
    return pod


def big_nodes(card_gib: int) -> str:
    return snapshot_yaml(node("gpu-h-1", mode="share", cards=8, card_gib=card_gib, card_name="NVIDIA-H200"))


def test_an_8_card_pod_over_1024_gib_is_admitted_and_fits_8_cards_of_141_gib(server, session, tmp_path):
    pod = spread_pod(1040)  # 130 GiB on each of 8 cards ("Use cGPU to achieve GPU sharing based on multiple GPUs")
    answer = validate(server, session, admission_review(pod))
    assert answer["allowed"] is True, answer
    manifest = write(tmp_path, "llm.yaml", pod)
    code, report = check_json(manifest)
    assert code == 0 and report["findings"] == [], report
    snapshot = tmp_path / "h200.yaml"
    snapshot.write_text(big_nodes(141))
    code, report = check_json("--snapshot", snapshot, manifest)
    assert code == 0 and report["findings"] == [], report
    pinned = write(tmp_path, "pinned.yaml", spread_pod(1040, node_name="gpu-h-1"))
    code, report = check_json("--snapshot", snapshot, pinned)
    assert code == 0 and report["findings"] == [], report


def test_where_a_card_cannot_hold_its_share_the_refusal_is_per_card(tmp_path):
    snapshot = tmp_path / "h100.yaml"
    snapshot.write_text(big_nodes(80))
    code, report = check_json("--snapshot", snapshot, write(tmp_path, "llm.yaml", spread_pod(1040)))
    [warning] = report["findings"]
    assert warning["rule"] == "GC001" and 'asks for 130 GiB on each of 8 cards, more than the largest card' in \
        warning["message"], warning
    code, report = check_json("--snapshot", snapshot, write(tmp_path, "pinned.yaml",
                                                            spread_pod(1040, node_name="gpu-h-1")))
    assert code == 1
    [denial] = [f for f in report["findings"] if f["rule"] == "GB004"]
    assert "130" in denial["message"] and "gpu-h-1" in denial["message"], denial


def test_the_server_admits_the_binding_to_8_cards_of_141_gib_and_refuses_80_gib_cards_per_card(tmp_path):
    pending = spread_pod(1040)
    pending["status"] = {"phase": "Pending"}
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(snapshot_yaml(node("h200-1", mode="share", cards=8, card_gib=141, card_name="NVIDIA-H200"),
                                     node("h100-1", mode="share", cards=8, card_gib=80, card_name="NVIDIA-H100"),
                                     pending))
    bind = {"kind": "Binding", "resource": "pods", "sub_resource": "binding"}
    with gpushare_server(tmp_path, "--snapshot", str(cluster)) as running, running.session() as session:
        created = validate(running, session, admission_review(spread_pod(1040)))
        assert created["allowed"] is True and "warnings" not in created, created
        fits = validate(running, session, admission_review(binding("llm", "h200-1"), **bind))
        assert fits["allowed"] is True and "warnings" not in fits, fits
        refused = validate(running, session, admission_review(binding("llm", "h100-1"), **bind))
    assert refused["allowed"] is False
    message = refused["status"]["message"]
    assert message.startswith('GB004: Binding default/llm (container "cuda" aliyun.com/gpu-mem=1040 over 8 cards): '
                              'node h100-1: container "cuda" needs 8 cards and 0 fit: GPU0 has 80/80 GiB free, '
                              'needs 130; '), message


def test_the_ceiling_and_the_mib_hint_are_per_card_times_the_cards(server, session):
    answer = validate(server, session, admission_review(spread_pod(9000)))
    assert answer["allowed"] is False
    assert ('aliyun.com/gpu-mem=9000 is more than 8 cards hold (8 cards hold at most 1024 GiB each, 8192 GiB in '
            'all) and looks like MiB (9 GiB rounded up); use 9') in answer["status"]["message"], answer
    # Without the label, 1040 GiB is more than any card and still looks like MiB.
    alone = spread_pod(1040)
    del alone["metadata"]["labels"]
    answer = validate(server, session, admission_review(alone))
    assert answer["allowed"] is False
    assert "aliyun.com/gpu-mem=1040 is more than any card holds (at most 1024 GiB) and looks like MiB (2 GiB " \
           "rounded up); use 2" in answer["status"]["message"], answer


# -- a zero request is no request ------------------------------------------------------------------------------

def test_zero_whole_gpus_beside_shared_gpu_memory_are_admitted(server, session, tmp_path):
    # kube-scheduler skips a zero request (noderesources fit.go: "Skip in case request quantity is zero");
    # the kubelet's device manager allocates nothing for one (devicemanager manager.go, devicesToAllocate).
    pod = gpu_pod("chart-default", mem=4, extra_limits={"nvidia.com/gpu": "0"})
    pod["status"] = {}
    answer = validate(server, session, admission_review(pod))
    assert answer["allowed"] is True and "warnings" not in answer, answer
    code, report = check_json(write(tmp_path, "pod.yaml", pod))
    assert code == 0 and report["findings"] == [], report
    # One whole GPU is a request: the mix is refused as before.
    for section in pod["spec"]["containers"][0]["resources"].values():
        if "nvidia.com/gpu" in section:
            section["nvidia.com/gpu"] = "1"
    answer = validate(server, session, admission_review(pod))
    assert answer["allowed"] is False and answer["status"]["message"].startswith("GS006: "), answer


# -- what a workload kind puts into its pods -------------------------------------------------------------------

def workload_review(case_file: str, obj: dict[str, Any]) -> dict[str, Any]:
    kind = CASE[case_file].kind
    group, _, version = obj["apiVersion"].rpartition("/")
    return admission_review(obj, kind=obj["kind"], group=group, version=version, resource=kind.plural,
                            namespace="" if not kind.namespaced else None)


FORGED = {"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "80"}


def trainjob_with_forged_trainer_env() -> dict[str, Any]:
    obj = CASE["trainjob.yaml"].manifest()
    obj["spec"]["trainer"]["env"] = [{"name": "EPOCHS", "value": "3"}, FORGED]
    return obj


def trainjob_with_forged_runtime_patch() -> dict[str, Any]:
    obj = CASE["trainjob.yaml"].manifest()
    container = {"name": "node", "env": [{"name": "ALIYUN_COM_GPU_MEM_IDX", "value": "0"}]}
    obj["spec"]["runtimePatches"] = [{"manager": "example.com/tuner", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "containers": [container]}}}}}]}}}}]
    return obj


@pytest.mark.parametrize(("build", "where"), [
    (trainjob_with_forged_trainer_env, 'spec.trainer (container "node"): env ALIYUN_COM_GPU_MEM_DEV=80'),
    (trainjob_with_forged_runtime_patch,
     'spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec'
     '.containers[0] (container "node"): env ALIYUN_COM_GPU_MEM_IDX=0'),
], ids=["trainer-env", "runtime-patch"])
def test_a_trainjob_forging_a_device_plugin_variable_is_denied(build, where, server, session, tmp_path):
    obj = build()
    answer = validate(server, session, workload_review("trainjob.yaml", obj))
    assert answer["allowed"] is False
    assert answer["status"]["message"].startswith(f"GS010: TrainJob default/multi-node-example {where} "), answer
    code, report = check_json(write(tmp_path, "trainjob.yaml", obj))
    assert code == 1 and [f["rule"] for f in report["findings"]] == ["GS010"], report
    assert f" {where} " in report["findings"][0]["message"]


def test_the_trainjob_sample_with_its_own_env_is_admitted(server, session):
    obj = CASE["trainjob.yaml"].manifest()
    obj["spec"]["trainer"]["env"] = [{"name": "EPOCHS", "value": "3"}]
    answer = validate(server, session, workload_review("trainjob.yaml", obj))
    assert answer["allowed"] is True and "warnings" not in answer, answer


def test_a_cluster_serving_runtime_with_gpu_mem_written_as_a_size_is_denied_naming_kserve_container(
        server, session, tmp_path):
    obj = CASE["clusterservingruntime.yaml"].manifest()
    obj["spec"]["containers"][0]["resources"]["limits"][MEM] = "2Gi"
    message = ('GS003: ClusterServingRuntime kserve-huggingfaceserver-multinode spec.containers[0] '
               '(container "kserve-container"): aliyun.com/gpu-mem=2Gi looks like bytes, but the resource counts '
               'GiB; use 2')
    answer = validate(server, session, workload_review("clusterservingruntime.yaml", obj))
    assert answer["allowed"] is False and answer["status"]["message"].startswith(message), answer
    code, report = check_json(write(tmp_path, "runtime.yaml", obj))
    assert code == 1 and [f["message"] for f in report["findings"]] == [message], report


def test_the_custom_workloads_webhook_condition_sends_each_of_them():
    # What the API server evaluates before calling the webhook (the generated matchCondition): a TrainJob
    # whose trainer or runtime patch forges a variable, a runtime asking for GPU memory.
    from tests.deploy.test_match_conditions import custom_sent

    runtime = CASE["clusterservingruntime.yaml"].manifest()
    assert custom_sent(trainjob_with_forged_trainer_env()) and custom_sent(trainjob_with_forged_runtime_patch())
    assert custom_sent(runtime) and custom_sent(CASE["servingruntime.yaml"].manifest())
    quiet = CASE["trainjob.yaml"].without_gpus()
    quiet["spec"]["trainer"]["env"] = [{"name": "EPOCHS", "value": "3"}]
    assert not custom_sent(quiet)
