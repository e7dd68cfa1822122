"""Fidelity to real ACK clusters, over the real `gpushare serve` and the real CLI: ECS provider
IDs in both forms, the scheduler choice, near-miss resource names, pods no card can hold, the
workload dry-run preview, relabelling warnings and placement pictures from the rules alone."""

from __future__ import annotations

import base64
import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cluster_objects import node, relabel, with_mode
from tests.support.helpers import DATA, admission_review, gpushare_executable, gpushare_server, wait_until
from tests.support.near_miss_cases import NEAR_MISSES, NOT_NEAR_MISSES, deployment_with, pod_with

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "webhook" / "data" / "demo-snapshot.yaml"


def gpushare(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([gpushare_executable(), *args], input=stdin, capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={"COLUMNS": "220", "PATH": "/usr/bin:/bin"})


def validate(server, session, obj: dict[str, Any], **review: Any) -> dict[str, Any]:
    reply = server.post_json("/validate", admission_review(obj, **review), session)
    assert reply.status_code == 200, reply.text
    return reply.json()["response"]


def patch_of(server, session, obj: dict[str, Any]) -> list[dict[str, Any]]:
    response = server.post_json("/mutate", admission_review(obj), session).json()["response"]
    return json.loads(base64.b64decode(response["patch"])) if "patch" in response else []


def gpu_pod(mem: int, *, name: str = "big", core: int | None = None, selector: dict[str, str] | None = None
            ) -> dict[str, Any]:
    limits: dict[str, Any] = {"aliyun.com/gpu-mem": mem}
    if core is not None:
        limits["aliyun.com/gpu-core.percentage"] = core
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "cuda:12", "resources": {"limits": limits}}]}
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


# --- 1. ECS nodes: both provider-ID forms, foreign ones --------------------------------------

@pytest.mark.parametrize(("provider_id", "ecs"), [
    ("cn-hangzhou.i-bp16uimj7fl6ze8q5rf3", True),            # what the Alibaba cloud controller sets
    ("alicloud://cn-hangzhou.i-bp16uimj7fl6ze8q5rf3", True),  # what some tools write
    ("aws:///us-east-1a/i-0abc1234def567890", False),
    ("gce://my-project/us-central1-a/gpu-1", False),
    ("kind://docker/kind/worker", False),
    ("cn-hangzhou.bp16uimj7fl6ze8q5rf3", False),              # no ECS instance id
    (None, False),
])
@pytest.mark.parametrize("mode", ["cgpu", "core_mem", "mps"])
def test_gn004_on_the_server_knows_both_ecs_forms(server, session, provider_id, ecs, mode):
    obj = node("gpu-1", mode=mode, region="cn-hangzhou", provider_id=provider_id,
               labels={"gpushare.io/mps-control-daemon": "true"})
    response = validate(server, session, obj)
    assert response["allowed"] is ecs, response
    if not ecs:
        assert "GN004" in response["status"]["message"]


@pytest.mark.parametrize("provider_id", ["cn-hangzhou.i-bp16uimj7fl6ze8q5rf3",
                                         "alicloud://cn-hangzhou.i-bp16uimj7fl6ze8q5rf3"])
def test_region_falls_back_to_the_provider_id_in_both_forms(server, session, provider_id):
    obj = node("gpu-1", mode="core_mem", region=None, provider_id=provider_id)
    assert validate(server, session, obj)["allowed"] is True  # cn-hangzhou allows core_mem
    elsewhere = provider_id.replace("cn-hangzhou", "eu-central-1")
    foreign = node("gpu-1", mode="core_mem", region=None, provider_id=elsewhere)
    response = validate(server, session, foreign)
    assert response["allowed"] is False and "core_mem is not available in region eu-central-1" in \
        response["status"]["message"]


def test_the_demo_snapshot_uses_the_cloud_controllers_form():
    nodes = [o for o in yaml.safe_load(DEMO.read_text())["items"] if o["kind"] == "Node"]
    ids = [n["spec"]["providerID"] for n in nodes if "providerID" in n.get("spec", {})]
    assert ids and all(re.fullmatch(r"[a-z]+(-[a-z0-9]+)+\.i-[a-z0-9]+", i) for i in ids), ids


def test_check_cli_admits_a_bare_provider_id_and_denies_a_foreign_one(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(node("gpu-1", mode="cgpu", provider_id="cn-beijing.i-2ze5x")))
    assert gpushare("check", str(good)).returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(node("gpu-1", mode="cgpu", provider_id="aws:///us-east-1a/i-0abc")))
    done = gpushare("check", str(bad))
    assert done.returncode == 1 and "GN004" in done.stdout


