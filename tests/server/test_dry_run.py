"""POST /dry-run on the real `gpushare serve` over TLS: YAML and JSON bodies, verdicts, patches, rankings."""

from __future__ import annotations

import copy
import json

import jsonpatch
import pytest
import yaml

from tests.support.helpers import DATA, admission_review, gpushare_server, load_json

# /dry-run with either gunicorn worker (server.worker).
pytestmark = [pytest.mark.both_workers, pytest.mark.processes]

CORE_MEM_NODE = "cn-beijing.192.168.1.10"  # demo: core_mem, 4 x 15 GiB, runs a 2 GiB + 30 % job
CGPU_NODE = "cn-hangzhou.192.168.2.20"  # demo: cgpu, 2 x 31 GiB Tesla-V100-SXM2-32GB
SHARE_NODE = "cn-zhangjiakou.192.168.66.139"  # demo: share, 1 x 15 GiB Tesla-T4, 3 GiB used
SEED_JOB = (DATA / "seeds" / "000-cuda-sample.yaml").read_text()



def dry_run(server, session, body: str, content_type: str = "application/yaml", **params: str):
    return session.post(server.url + "/dry-run", data=body.encode(), params=params,
                        headers={"Content-Type": content_type}, timeout=15)


def ok(reply) -> list[dict]:
    assert reply.status_code == 200, reply.text
    return reply.json()["results"]


def test_seed_000_job_ranks_the_core_mem_node_and_explains_the_rest(server, session):
    [job] = ok(dry_run(server, session, SEED_JOB))
    assert (job["kind"], job["name"], job["namespace"], job["allowed"]) == ("Job", "cuda-sample", "default", True)
    assert job["violations"] == [] and job["warnings"] == []
    assert job["patch"] == [] and job["mutated"] == yaml.safe_load(SEED_JOB)  # templates are not mutated
    first, *others = job["ranking"]
    assert first == {"node": CORE_MEM_NODE, "fits": True, "score": round(100 * (4 / 15 + 0.6) / 2),
                     "cards": [{"container": "cuda-sample", "gpus": [0], "mem": 2, "core": 30,
                                "gpu_mem_before": "2/15", "gpu_mem_after": "4/15"}],
                     "reasons": ['binpack: container "cuda-sample" on GPU0: 2/15 -> 4/15 GiB']}
    assert all(not n["fits"] and n["reasons"] for n in others)
    cgpu = next(n for n in others if n["node"] == CGPU_NODE)
    assert cgpu["reasons"] == [f"GB002: node {CGPU_NODE} has ack.node.gpu.schedule=cgpu; core+mem pods need core_mem"]


def test_multi_document_yaml_reports_each_object_with_lines(server, session):
    body = """\
apiVersion: v1
kind: Pod
metadata:
  name: cuda-33
  namespace: ml
spec:
  containers:
  - name: cuda
    image: cuda:12
    resources:
      limits:
        aliyun.com/gpu-mem: 2
        aliyun.com/gpu-core.percentage: 33
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
---
apiVersion: v1
kind: Pod
metadata: {name: infer}
spec:
  nodeSelector: {aliyun.accelerator/nvidia_name: Tesla-T4}
  containers:
  - {name: infer, image: cuda:12, resources: {limits: {aliyun.com/gpu-mem: 4}}}
"""
    bad, config_map, infer = ok(dry_run(server, session, body))
    assert bad["allowed"] is False and bad["namespace"] == "ml" and bad["line"] == 1
    [violation] = bad["violations"]
    assert violation["rule"] == "GS001" and violation["severity"] == "deny" and violation["line"] == 13
    assert violation["path"] == 'spec.containers[0].resources.limits["aliyun.com/gpu-core.percentage"]'
    assert "use 30 or 35" in violation["message"]
    assert config_map["ranking"] is None and config_map["allowed"] is True and config_map["line"] == 15
    assert infer["line"] == 20
    assert [n["node"] for n in infer["ranking"] if n["fits"]] == [SHARE_NODE]
    mutated = jsonpatch.apply_patch(list(yaml.safe_load_all(body))[2], infer["patch"])
    assert mutated == infer["mutated"] and mutated["spec"]["schedulerName"] == "ack-co-scheduler"


