"""Scores and verdicts to the number: binpack, spread, core+mem, topology, exclusive GPUs, the
ranking order and the explanations; the fast one-container path and the general path agree."""

from __future__ import annotations

import json

import pytest

from policies.scoring.scoring import Scorer, card_details, explain, pod_request, ranking_entry
from tests.support.cluster_builders import allocation, gpu_node, gpu_pod, snapshot

TOPOLOGY_ANNOTATION = "gpushare.io/gpu-topology"
MATCH_ALL = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]}]}}}}


def rank(state, pod: dict, names, **kwargs):
    request = pod_request("Pod", pod, names, key=f"default/{pod['metadata']['name']}")
    return Scorer(names).rank(request, state, **kwargs), request.demand


def two_containers(name: str, first: dict, second: dict, **spec) -> dict:
    pod = gpu_pod(name, mem=1)
    pod["spec"]["containers"] = [{"name": "a", "resources": {"limits": first}},
                                 {"name": "b", "resources": {"limits": second}}]
    pod["spec"].update(spec)
    return pod


@pytest.mark.parametrize("spec", [None, MATCH_ALL], ids=["fast path", "general path"])
@pytest.mark.parametrize(("placement", "mem", "card", "score"), [
    ("binpack", 4, 1, round(100 * 10 / 15)), ("spread", 4, 0, round(100 * (1 - 4 / 15))),
    ("binpack", 9, 1, 100), ("spread", 9, 0, round(100 * (1 - 9 / 15))),
])
def test_shared_score_is_how_full_or_empty_the_card_is_after(settings, spec, placement, mem, card, score):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 2, 15, placement=placement),
                     gpu_pod("old", "n1", mem=6, annotations=allocation(1, 6)), names=names)
    [verdict], _ = rank(state, gpu_pod("new", mem=mem, spec=spec), names)
    assert (verdict.fits, verdict.score, verdict.cards) == (True, score, [card])


@pytest.mark.parametrize("spec", [None, MATCH_ALL], ids=["fast path", "general path"])
@pytest.mark.parametrize(("placement", "score"), [("binpack", round(100 * (10 / 15 + 70 / 100) / 2)),
                                                  ("spread", round(100 * (1 - (10 / 15 + 70 / 100) / 2)))])
def test_core_mem_score_averages_memory_and_compute(settings, spec, placement, score):
    names = settings.names
    state = snapshot(gpu_node("n1", "core_mem", 1, 15, placement=placement),
                     gpu_pod("old", "n1", mem=6, core=40, annotations=allocation(0, 6)), names=names)
    [verdict], _ = rank(state, gpu_pod("new", mem=4, core=30, spec=spec), names)
    assert (verdict.fits, verdict.score) == (True, score)


def test_two_containers_score_the_distinct_cards_they_take(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 3, 10), names=names)
    [verdict], demand = rank(state, two_containers("p", {"aliyun.com/gpu-mem": 6}, {"aliyun.com/gpu-mem": 6}),
                             names)
    assert (verdict.cards, verdict.score) == ([0, 1], round(100 * 12 / 20))
    assert card_details(verdict, demand) == [
        {"container": "a", "gpus": [0], "mem": 6, "gpu_mem_before": "0/10", "gpu_mem_after": "6/10"},
        {"container": "b", "gpus": [1], "mem": 6, "gpu_mem_before": "0/10", "gpu_mem_after": "6/10"}]
    [same], demand = rank(state, two_containers("q", {"aliyun.com/gpu-mem": 3}, {"aliyun.com/gpu-mem": 4}), names)
    assert (same.cards, same.score) == ([0, 0], 70)
    assert card_details(same, demand)[1] == {"container": "b", "gpus": [0], "mem": 4, "gpu_mem_before": "3/10",
                                             "gpu_mem_after": "7/10"}
    assert explain(same, demand) == ['binpack: container "a" on GPU0: 0/10 -> 3/10 GiB',
                                     'binpack: container "b" on GPU0: 3/10 -> 7/10 GiB']


def test_card_details_show_compute(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "core_mem", 1, 15), names=names)
    [verdict], demand = rank(state, gpu_pod("new", mem=4, core=30), names)
    assert ranking_entry(verdict, demand) == {
        "node": "n1", "score": round(100 * (4 / 15 + 0.3) / 2), "fits": True,
        "cards": [{"container": "new", "gpus": [0], "mem": 4, "core": 30, "gpu_mem_before": "0/15",
                   "gpu_mem_after": "4/15"}],
        "reasons": ['binpack: container "new" on GPU0: 0/15 -> 4/15 GiB']}