# --- 2. The scheduler GM001 injects ---------------------------------------------------------

def test_serve_defaults_to_ack_co_scheduler_and_says_so(server, session):
    assert {"op": "add", "path": "/spec/schedulerName", "value": "ack-co-scheduler"} in patch_of(
        server, session, gpu_pod(2))
    wait_until(lambda: "shared-GPU pods without a scheduler get schedulerName ack-co-scheduler" in server.log(),
               timeout=10, what="the scheduler line in the log")


def test_serve_with_scheduler_none_injects_no_scheduler_and_says_so(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("names:\n  scheduler_name: none\n")
    with gpushare_server(tmp_path, "--config", str(config)) as running, running.session() as session:
        patch = patch_of(running, session, gpu_pod(2))
        assert not any(op["path"] == "/spec/schedulerName" for op in patch)
        assert any("ALIYUN_COM_GPU_MEM_CONTAINER" in json.dumps(op) for op in patch)  # GM003 still runs
        wait_until(lambda: "names.scheduler_name is none: shared-GPU pods keep their schedulerName" in running.log(),
                   timeout=10, what="the none line in the log")


# --- 3. Near-miss resource names (GS007) ----------------------------------------------------

@pytest.mark.parametrize(("resource", "value", "meant"), NEAR_MISSES)
def test_each_near_miss_is_denied_with_did_you_mean(server, session, resource, value, meant):
    for obj, kind in ((pod_with(resource, value), "Pod"), (deployment_with(resource, value), "Deployment")):
        review = {"group": "apps", "resource": "deployments"} if kind == "Deployment" else {}
        response = validate(server, session, obj, **review)
        assert response["allowed"] is False, response
        message = response["status"]["message"]
        assert message.startswith(f'GS007: {kind} default/near-miss container "app": limits.{resource} ')
        assert f"did you mean {meant}?" in message and "Pending forever" in message


@pytest.mark.parametrize("resource", NOT_NEAR_MISSES)
def test_real_resources_are_not_near_misses(server, session, resource):
    response = validate(server, session, pod_with(resource, 1))
    assert "GS007" not in json.dumps(response)


def test_check_cli_reports_near_misses_and_honours_the_allowlist(tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod_with("aliyun.com/gpu-memory", 4)))
    done = gpushare("check", str(manifest))
    assert done.returncode == 1 and "did you mean aliyun.com/gpu-mem?" in done.stdout
    config = tmp_path / "config.yaml"
    config.write_text("near_miss:\n  allowed: [aliyun.com/gpu-memory]\n")
    assert gpushare("check", "--config", str(config), str(manifest)).returncode == 0


# --- 4. Pods no card can hold (GC001) -------------------------------------------------------

def test_a_pod_larger_than_every_card_warns_naming_the_largest(server, session):
    response = validate(server, session, gpu_pod(40))
    assert response["allowed"] is True
    (warning,) = [w for w in response.get("warnings") or [] if w.startswith("GC001")]
    assert "cannot run on any node the cluster has" in warning
    assert "31 GiB (GPU0 of node cn-hangzhou.192.168.2.20)" in warning


def test_core_mem_pods_are_bounded_by_core_mem_nodes_and_workloads_are_judged(server, session):
    response = validate(server, session, gpu_pod(16, core=30))
    (warning,) = [w for w in response.get("warnings") or [] if w.startswith("GC001")]
    assert "15 GiB (GPU0 of node cn-beijing.192.168.1.10)" in warning  # the only core_mem node
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "big", "namespace": "default"},
           "spec": {"template": {"spec": {**gpu_pod(40)["spec"], "restartPolicy": "Never"}}}}
    response = validate(server, session, job, group="batch", resource="jobs")
    assert any(w.startswith("GC001: Job default/big cannot run") for w in response["warnings"])
    assert not any(w.startswith("GC001") for w in validate(server, session, gpu_pod(4)).get("warnings") or [])


def test_card_model_selectors_narrow_the_nodes_that_could_take_it(server, session):
    response = validate(server, session, gpu_pod(20, selector={"aliyun.accelerator/nvidia_name": "Tesla-T4"}))
    (warning,) = [w for w in response.get("warnings") or [] if w.startswith("GC001")]
    assert "15 GiB (GPU0 of node cn-zhangjiakou.192.168.66.139)" in warning