def test_json_pod_gets_patch_and_mutated_object(server, session):
    pod = load_json("pod-realistic.json")
    [result] = ok(dry_run(server, session, json.dumps(pod), "application/json"))
    assert result["kind"] == "Pod" and result["allowed"] is True
    assert {op["path"] for op in result["patch"]} == {"/spec/schedulerName", "/spec/containers/0/env"}
    assert result["mutated"] == jsonpatch.apply_patch(copy.deepcopy(pod), result["patch"])
    fitting = {n["node"]: n["score"] for n in result["ranking"] if n["fits"]}
    # Each node scores by its own placement label: the empty spread V100 keeps 27 of 31 GiB free
    # (87); on the binpack T4 the card would be 7/15 full (47).
    assert fitting == {CGPU_NODE: round(100 * 27 / 31), SHARE_NODE: round(100 * 7 / 15)}
    assert list(fitting) == [CGPU_NODE, SHARE_NODE]


def test_json_list_and_admission_review_bodies(server, session):
    pod = load_json("pod-realistic.json")
    listing = {"apiVersion": "v1", "kind": "List", "items": [pod, yaml.safe_load(SEED_JOB)]}
    results = ok(dry_run(server, session, json.dumps(listing), "application/json"))
    assert [(r["kind"], r["name"]) for r in results] == [("Pod", "tensorflow-mnist-share-*"), ("Job", "cuda-sample")]
    [reviewed] = ok(dry_run(server, session, json.dumps(admission_review(pod)), "application/json"))
    assert reviewed["name"] == "tensorflow-mnist-share-*" and reviewed["ranking"] == results[0]["ranking"]


def test_judging_a_placement_on_a_named_node(server, session):
    [job] = ok(dry_run(server, session, SEED_JOB, node=CGPU_NODE))
    assert job["allowed"] is False and job["node"] == CGPU_NODE
    [violation] = job["violations"]
    assert violation["rule"] == "GB002" and violation["path"] == "spec.template.spec.nodeName"
    assert violation["message"] == (f"GB002: Job default/cuda-sample: node {CGPU_NODE} has ack.node.gpu.schedule=cgpu;"
                                    f" core+mem pods need core_mem; nodes that fit: {CORE_MEM_NODE}")
    [fine] = ok(dry_run(server, session, SEED_JOB, node=CORE_MEM_NODE))
    assert fine["allowed"] is True and fine["violations"] == []


def test_a_pod_pinned_by_node_name_is_judged_there(server, session):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big"},
           "spec": {"nodeName": SHARE_NODE, "containers": [
               {"name": "big", "image": "cuda", "resources": {"limits": {"aliyun.com/gpu-mem": 13}}}]}}
    [result] = ok(dry_run(server, session, json.dumps(pod), "application/json"))
    assert result["node"] == SHARE_NODE and result["allowed"] is False
    assert result["violations"][0]["message"].startswith(
        f'GB004: Pod default/big (container "big" aliyun.com/gpu-mem=13): node {SHARE_NODE}: container "big" fits '
        "no card: GPU0 has 12/15 GiB free, needs 13")


def test_dry_run_has_no_side_effects(server, session):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fills-the-t4"},
           "spec": {"containers": [{"name": "c", "image": "cuda",
                                    "resources": {"limits": {"aliyun.com/gpu-mem": 12}}}]}}
    body = json.dumps(pod)
    first = ok(dry_run(server, session, body, "application/json", node=SHARE_NODE))
    again = ok(dry_run(server, session, body, "application/json", node=SHARE_NODE))
    assert first == again and first[0]["allowed"] is True  # the 12 GiB were not taken by the first call
    share = next(n for n in again[0]["ranking"] if n["node"] == SHARE_NODE)
    assert share["cards"][0]["gpu_mem_before"] == "3/15"