def test_ranking_order_fits_then_score_then_name(settings):
    names = settings.names
    state = snapshot(gpu_node("b-empty", "cgpu", 1, 10), gpu_node("a-empty", "cgpu", 1, 10),
                     gpu_node("c-half", "cgpu", 1, 10), gpu_pod("old", "c-half", mem=5, annotations=allocation(0, 5)),
                     gpu_node("0-exclusive", "default", 1, 10), names=names)
    ranking, _ = rank(state, gpu_pod("new", mem=2), names)
    assert [(s.node, s.fits, s.score) for s in ranking] == [
        ("c-half", True, 70), ("a-empty", True, 20), ("b-empty", True, 20), ("0-exclusive", False, 0)]


def test_nodes_the_state_does_not_know(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 1, 10), names=names)
    ranking, _ = rank(state, gpu_pod("new", mem=2), names, node_names=["ghost", "n1"])
    assert [(s.node, s.fits, s.reasons, s.unresolvable) for s in ranking] == [
        ("n1", True, [], False),
        ("ghost", False, ["state: node ghost is not in the webhook's cluster state (yet)"], False)]


def test_nodes_given_by_the_caller_are_judged_as_given(settings):
    from policies.model.cluster_manifests import node_from_manifest

    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 1, 10), names=names)
    given = node_from_manifest(gpu_node("n1", "cgpu", 1, 4), names)  # the caller's view: a smaller card
    [verdict], _ = rank(state, gpu_pod("new", mem=6), names, nodes=[given])
    assert verdict.reasons == ['GB004: node n1: container "new" fits no card: GPU0 has 4/4 GiB free, needs 6']
    assert verdict.unresolvable


@pytest.mark.parametrize(("have", "wanted", "fits"), [(2, 2, True), (1, 2, False)])
def test_exclusive_gpus_by_allocatable(settings, have, wanted, fits):
    names = settings.names
    node = gpu_node("n1", "default", have, 16)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", "namespace": "default"},
           "spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": wanted}}}]}}
    [verdict], demand = rank(snapshot(node, names=names), pod, names)
    assert (verdict.fits, verdict.score, verdict.cards) == (fits, 0, None)
    if not fits:
        assert verdict.problems == [("NodeResourcesFit", "node n1 has 1 nvidia.com/gpu allocatable, needs 2")]
        assert verdict.unresolvable
    else:
        assert explain(verdict, demand) == ["whole GPUs (2) are counted by kube-scheduler; not scored here"]


def test_exclusive_gpus_read_capacity_when_allocatable_lacks_them(settings):
    names = settings.names
    node = gpu_node("n1", "default", 2, 16)
    del node["status"]["allocatable"]["nvidia.com/gpu"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", "namespace": "default"},
           "spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}
    [verdict], _ = rank(snapshot(node, names=names), pod, names)
    assert verdict.fits


def test_a_pod_without_gpus_is_not_scored(settings):
    names = settings.names
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu", "namespace": "default"},
           "spec": {"containers": [{"name": "c"}], "nodeName": "n1"}}
    request = pod_request("Pod", pod, names, key="default/cpu")
    assert request.pinned_node == "n1"
    [verdict] = Scorer(names).rank(request, snapshot(gpu_node("n1", "cgpu", 1, 10), names=names))
    assert (verdict.fits, verdict.score) == (True, 0)
    assert explain(verdict, request.demand) == ["no GPU requested; kube-scheduler ranks this pod"]
    assert card_details(verdict, request.demand) == []


@pytest.mark.parametrize(("rule_pod", "unresolvable"), [
    (gpu_pod("big", mem=11), True),  # larger than any card
    (gpu_pod("fits-later", mem=6), False),  # a card frees up when a pod goes
    (gpu_pod("whole-card", mem=10), False),  # exactly a card: once the card is empty
    (gpu_pod("core", mem=1, core=30), True),  # GB002: the node's mode
])
def test_unresolvable_means_no_eviction_helps(settings, rule_pod, unresolvable):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 1, 10), gpu_pod("old", "n1", mem=5, annotations=allocation(0, 5)),
                     names=names)
    [verdict], _ = rank(state, rule_pod, names)
    assert (verdict.fits, verdict.unresolvable) == (False, unresolvable)