def test_deny_by_configuration_and_fits_no_card_now_from_check(tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(gpu_pod(40)))
    assert gpushare("check", "--snapshot", str(DEMO), str(manifest)).returncode == 0  # a warning by default
    config = tmp_path / "config.yaml"
    config.write_text("rules:\n  GC001: {severity: deny}\n")
    done = gpushare("check", "--snapshot", str(DEMO), "--config", str(config), str(manifest))
    assert done.returncode == 1 and "GC001" in done.stdout
    # A share node whose only 15 GiB card holds 12 GiB: a 4 GiB pod fits no card now.
    full = yaml.safe_load((DATA / "inspect-seed001.yaml").read_text())
    full["items"][1]["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "12"
    full["items"][1]["metadata"]["annotations"] = {"scheduler.framework.gpushare.allocation": '{"0":{"0":12}}'}
    snapshot = tmp_path / "full.yaml"
    snapshot.write_text(yaml.safe_dump(full))
    manifest.write_text(yaml.safe_dump(gpu_pod(4)))
    done = gpushare("check", "--snapshot", str(snapshot), "--format", "json", str(manifest))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GC001" in done.stdout and "fits no card of the nodes that could take it right now" in done.stdout
    assert "the closest is GPU0 of node cn-zhangjiakou.192.168.66.139 with 3 of 15 GiB free" in done.stdout


def test_dry_run_gives_a_summary_line_per_object(server, session):
    body = yaml.safe_dump_all([gpu_pod(40), gpu_pod(2, name="small")])
    reply = session.post(server.url + "/dry-run", data=body.encode(), headers={"Content-Type": "application/yaml"},
                         timeout=15)
    big, small = reply.json()["results"]
    assert [w["rule"] for w in big["warnings"]] == ["GC001"] and all(not e["fits"] for e in big["ranking"])
    assert not [w for w in small["warnings"] if w["rule"] == "GC001"]


def test_gc001_fails_open_without_usable_state(tmp_path):
    # A kubeconfig that points nowhere: the state never syncs; the pod is admitted, with the reason.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    with gpushare_server(tmp_path, "--kubeconfig", str(kubeconfig)) as running, running.session() as session:
        response = validate(running, session, gpu_pod(40))
        assert response["allowed"] is True
        assert any(w.startswith("GC001") and "admitted without the check" in w for w in response["warnings"])


# --- 5. Dry-run of workloads shows what their pods become ------------------------------------

def test_workload_dry_run_shows_the_pod_and_its_patch(server, session):
    job = (DATA / "seeds" / "004-tensorflow-mnist-share.yaml").read_text()
    reply = session.post(server.url + "/dry-run", data=job.encode(), headers={"Content-Type": "application/yaml"},
                         timeout=15)
    (result,) = reply.json()["results"]
    assert result["patch"] == []  # the Job itself is not mutated
    preview = result["podTemplate"]
    assert preview["appliedTo"] == "applied to each pod at creation"
    assert preview["pod"]["kind"] == "Pod" and preview["pod"]["metadata"]["generateName"] == "tensorflow-mnist-share-"
    assert preview["mutations"] == ["GM001", "GM003"]
    assert {"op": "add", "path": "/spec/schedulerName", "value": "ack-co-scheduler"} in preview["patch"]
    assert preview["mutatedPod"]["spec"]["schedulerName"] == "ack-co-scheduler"
    template = preview["mutatedTemplate"]
    assert template["metadata"]["labels"] == {"app": "tensorflow-mnist-share"}
    assert template["spec"]["containers"][0]["env"] == [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "4"}]
    assert "podTemplate" not in session.post(server.url + "/dry-run", data=yaml.safe_dump(gpu_pod(2)).encode(),
                                             headers={"Content-Type": "application/yaml"},
                                             timeout=15).json()["results"][0]


# --- 6. Audit findings ------------------------------------------------------------------------

