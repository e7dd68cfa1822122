"""Counting as the GPU-sharing scheduler counts, word for word (docs/design.md, "Counting as the
scheduler counts"): init containers, nodes without the mode label, pods spread over several cards
(the multi-GPU label), and pods the scheduler recorded on no card."""

from __future__ import annotations

from policies.model.cluster_manifests import pod_from_manifest
from policies.model.resources import container_requests
from policies.placement.placement import demand_from_containers, judge, node_profile
from tests.support.cluster_builders import allocation, gpu_node, gpu_pod, snapshot
from tests.support.cluster_objects import binding
from tests.support.manifests import MEM, container, pod, pod_spec, received, workload

MULTI = "aliyun.com/gpu-count"


def verdict(engine, obj, state=None, kind=None):
    kind = kind or obj["kind"]
    return engine.validate(engine.subject(kind, received(obj), namespace="default", state=state))


def messages(engine, obj, rule, state=None, kind=None):
    return [f.message for f in verdict(engine, obj, state, kind).findings if f.rule == rule]


def spread(obj, cards: str):
    """The pod, or the workload's pod template, labelled to spread its gpu-mem over ``cards`` cards."""
    meta = obj["metadata"] if obj["kind"] == "Pod" else obj["spec"]["template"].setdefault("metadata", {})
    meta.setdefault("labels", {})[MULTI] = cards
    return obj


# ---- init containers -------------------------------------------------------------------------------

def test_an_init_container_s_gpu_mem_is_on_no_card(settings):
    # Kubernetes: init containers run to completion before the app containers start; the extender and
    # the device plugin count spec.containers only.
    spec = pod_spec(container("app", limits={MEM: 8}), init=[container("warm", limits={MEM: 8})])
    state = snapshot(gpu_node("n1", "cgpu", 1, 12), names=settings.names)
    demand = demand_from_containers("default/p", container_requests(spec, ("spec",), settings.names),
                                    settings.names)
    assert [g.container for g in demand.gpus] == ["app"]
    profile = node_profile(state.get_node("n1"), [], settings.names)
    assert judge(demand, profile, settings.names).problems == []


def test_gs008_warns_about_gpu_mem_on_an_init_container(engine):
    obj = pod(pod_spec(container("app", limits={MEM: 4}), init=[container("warm", limits={MEM: 8})]))
    assert [(f.rule, f.severity, f.message) for f in verdict(engine, obj).findings] == [(
        "GS008", "warn", 'GS008: Pod default/p init container "warm": aliyun.com/gpu-mem=8 holds no card: the '
                         "scheduler counts app containers only, and the device plugin gives it a GPU only if it "
                         "equals their sum (4); move it to an app container")]
    equal = pod(pod_spec(container("app", limits={MEM: 8}), init=[container("warm", limits={MEM: 8})]))
    assert messages(engine, equal, "GS008") == []


def test_gs008_names_a_native_sidecar(engine):
    sidecar = {**container("proxy", limits={MEM: 2}), "restartPolicy": "Always"}
    obj = workload("Deployment", pod_spec(container("app", limits={MEM: 4}), init=[sidecar]))
    assert messages(engine, obj, "GS008") == [
        'GS008: Deployment default/w init container "proxy" (a sidecar): aliyun.com/gpu-mem=2 holds no card: the '
        "scheduler counts app containers only, and the device plugin gives it a GPU only if it equals their sum "
        "(4); move it to an app container"]


def test_whole_gpus_count_the_effective_request_with_sidecars(settings):
    # Kubernetes "Effective Pod requests and limits": max(init + sidecars before it, apps + sidecars).
    side = {**container("side", limits={"aliyun.com/gpu": 1}), "restartPolicy": "Always"}
    spec = pod_spec(container("a", limits={"aliyun.com/gpu": 2}),
                    init=[container("i1", limits={"aliyun.com/gpu": 4}), side,
                          container("i2", limits={"aliyun.com/gpu": 3})])
    demand = demand_from_containers("ns/p", container_requests(spec, ("spec",), settings.names), settings.names)
    assert demand.topology_gpus == 4  # max(4, 1 + 3, 2 + 1)


# ---- nodes without the mode label ---------------------------------------------------------------------