def topology_node(cards: int, bandwidth: list[list[float]] | None = None, note: str | None = None) -> dict:
    annotations = {}
    if bandwidth is not None:
        annotations[TOPOLOGY_ANNOTATION] = json.dumps({"bandwidth": bandwidth})
    if note is not None:
        annotations[TOPOLOGY_ANNOTATION] = note
    return gpu_node("t1", "topology", cards, 16, annotations=annotations)


def test_topology_score_is_half_fill_half_link_quality(settings):
    names = settings.names
    bandwidth = [[0, 100, 50, 50], [100, 0, 50, 50], [50, 50, 0, 25], [50, 50, 25, 0]]
    state = snapshot(topology_node(4, bandwidth), names=names)
    [verdict], demand = rank(state, gpu_pod("t", whole=2), names)
    assert (verdict.cards, verdict.score) == ([0, 1], round(100 * (2 / 4 + 1.0) / 2))
    assert explain(verdict, demand) == ["topology: GPUs 0,1, slowest link 100 GB/s (best on the node 100)"]
    assert card_details(verdict, demand) == [{"container": None, "gpus": [0, 1], "min_link_gbps": 100.0}]
    [three], demand = rank(state, gpu_pod("t", whole=3), names)
    assert (three.cards, three.score) == ([0, 1, 2], round(100 * (3 / 4 + 0.5) / 2))


def test_topology_without_links(settings):
    names = settings.names
    state = snapshot(topology_node(4), gpu_pod("held", "t1", whole=1), names=names)
    [two], demand = rank(state, gpu_pod("t", whole=2), names)
    assert (two.cards, two.score) == ([1, 2], round(100 * (3 / 4 + 0.5) / 2))
    assert explain(two, demand) == ["topology: lowest free GPUs 1,2 (the node describes no links)"]
    [one], demand = rank(state, gpu_pod("t", whole=1), names)
    assert (one.cards, one.score) == ([1], round(100 * (2 / 4 + 1.0) / 2))
    assert explain(one, demand) == ["topology: GPU 1"]


def test_topology_unusable_annotation_is_explained(settings):
    names = settings.names
    state = snapshot(topology_node(2, note="not json"), names=names)
    [verdict], demand = rank(state, gpu_pod("t", whole=1), names)
    assert explain(verdict, demand)[0] == "topology: GPU 0"
    assert explain(verdict, demand)[1].startswith(f"annotation {TOPOLOGY_ANNOTATION} ignored: not JSON")


@pytest.mark.parametrize(("wanted", "unresolvable"), [(3, True), (2, False)])
def test_topology_not_enough_cards(settings, wanted, unresolvable):
    names = settings.names
    state = snapshot(topology_node(2), gpu_pod("held", "t1", whole=1), names=names)
    [verdict], _ = rank(state, gpu_pod("t", whole=wanted), names)
    assert (verdict.fits, verdict.unresolvable) == (False, unresolvable)


# ---- values that place a pod nowhere (what the scheduler extender asks first) -----------------------------

def _unusable(names, limits, requests=None):
    from policies.model.resources import container_requests
    from policies.scoring.scoring import unusable_values

    resources = {"limits": limits, **({"requests": requests} if requests else {})}
    spec = {"containers": [{"name": "c", "resources": resources}]}
    return unusable_values(container_requests(spec, ("spec",), names), names)


