"""kube-scheduler extender endpoints on the real server, with the JSON kube-scheduler sends.

k8s.io/kube-scheduler/extender/v1 types have no JSON tags: ExtenderArgs arrives as
{"Pod", "Nodes", "NodeNames"}; the answers are ExtenderFilterResult {"Nodes", "NodeNames",
"FailedNodes", "FailedAndUnresolvableNodes", "Error"} and a HostPriorityList of {"Host", "Score"}.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
import yaml

from tests.support.cluster_builders import allocation, gpu_node, gpu_pod, snapshot_yaml
from tests.support.helpers import gpushare_server, load_json

pytestmark = pytest.mark.processes

NODES = [
    gpu_node("bin", "cgpu", 4, 15, placement="binpack"),
    gpu_node("empty", "cgpu", 4, 15, placement="binpack"),
    gpu_node("t4", "share", 1, 15, model="Tesla-T4"),
    gpu_node("v100-32", "cgpu", 2, 31, model="Tesla-V100-SXM2-32GB"),
    gpu_node("a100", "topology", 8),
    gpu_node("cm", "core_mem", 4, 15),
]
PODS = [gpu_pod("resident", "bin", mem=11, annotations=allocation(0, 11)),
        gpu_pod("compute", "cm", mem=2, core=30, annotations=allocation(0, 2))]
CANDIDATES = ["bin", "empty", "t4", "v100-32", "a100", "cm", "ghost"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("extender")
    (workdir / "cluster.yaml").write_text(snapshot_yaml(*NODES, *PODS))
    with gpushare_server(workdir, "--snapshot", str(workdir / "cluster.yaml")) as running:
        yield running


@pytest.fixture(scope="module")
def session(server):
    with server.session() as client:
        yield client


def scheduled_pod() -> dict:
    """A pod as kube-scheduler holds it: defaulted, from a Job, 4 GiB, avoiding V100-32GB cards."""
    pod = load_json("pod-realistic.json")
    pod["metadata"]["name"] = pod["metadata"]["generateName"] + "x7k2p"
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "aliyun.accelerator/nvidia_name", "operator": "NotIn",
                                                     "values": ["Tesla-V100-SXM2-32GB"]}]}]}}}
    return pod


def test_filter_with_node_names(server, session):
    reply = server.post_json("/scheduler/filter", {"Pod": scheduled_pod(), "Nodes": None, "NodeNames": CANDIDATES},
                             session)
    assert reply.status_code == 200, reply.text
    result = reply.json()
    assert set(result) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert result["Error"] == "" and result["Nodes"] is None
    assert result["NodeNames"] == ["bin", "empty", "t4"]
    unresolvable = result["FailedAndUnresolvableNodes"]
    assert set(unresolvable) == {"v100-32", "a100"}
    assert unresolvable["v100-32"].startswith("NodeAffinity: node v100-32: required node affinity "
                                              "aliyun.accelerator/nvidia_name NotIn [Tesla-V100-SXM2-32GB]")
    assert unresolvable["a100"].startswith("GB002: node a100 has ack.node.gpu.schedule=topology")
    # Preemption could help on these: evicting the core+mem job, or the state catching up.
    assert set(result["FailedNodes"]) == {"cm", "ghost"}
    assert result["FailedNodes"]["cm"].startswith("GB001: node cm already runs core+mem pods (default/compute)")
    assert "not in the webhook's cluster state" in result["FailedNodes"]["ghost"]


def test_filter_with_whole_nodes_answers_nodes(server, session):
    node_list = {"metadata": {"resourceVersion": "4711"}, "items": NODES}
    result = server.post_json("/scheduler/filter", {"Pod": scheduled_pod(), "Nodes": node_list, "NodeNames": None},
                              session).json()
    assert result["NodeNames"] is None
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["bin", "empty", "t4"]
    assert result["Nodes"]["items"][0] == NODES[0]  # the scheduler's node objects, returned as sent
    assert set(result["FailedAndUnresolvableNodes"]) == {"v100-32", "a100"}


def test_prioritize_binpack_prefers_the_fuller_card(server, session):
    names = ["bin", "empty", "t4", "cm"]
    reply = server.post_json("/scheduler/prioritize", {"Pod": scheduled_pod(), "NodeNames": names}, session)
    assert reply.status_code == 200, reply.text
    # 0..10 (MaxExtenderPriority): bin's GPU0 would be 15/15, empty cards 4/15; cm does not fit.
    assert reply.json() == [{"Host": "bin", "Score": 10}, {"Host": "empty", "Score": 3},
                            {"Host": "t4", "Score": 3}, {"Host": "cm", "Score": 0}]


def test_go_style_lowercase_keys_are_accepted(server, session):
    result = server.post_json("/scheduler/filter", {"pod": scheduled_pod(), "nodenames": ["bin", "cm"]},
                              session).json()
    assert result["NodeNames"] == ["bin"]


def test_pod_without_gpu_passes_every_known_node(server, session):
    pod = gpu_pod("web")
    result = server.post_json("/scheduler/filter", {"Pod": pod, "NodeNames": ["bin", "a100"]}, session).json()
    assert result["NodeNames"] == ["bin", "a100"] and result["FailedNodes"] == {}


@pytest.mark.parametrize(("payload", "reason"), [
    ([], "body must be a JSON object (ExtenderArgs)"),
    ({"NodeNames": ["bin"]}, "ExtenderArgs.Pod must be a Pod object"),
    ({"Pod": {"metadata": {"name": "p"}}}, "needs NodeNames"),
    ({"Pod": {"metadata": {"name": "p"}}, "NodeNames": "bin"}, "NodeNames must be a list"),
    ({"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": 3}}, "Nodes must be a NodeList"),
    ({"Pod": {"spec": {"containers": {"name": "x"}}}, "NodeNames": ["bin"]},
     "ExtenderArgs.Pod: spec.containers: must be a list"),
])
def test_malformed_args_are_a_400(server, session, payload, reason):
    for verb in ("filter", "prioritize"):
        reply = server.post_json(f"/scheduler/{verb}", payload, session)
        assert reply.status_code == 400, reply.text
        assert reason in reply.json()["error"]["reason"]


def test_invalid_json_is_a_400(server, session):
    reply = session.post(server.url + "/scheduler/filter", data=b'{"Pod": ', timeout=10,
                         headers={"Content-Type": "application/json"})
    assert reply.status_code == 400 and "invalid JSON" in reply.json()["error"]["reason"]


def test_the_deploy_stanza_points_at_these_endpoints(server, session):
    """deploy/scheduler/kube-scheduler-config.yaml: the verbs it names are the routes served here."""
    config = yaml.safe_load((Path(__file__).parents[2] / "deploy/scheduler/kube-scheduler-config.yaml").read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    [extender] = config["extenders"]
    assert extender["nodeCacheCapable"] is True and extender["enableHTTPS"] is True
    assert {r["name"] for r in extender["managedResources"]} == {"aliyun.com/gpu-mem", "aliyun.com/gpu",
                                                                "aliyun.com/gpu-core.percentage"}
    prefix = urllib.parse.urlparse(extender["urlPrefix"]).path
    args = {"Pod": scheduled_pod(), "NodeNames": ["bin", "empty"]}
    filtered = server.post_json(f"{prefix}/{extender['filterVerb']}", args, session)
    assert filtered.status_code == 200 and filtered.json()["NodeNames"] == ["bin", "empty"]
    prioritized = server.post_json(f"{prefix}/{extender['prioritizeVerb']}", args, session)
    assert prioritized.status_code == 200
    assert all(0 <= p["Score"] <= 10 for p in prioritized.json())
