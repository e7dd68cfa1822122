"""Never count more strictly than the scheduler, through the real server and through ``check``.

Each case here was refused before the counting followed the GPU-sharing scheduler (docs/design.md,
"Counting as the scheduler counts"): a binding the scheduler has decided that the webhook then
denied is a pod stuck Pending. The same cluster is served by the real ``gpushare serve`` (a
``pods/binding`` review at ``/validate``) and read by ``gpushare check --snapshot`` (a Binding
manifest); quantities go in as the API server sends them (canonical) and as people write them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.canonical_quantity import canonical
from tests.support.check_helpers import run_gpushare, write_yaml
from tests.support.cluster_objects import binding, gpu_pod, node
from tests.support.helpers import admission_review, gpushare_server
from tests.support.scheduler_oracle import finds_room, oracle_node

pytestmark = pytest.mark.processes

MEM = "aliyun.com/gpu-mem"
BIND = {"kind": "Binding", "resource": "pods", "sub_resource": "binding"}
INIT_NODE = "cn-beijing.10.1.0.1"  # cgpu, one 12 GiB card
PLAIN_NODE = "cn-beijing.10.1.0.2"  # offers shared GPU (2 x 15 GiB) with the open-source label, not the ACK one
WIDE_NODE = "cn-beijing.10.1.0.3"  # cgpu, two empty 31 GiB cards
# cgpu, one 16 GiB card each, full: on the first with a pod being deleted (a rolling update's old pod), on
# the second with a running one.
TERMINATING_NODE, FULL_NODE = "cn-beijing.10.1.0.4", "cn-beijing.10.1.0.5"
DELETED_AT = "2026-01-01T00:00:00Z"


def _with_init(name: str, app: int, init: int) -> dict[str, Any]:
    pod = gpu_pod(name, mem=app)
    warm = {"name": "warm", "image": "cuda", "resources": {"limits": {MEM: str(init)}, "requests": {MEM: str(init)}}}
    pod["spec"]["initContainers"] = [warm]
    return pod


def _spread(name: str, mem: int, cards: int) -> dict[str, Any]:
    pod = gpu_pod(name, mem=mem)
    pod["metadata"]["labels"]["aliyun.com/gpu-count"] = str(cards)
    return pod


def _objects() -> list[dict[str, Any]]:
    plain = node(PLAIN_NODE, mode=None, cards=2, card_gib=15, provider_id="cn-beijing.i-2ze0plain",
                 labels={"gpushare": "true"})
    return [node(INIT_NODE, mode="cgpu", cards=1, card_gib=12, provider_id="cn-beijing.i-2ze0init"), plain,
            node(WIDE_NODE, mode="cgpu", cards=2, card_gib=31, provider_id="cn-beijing.i-2ze0wide"),
            _with_init("init-8", app=8, init=8),  # init 8 GiB + app 8 GiB on a card with 12 GiB free
            gpu_pod("plain-4", mem=4),
            _spread("wide-40", mem=40, cards=2),  # 40 GiB over 2 cards: 20 on each of two 31 GiB cards
            *_full_nodes()]


def _full_nodes() -> list[dict[str, Any]]:
    """Two full one-card nodes, the old pod on the first being deleted, and the new pod to bind."""
    leaving = gpu_pod("old-16", mem=16, node_name=TERMINATING_NODE, card=0)
    leaving["metadata"]["deletionTimestamp"] = DELETED_AT  # still Running through its grace period
    return [node(TERMINATING_NODE, mode="cgpu", cards=1, card_gib=16, provider_id="cn-beijing.i-2ze0term"),
            node(FULL_NODE, mode="cgpu", cards=1, card_gib=16, provider_id="cn-beijing.i-2ze0full"),
            leaving, gpu_pod("busy-16", mem=16, node_name=FULL_NODE, card=0), gpu_pod("new-16", mem=16)]


CASES = [("init-8", INIT_NODE), ("plain-4", PLAIN_NODE), ("wide-40", WIDE_NODE)]
PLAIN_WARNING = (f"GB002: Binding default/plain-4: node {PLAIN_NODE} has no ack.node.gpu.schedule label; judged as "
                 f"share, which its aliyun.com/gpu-mem capacity shows; label the node to say so")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("counting") / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": _objects()}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def served(cluster):
    with gpushare_server(cluster.parent, "--snapshot", str(cluster)) as running, running.session() as session:
        yield running, session


@pytest.mark.parametrize(("pod", "node_name"), CASES)
def test_the_server_admits_the_binding_the_scheduler_decided(served, pod, node_name):
    server, session = served
    reply = server.post_json("/validate", admission_review(binding(pod, node_name), **BIND), session)
    response = reply.json()["response"]
    assert response["allowed"] is True, response
    assert response.get("warnings", []) == ([PLAIN_WARNING] if pod == "plain-4" else [])


@pytest.mark.parametrize(("node_name", "allowed"), [(TERMINATING_NODE, True), (FULL_NODE, False)])
def test_a_binding_beside_a_pod_being_deleted_on_a_full_card(served, node_name, allowed):
    # The extender drops a pod with a deletionTimestamp from its cache (pkg/utils/pod.go IsCompletePod), so
    # during a rolling update it binds the new pod onto the card the old one is leaving; the card of a
    # running pod stays full.
    server, session = served
    response = server.post_json("/validate", admission_review(binding("new-16", node_name), **BIND),
                                session).json()["response"]
    assert response["allowed"] is allowed, response
    if not allowed:
        assert "GB004" in response["status"]["message"]
    # The oracle, written from the extender, agrees.
    objects = {(o["kind"], o["metadata"]["name"]): o for o in _objects()}
    on_node = [o for o in objects.values() if o["kind"] == "Pod" and o["spec"].get("nodeName") == node_name]
    assert finds_room(oracle_node(objects[("Node", node_name)], on_node), objects[("Pod", "new-16")]) is allowed


def test_check_with_the_snapshot_admits_the_same_bindings(cluster, tmp_path):
    manifests = write_yaml(tmp_path / "bindings.yaml", *(binding(pod, node_name) for pod, node_name in CASES))
    done = run_gpushare("check", "--snapshot", cluster, "--format", "json", manifests)
    assert done.returncode == 0, done.stdout + done.stderr
    findings = yaml.safe_load(done.stdout)["findings"]
    assert [(f["rule"], f["severity"], f["message"]) for f in findings] == [("GB002", "warn", PLAIN_WARNING)]


# ---- quantities: as the API server sends them, as people write them ---------------------------------------

def _pod_with(value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "cuda",
                                     "resources": {"limits": {MEM: value}, "requests": {MEM: value}}}]}}


SIXTEEN_K = ('GS003: Pod default/q container "c": aliyun.com/gpu-mem=16k is more than any card holds (at most '
             "1024 GiB) and looks like MiB (16 GiB rounded up); use 16, or set names.memory_unit: MiB if the device "
             "plugin counts MiB")


@pytest.mark.parametrize(("sent", "allowed"), [("2", True), ("1k", True), ("16k", False)])
def test_a_pod_create_carrying_canonical_quantities(served, sent, allowed):
    # 2000m arrives as "2", 1000 as "1k", 16000 as "16k": judged by value.
    server, session = served
    response = server.post_json("/validate", admission_review(_pod_with(sent)), session).json()["response"]
    assert response["allowed"] is allowed, response
    if not allowed:
        assert response["status"]["message"] == SIXTEEN_K


WRITTEN = [
    ("2000m", []),
    ("1e3", []),
    ("1024", []),
    ("2Gi", ['GS003: Pod default/q container "c": aliyun.com/gpu-mem=2Gi looks like bytes, but the resource counts '
             "GiB; use 2"]),
    ("16000", ['GS003: Pod default/q container "c": aliyun.com/gpu-mem=16000 is more than any card holds (at most '
               "1024 GiB) and looks like MiB (16 GiB rounded up); use 16, or set names.memory_unit: MiB if the device "
               "plugin counts MiB"]),
    ("5.5", ['GS003: Pod default/q container "c": aliyun.com/gpu-mem=5.5 is not a whole number of GiB; use 6']),
    ("0", ['GS003: Pod default/q container "c": aliyun.com/gpu-mem=0 is not 1 or more GiB; use a whole number of '
           "GiB, 1 or more"]),
]


def test_check_reads_the_forms_people_write(tmp_path):
    denials = {}
    for written, _ in WRITTEN:
        path = write_yaml(tmp_path / f"q-{written}.yaml", _pod_with(written))
        done = run_gpushare("check", "--format", "json", path)
        denials[written] = [f["message"] for f in yaml.safe_load(done.stdout)["findings"] if f["rule"] == "GS003"]
    assert denials == dict(WRITTEN)


@pytest.mark.parametrize(("written", "expected"), WRITTEN)
def test_check_and_the_webhook_agree_on_every_form(served, written, expected):
    server, session = served
    response = server.post_json("/validate", admission_review(_pod_with(canonical(written))), session).json()
    assert (response["response"]["allowed"] is True) == (not expected)