@pytest.mark.parametrize(("body", "params", "reason"), [
    ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels: [a, b\nspec: {}\n", {}, "body:6: invalid YAML"),
    ('{"kind": "Pod", "metadata": {"name": "x"},}', {}, "body:1: invalid JSON"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: 5\n", {},
     "body:5: Pod: spec.containers: must be a list, got int"),
    ("kind: Pod\nmetadata: {name: x}\nspec:\n  affinity:\n    nodeAffinity:\n      requiredDuringScheduling"
     "IgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions:\n"
     "          - {key: a, operator: Near, values: [b]}\n", {}, "body:9: Pod: spec.affinity"),
    ("metadata: {name: x}\n", {}, "body:1: object has no kind"),
    ("", {}, "empty body"),
    ("# only a comment\n", {}, "no Kubernetes object"),
    (SEED_JOB, {"node": "no-such-node"}, "?node=no-such-node: no such node in the cluster state"),
])
def test_malformed_bodies_are_a_400_with_the_line(server, session, body, params, reason):
    reply = dry_run(server, session, body, **params)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == 400 and reason in error["reason"], error


def test_not_utf8_is_a_400(server, session):
    reply = session.post(server.url + "/dry-run", data=b"kind: Pod\nmetadata: {name: \xff}\n", timeout=15)
    assert reply.status_code == 400 and "not UTF-8" in reply.json()["error"]["reason"]


def test_a_pod_pinned_to_an_unknown_node_gets_a_warning(server, session):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "elsewhere"},
           "spec": {"nodeName": "node-the-state-lacks", "containers": [
               {"name": "c", "image": "cuda", "resources": {"limits": {"aliyun.com/gpu-mem": 1}}}]}}
    [result] = ok(dry_run(server, session, json.dumps(pod), "application/json"))
    assert result["allowed"] is True and result["node"] == "node-the-state-lacks"
    [warning] = result["warnings"]
    assert warning["rule"] == "state" and warning["path"] == "spec.nodeName"
    assert "node node-the-state-lacks is not in the cluster state" in warning["message"]


def test_the_answer_is_bounded_by_the_question(tmp_path):
    """A hundred tiny documents once drew a ranking of every node each: an answer thousands of times
    its question. Rankings show the best dry_run.ranking_nodes nodes and count the rest; a body of
    more than dry_run.max_documents objects, or an answer over dry_run.max_answer_bytes, is a 413
    that names the bound; the server that read them answers on."""
    env = {"GPUSHARE_DRY_RUN__MAX_DOCUMENTS": "5", "GPUSHARE_DRY_RUN__RANKING_NODES": "2",
           "GPUSHARE_DRY_RUN__MAX_ANSWER_BYTES": "65536"}
    with gpushare_server(tmp_path, env=env) as server:
        session = server.session()
        [job] = ok(dry_run(server, session, SEED_JOB))
        assert len(job["ranking"]) == 2 and job["rankingOmitted"] == 2  # the demo snapshot has 4 nodes
        assert job["ranking"][0]["node"] == CORE_MEM_NODE  # the best come first
        config_map = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
        assert "rankingOmitted" not in ok(dry_run(server, session, config_map))[0]  # nothing ranked

        many = "---\n".join([SEED_JOB] * 6)
        reply = dry_run(server, session, many)
        assert reply.status_code == 413
        assert reply.json()["error"]["reason"] == (
            "the body holds more than 5 objects; /dry-run judges at most 5 per request (dry_run.max_documents): "
            "send them in smaller batches, or judge any number offline with `gpushare check`")
        listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(SEED_JOB)] * 6})
        reply = dry_run(server, session, listed, "application/json")
        assert reply.status_code == 413 and "more than 5 objects" in reply.json()["error"]["reason"]

        padded = yaml.safe_load(SEED_JOB)
        padded["metadata"]["annotations"] = {"note": "x" * 20_000}  # echoed in `mutated`: 4 x 20 KB answered
        reply = dry_run(server, session, "---\n".join([yaml.safe_dump(padded)] * 4))
        assert reply.status_code == 413
        reason = reply.json()["error"]["reason"]
        assert reason.startswith("the answer would be ") and "more than dry_run.max_answer_bytes (65536)" in reason
        assert len(ok(dry_run(server, session, yaml.safe_dump(padded)))) == 1
        metrics = session.get(server.url + "/metrics", timeout=10).text
        assert 'gpushare_admission_requests_total{endpoint="dry-run",kind="",operation="",outcome="too_large"} 3.0' \
            in metrics