@pytest.mark.parametrize(("limits", "expected"), [
    ({"aliyun.com/gpu-mem": "abc"},
     [("GS003", "aliyun.com/gpu-mem='abc' is not a quantity ('abc' is not a quantity)")]),
    ({"aliyun.com/gpu-mem": "2Gi"}, [("GS003", "aliyun.com/gpu-mem='2Gi' looks like bytes, but the resource counts "
                                               "GiB")]),
    ({"aliyun.com/gpu-mem": "0"}, [("GS003", "aliyun.com/gpu-mem='0' is not 1 or more GiB")]),
    ({"aliyun.com/gpu-mem": "1"}, []),
    ({"aliyun.com/gpu-mem": "1024"}, []),
    ({"aliyun.com/gpu-mem": "1025"},
     [("GS003", "aliyun.com/gpu-mem='1025' is more than any card holds (at most 1024 GiB) and looks like MiB "
                "(2 GiB rounded up)")]),
    ({"aliyun.com/gpu-core.percentage": "0"},
     [("GS001", "aliyun.com/gpu-core.percentage='0' is not a percentage of one card (1..100)")]),
    ({"aliyun.com/gpu-core.percentage": "-1"},
     [("GS001", "aliyun.com/gpu-core.percentage='-1' is not a percentage of one card (1..100)")]),
    ({"aliyun.com/gpu-core.percentage": "1"}, []),
    ({"aliyun.com/gpu-core.percentage": "100"}, []),
    ({"aliyun.com/gpu-core.percentage": "101"},
     [("GS001", "aliyun.com/gpu-core.percentage='101' is not a percentage of one card (1..100)")]),
    ({"nvidia.com/gpu": "1.5"}, [("NodeResourcesFit", "nvidia.com/gpu='1.5' is not a whole number >= 1")]),
    ({"aliyun.com/gpu": "x"}, [("NodeResourcesFit", "aliyun.com/gpu='x' is not a quantity ('x' is not a quantity)")]),
    ({"aliyun.com/gpu": 2000, "nvidia.com/gpu": 3000}, []),  # whole GPUs have no card-size bound here
])
def test_unusable_values_word_for_word(settings, limits, expected):
    assert _unusable(settings.names, limits) == [(rule, f'container "c": {why}') for rule, why in expected]


def test_unusable_values_in_resource_order_limits_before_requests(settings):
    limits = {"aliyun.com/gpu": "x", "aliyun.com/gpu-mem": "2Gi"}
    requests = {"aliyun.com/gpu-mem": "3000", "nvidia.com/gpu": "-1"}
    assert _unusable(settings.names, limits, requests) == [
        ("GS003", "container \"c\": aliyun.com/gpu-mem='2Gi' looks like bytes, but the resource counts GiB"),
        ("GS003", "container \"c\": aliyun.com/gpu-mem='3000' is more than any card holds (at most 1024 GiB) and "
                  "looks like MiB (3 GiB rounded up)"),
        ("NodeResourcesFit", "container \"c\": nvidia.com/gpu='-1' is not a whole number >= 1"),
        ("NodeResourcesFit", "container \"c\": aliyun.com/gpu='x' is not a quantity ('x' is not a quantity)")]


def test_a_zero_of_whole_gpus_is_no_request_and_no_problem(settings):
    # kube-scheduler skips a zero request (noderesources fit.go, fitsRequest); the kubelet's device
    # manager allocates nothing for one (devicemanager manager.go, devicesToAllocate).
    assert _unusable(settings.names, {"nvidia.com/gpu": "0", "aliyun.com/gpu": "0", "aliyun.com/gpu-mem": "2"}) == []
    assert _unusable(settings.names, {"nvidia.com/gpu": "-1"}) == [
        ("NodeResourcesFit", "container \"c\": nvidia.com/gpu='-1' is not a whole number >= 1")]


def test_a_score_is_rounded_not_cut(settings):
    names = settings.names
    # one of three whole GPUs, no links to weigh: (1/3 + 1) / 2 = 66.7 %
    [one], _ = rank(snapshot(topology_node(3), names=names), gpu_pod("t", whole=1), names)
    assert (one.cards, one.score) == ([0], 67)


def test_core_mem_containers_on_two_cards_count_both_cards_compute(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "core_mem", 2, 10), names=names)
    core = {"aliyun.com/gpu-mem": 6, "aliyun.com/gpu-core.percentage": 30}
    [verdict], _ = rank(state, two_containers("p", core, core), names)
    # memory 12 of 20 GiB, compute 60 of 200 %
    assert (verdict.cards, verdict.score) == ([0, 1], round(100 * (12 / 20 + 60 / 200) / 2))


def test_a_pod_whose_gpu_mem_gs003_refuses_is_not_ranked_on_gpus(settings):
    names = settings.names
    [verdict], demand = rank(snapshot(gpu_node("n1", "cgpu", 1, 10), names=names), gpu_pod("p", mem="2Gi"), names)
    assert (verdict.fits, verdict.score, verdict.cards) == (True, 0, None)
    assert explain(verdict, demand) == ['not ranked on GPUs: container "p": aliyun.com/gpu-mem=2Gi refused by GS003; '
                                        "fix it to see where the pod fits"]


