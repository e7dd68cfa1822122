"""Topology mode: whole GPUs (aliyun.com/gpu) get the best-linked free cards, else the lowest free."""

from __future__ import annotations

import json

from policies.placement.topology import choose_card_set, parse_bandwidth, topology_cards
from policies.scoring.scoring import Scorer, explain, pod_request
from tests.support.cluster_builders import gpu_node, gpu_pod, snapshot

TOPOLOGY = "gpushare.io/gpu-topology"
VISIBLE = "topology.kubernetes.io/gpu-visible"


def two_islands(count: int = 8, fast: int = 300, slow: int = 20) -> str:
    """Two NVLink islands (0-3, 4-7): fast inside an island, PCIe across."""
    half = count // 2
    rows = [[0 if i == j else (fast if (i < half) == (j < half) else slow) for j in range(count)]
            for i in range(count)]
    return json.dumps({"bandwidth": rows})


def rank(state, names, whole: int):
    pod = gpu_pod("train", whole=whole)
    request = pod_request("Pod", pod, names, key="default/train")
    return request, Scorer(names).rank(request, state)


def test_best_linked_set_beats_lowest_indices(settings):
    names = settings.names
    node = gpu_node("a100", "topology", 8, annotations={TOPOLOGY: two_islands()})
    state = snapshot(node, gpu_pod("held", "a100", whole=2, annotations={VISIBLE: "0,1"}), names=names)
    request, [verdict] = rank(state, names, 4)
    assert verdict.fits and verdict.cards == [4, 5, 6, 7]  # one island, not 2,3,4,5 across the slow link
    assert explain(verdict, request.demand) == ["topology: GPUs 4,5,6,7, slowest link 300 GB/s (best on the node 300)"]
    _, [three] = rank(state, names, 3)
    assert three.cards == [4, 5, 6]
    _, [two] = rank(state, names, 2)
    assert two.cards == [2, 3]  # the rest of the first island: as fast, lower indices


def test_without_a_description_the_lowest_free_cards(settings):
    names = settings.names
    state = snapshot(gpu_node("a100", "topology", 8), gpu_pod("held", "a100", whole=2,
                                                              annotations={VISIBLE: "0,1"}), names=names)
    request, [verdict] = rank(state, names, 4)
    assert verdict.cards == [2, 3, 4, 5]
    assert explain(verdict, request.demand) == ["topology: lowest free GPUs 2,3,4,5 (the node describes no links)"]


def test_unrecorded_topology_pods_hold_the_lowest_free_cards(settings):
    names = settings.names
    state = snapshot(gpu_node("a100", "topology", 8),
                     gpu_pod("b-held", "a100", whole=3, annotations={VISIBLE: "0,1,2"}),
                     gpu_pod("a-unrecorded", "a100", whole=2), names=names)
    cards = topology_cards(state.get_node("a100"), state.pods_on_node("a100"), names)
    assert cards.held == {0: "default/b-held", 1: "default/b-held", 2: "default/b-held",
                          3: "default/a-unrecorded", 4: "default/a-unrecorded"}
    _, [verdict] = rank(state, names, 4)
    assert not verdict.fits
    assert verdict.problems == [("GB004", "node a100 has 3 of 8 GPUs free (held by default/a-unrecorded, "
                                          "default/b-held), needs 4")]
    assert not verdict.unresolvable
    _, [never] = rank(state, names, 9)
    assert never.unresolvable


def test_topology_pods_only_on_topology_nodes_and_topology_nodes_only_take_them(settings):
    names = settings.names
    state = snapshot(gpu_node("a100", "topology", 8), gpu_node("shared", "cgpu"), names=names)
    _, ranking = rank(state, names, 1)
    verdicts = {s.node: s for s in ranking}
    assert verdicts["a100"].fits and verdicts["a100"].cards == [0]
    assert verdicts["shared"].problems[0][0] == "GB002"
    shared_pod = pod_request("Pod", gpu_pod("infer", mem=2), names, key="default/infer")
    assert {s.node: s.fits for s in Scorer(names).rank(shared_pod, state)} == {"a100": False, "shared": True}


def test_better_links_score_higher(settings):
    names = settings.names
    state = snapshot(gpu_node("islands", "topology", 8, annotations={TOPOLOGY: two_islands()}),
                     gpu_node("pcie", "topology", 8, annotations={TOPOLOGY: two_islands(fast=20, slow=20)}),
                     gpu_pod("x", "pcie", whole=4, annotations={VISIBLE: "0,1,2,3"}),
                     gpu_pod("y", "islands", whole=4, annotations={VISIBLE: "0,1,4,5"}), names=names)
    _, ranking = rank(state, names, 3)
    scores = {s.node: s for s in ranking}
    # Both nodes end 7/8 full; "pcie" links all at its best (20 of 20), while on "islands" the
    # free cards 2,3 | 6,7 force any three across the slow link (20 of 300).
    assert scores["islands"].cards == [2, 3, 6]  # every set is as slow: the lowest indices
    assert scores["pcie"].score == round(100 * (7 / 8 + 1) / 2)
    assert scores["islands"].score == round(100 * (7 / 8 + 20 / 300) / 2)
    assert [s.node for s in ranking] == ["pcie", "islands"]


def test_bandwidth_annotation_is_checked(settings):
    assert parse_bandwidth("not json", 2)[0] is None
    assert "2 rows" in parse_bandwidth(json.dumps({"bandwidth": [[0, 1]]}), 2)[1]
    assert "not symmetric" in parse_bandwidth(json.dumps({"bandwidth": [[0, 1], [2, 0]]}), 2)[1]
    assert parse_bandwidth(json.dumps({"bandwidth": [[0, 5], [5, 0]]}), 2) == (((0.0, 5.0), (5.0, 0.0)), "")
    names = settings.names
    state = snapshot(gpu_node("odd", "topology", 4, annotations={TOPOLOGY: "[1,2]"}), names=names)
    request, [verdict] = rank(state, names, 2)
    assert verdict.fits and verdict.cards == [0, 1]
    assert explain(verdict, request.demand)[-1].startswith(f"annotation {TOPOLOGY} ignored: needs")


def test_large_nodes_fall_back_to_a_greedy_choice(settings):
    names = settings.names
    node = gpu_node("big", "topology", 32, annotations={TOPOLOGY: two_islands(32)})
    cards = topology_cards(snapshot(node, names=names).get_node("big"), [], names)
    chosen = choose_card_set(cards, 16)  # C(32,16) sets: too many to compare one by one
    assert chosen is not None and (set(chosen) == set(range(16)) or set(chosen) == set(range(16, 32)))