def test_relabelling_an_existing_node_warns_and_unknown_cpu_policy_warns(server, session):
    old = node("gpu-1", mode="share")
    response = validate(server, session, with_mode(copy.deepcopy(old), "cgpu"), operation="UPDATE", old=old)
    assert any(w.startswith("GN005") and "after adding a shared GPU scheduling label, do not change it" in w
               for w in response["warnings"])
    unlabelled = node("gpu-2", mode="cgpu")
    del unlabelled["metadata"]["labels"]["gpushare.io/cpu-manager-policy"]
    response = validate(server, session, unlabelled)
    assert any(w.startswith("GN002") and "CPU manager policy is unknown" in w for w in response["warnings"])
    first = relabel(node("gpu-3", mode=None), **{"ack.node.gpu.schedule": "share"})
    response = validate(server, session, first, operation="UPDATE", old=node("gpu-3", mode=None))
    assert not any(w.startswith("GN005") for w in response.get("warnings") or [])  # labelling once is how 001 says


def test_rules_cite_kubernetes_and_project_choices():
    rules = {r["id"]: r for r in json.loads(gpushare("rules", "--format", "json").stdout)}
    assert rules["GS004"]["sources"] == ['Kubernetes documentation: "Resource Management for Pods and Containers"']
    assert "before validating webhooks run" in rules["GS004"]["doc"]
    assert rules["GN006"]["sources"][0].startswith("project choice")
    assert rules["GS007"]["sources"][0].startswith("project choice")
    assert rules["GC001"]["defaultSeverity"] == "warn"


SNAPSHOT_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {
    "name": "cn-shanghai.192.0.2.109", "labels": {"ack.node.gpu.schedule": "cgpu", "ack.node.gpu.placement": "",
                                                  "aliyun.accelerator/nvidia_count": "4"}},
    "spec": {"providerID": "cn-shanghai.i-uf6demo109"},
    "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.109"}],
               "capacity": {"aliyun.com/gpu-count": "4", "aliyun.com/gpu-mem": "60"},
               "allocatable": {"aliyun.com/gpu-count": "4", "aliyun.com/gpu-mem": "60"}}}


def _place_in_turn(tmp_path: Path, placement: str, sizes: list[int]) -> list[dict[str, Any]]:
    """Each pod placed where `gpushare score` puts it, recorded as the scheduler records it."""
    node_obj = copy.deepcopy(SNAPSHOT_NODE)
    node_obj["metadata"]["labels"]["ack.node.gpu.placement"] = placement
    items: list[dict[str, Any]] = [node_obj]
    snapshot, manifest = tmp_path / "snapshot.yaml", tmp_path / "pod.yaml"
    for n, mem in enumerate(sizes):
        pod = gpu_pod(mem, name=f"{placement}-{n}")
        snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
        manifest.write_text(yaml.safe_dump(pod))
        done = gpushare("score", "--snapshot", str(snapshot), str(manifest))
        assert done.returncode == 0, done.stdout + done.stderr
        card = int(re.search(rf'{placement}: container "app" on GPU(\d+):', done.stdout).group(1))
        allocation = json.dumps({"0": {str(card): mem}})
        pod["metadata"]["annotations"] = {"scheduler.framework.gpushare.allocation": allocation}
        pod["spec"]["nodeName"] = node_obj["metadata"]["name"]
        pod["status"] = {"phase": "Running"}
        items.append(pod)
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return items


def _inspect_row(snapshot: Path) -> str:
    done = gpushare("inspect", "--snapshot", str(snapshot))
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.splitlines()[1].split())


def test_spread_and_binpack_pictures_from_the_rules_alone(tmp_path):
    seed = " ".join((DATA / "seeds" / "003_e2b829a309310c51.txt").read_text().split())
    # spread: four 4 GiB pods go to GPU0..GPU3 in turn; the one on GPU2 then completes.
    items = _place_in_turn(tmp_path, "spread", [4, 4, 4, 4])
    assert [json.loads(p["metadata"]["annotations"]["scheduler.framework.gpushare.allocation"])["0"]
            for p in items[1:]] == [{"0": 4}, {"1": 4}, {"2": 4}, {"3": 4}]
    items[3]["status"]["phase"] = "Succeeded"
    (tmp_path / "snapshot.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    row = _inspect_row(tmp_path / "snapshot.yaml")
    assert row == "cn-shanghai.192.0.2.109 192.0.2.109 4/15 4/15 0/15 4/15 12/60" and f"{row} " in seed
    # binpack: 8, 7 and 9 GiB fill GPU0 before GPU1.
    _place_in_turn(tmp_path, "binpack", [8, 7, 9])
    row = _inspect_row(tmp_path / "snapshot.yaml")
    assert row == "cn-shanghai.192.0.2.109 192.0.2.109 15/15 9/15 0/15 0/15 24/60" and f"{row} " in seed