def test_a_state_without_a_change_log_gets_fresh_profiles_every_call(settings):
    from policies.model.cluster_manifests import pod_from_manifest

    names = settings.names
    inner = snapshot(gpu_node("n1", "cgpu", 1, 10), gpu_node("n2", "cgpu", 1, 10), names=names)

    class Plain:  # only what ClusterState promises: no generation, no changes_since
        def nodes(self):
            return inner.nodes()

        def pods_on_node(self, name):
            return inner.pods_on_node(name)

    scorer, state = Scorer(names), Plain()
    request = pod_request("Pod", gpu_pod("new", mem=6), names, key="default/new")
    assert [(s.node, s.fits) for s in scorer.rank(request, state)] == [("n1", True), ("n2", True)]
    inner.upsert_pod(pod_from_manifest(gpu_pod("old", "n1", mem=5, annotations=allocation(0, 5)), names))
    assert [(s.node, s.fits) for s in scorer.rank(request, state)] == [("n2", True), ("n1", False)]


def test_card_details_add_each_container_to_what_the_card_holds(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 1, 12), gpu_pod("old", "n1", mem=6, annotations=allocation(0, 6)),
                     names=names)
    [verdict], demand = rank(state, two_containers("p", {"aliyun.com/gpu-mem": 2}, {"aliyun.com/gpu-mem": 2}),
                             names)
    assert [(d["gpu_mem_before"], d["gpu_mem_after"]) for d in card_details(verdict, demand)] == [
        ("6/12", "8/12"), ("8/12", "10/12")]


@pytest.mark.parametrize("spec", [None, MATCH_ALL], ids=["fast path", "general path"])
def test_core_mem_score_on_a_card_with_little_compute_left(settings, spec):
    names = settings.names
    state = snapshot(gpu_node("n1", "core_mem", 1, 15), gpu_pod("old", "n1", mem=6, core=70,
                                                                annotations=allocation(0, 6)), names=names)
    [verdict], _ = rank(state, gpu_pod("new", mem=4, core=20, spec=spec), names)
    assert (verdict.fits, verdict.score) == (True, round(100 * (10 / 15 + 90 / 100) / 2))


@pytest.mark.parametrize(("core", "unresolvable"), [(100, False), (150, True)])
def test_compute_of_a_whole_card_is_resolvable_more_is_not(settings, core, unresolvable):
    names = settings.names
    state = snapshot(gpu_node("n1", "core_mem", 1, 15), gpu_pod("old", "n1", mem=2, core=10,
                                                                annotations=allocation(0, 2)), names=names)
    [verdict], _ = rank(state, gpu_pod("new", mem=2, core=core), names)
    assert (verdict.fits, verdict.unresolvable) == (False, unresolvable)


def test_topology_cards_all_held_is_resolvable(settings):
    names = settings.names
    state = snapshot(topology_node(2), gpu_pod("a", "t1", whole=1), gpu_pod("b", "t1", whole=1), names=names)
    [verdict], _ = rank(state, gpu_pod("t", whole=1), names)
    assert (verdict.fits, verdict.unresolvable) == (False, False)


def test_topology_links_all_zero_weigh_as_unknown(settings):
    names = settings.names
    state = snapshot(topology_node(2, [[0, 0], [0, 0]]), names=names)
    [verdict], demand = rank(state, gpu_pod("t", whole=2), names)
    assert (verdict.cards, verdict.score) == ([0, 1], round(100 * (2 / 2 + 0.5) / 2))
    assert explain(verdict, demand) == ["topology: GPUs 0,1, slowest link 0 GB/s (best on the node 0)"]


def test_unusable_values_check_requests_after_usable_limits(settings):
    assert _unusable(settings.names, {"aliyun.com/gpu-mem": 2}, {"aliyun.com/gpu-mem": "2Gi"}) == [
        ("GS003", "container \"c\": aliyun.com/gpu-mem='2Gi' looks like bytes, but the resource counts GiB")]
    assert _unusable(settings.names, {"aliyun.com/gpu": "1.5"}) == [
        ("NodeResourcesFit", "container \"c\": aliyun.com/gpu='1.5' is not a whole number >= 1")]