def test_a_binding_onto_a_node_that_offers_shared_gpu_without_the_label_is_allowed_with_a_warning(engine, settings):
    node = gpu_node("n1", "share", 2, 15)
    del node["metadata"]["labels"]["ack.node.gpu.schedule"]
    node["metadata"]["labels"]["gpushare"] = "true"  # the open-source plugin's label
    state = snapshot(node, gpu_pod("p", mem=4), names=settings.names)
    judged = verdict(engine, binding("p", "n1"), state, "Binding")
    assert judged.allowed
    assert [(f.rule, f.severity, f.message) for f in judged.findings] == [(
        "GB002", "warn", "GB002: Binding default/p: node n1 has no ack.node.gpu.schedule label; judged as share, "
                         "which its aliyun.com/gpu-mem capacity shows; label the node to say so")]


# ---- several cards per container (the multi-GPU label) -------------------------------------------------

def test_gs009_n_over_m_is_a_whole_number(engine):
    assert messages(engine, spread(pod(pod_spec(container("c", limits={MEM: 8}))), "4"), "GS009") == []
    assert messages(engine, spread(pod(pod_spec(container("c", limits={MEM: 9}))), "4"), "GS009") == [
        'GS009: Pod default/p container "c": aliyun.com/gpu-mem=9 over 4 cards (aliyun.com/gpu-count=4) is 2.25 '
        "a card, not a whole number; use 12"]
    assert messages(engine, spread(workload("Job", pod_spec(container("c", limits={MEM: 8}))), "two"), "GS009") == [
        "GS009: Job default/w: label aliyun.com/gpu-count='two' is not a number of cards; use a whole number, 1 or "
        "more"]


def test_a_spread_pod_gets_its_share_on_each_of_m_cards(engine, settings):
    # The case: 40 GiB over 2 cards onto two empty 31 GiB cards: 20 on each.
    state = snapshot(gpu_node("n1", "cgpu", 2, 31), spread(gpu_pod("p", mem=40), "2"), names=settings.names)
    assert verdict(engine, binding("p", "n1"), state, "Binding").findings == []
    record = pod_from_manifest(received(spread(gpu_pod("p", mem=40), "2")), settings.names)
    assert [(g.mem, g.cards, g.mem_per_card) for g in record.gpus] == [(40, 2, 20)]


def test_a_spread_pod_needs_m_cards_with_room(engine, settings):
    state = snapshot(gpu_node("n1", "cgpu", 2, 31), gpu_pod("held", "n1", mem=20, annotations=allocation(1, 20)),
                     spread(gpu_pod("p", mem=40), "2"), names=settings.names)
    assert messages(engine, binding("p", "n1"), "GB004", state, "Binding") == [
        'GB004: Binding default/p (container "p" aliyun.com/gpu-mem=40 over 2 cards): node n1: container "p" '
        "needs 2 cards and 1 fits: GPU1 has 11/31 GiB free, needs 20; bind it to a node with a card that fits "
        'container "p" aliyun.com/gpu-mem=40 over 2 cards']


def test_gc001_a_spread_larger_than_any_node_s_card_count(engine, settings):
    state = snapshot(gpu_node("a", "cgpu", 2, 31), gpu_node("b", "share", 4, 15), names=settings.names)
    obj = spread(gpu_pod("p", mem=40), "8")
    assert messages(engine, obj, "GC001", state) == [
        'GC001: Pod default/p cannot run on any node the cluster has: container "p" spreads over 8 cards (pod label '
        "aliyun.com/gpu-count) and the most any node that could take it has is 4 (node b); accepted: a "
        "aliyun.com/gpu-count label of at most 4"]
    assert messages(engine, spread(gpu_pod("q", mem=40), "4"), "GC001", state) == []  # 10 on each of b's 4 cards


# ---- §2: GC001 names the resource that does not fit ------------------------------------------------------

def test_gc001_blames_compute_when_a_card_has_the_memory(engine, settings):
    busy = {**allocation(0, 3), "gpushare.alibabacloud.com/core-percentage": '{"0": {"0": 90}}'}
    state = snapshot(gpu_node("n1", "core_mem", 1, 15), gpu_pod("held", "n1", mem=3, core=90, annotations=busy),
                     names=settings.names)
    assert messages(engine, gpu_pod("p", mem=2, core=30), "GC001", state) == [
        'GC001: Pod default/p cannot be scheduled now: container "p" (aliyun.com/gpu-core.percentage=30) fits no '
        "card of the nodes that could take it right now: the most compute free is 10% on GPU0 of node n1; it stays "
        "Pending until compute is freed"]
