"""Topology mode: whole GPUs (aliyun.com/gpu) get the best-linked free cards, else the lowest free."""

from __future__ import annotations

import json

import pytest

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


def links(count: int, bandwidth) -> str:
    """A node annotation whose link between cards i and j is ``bandwidth(i, j)`` GB/s."""
    return json.dumps({"bandwidth": [[0 if i == j else bandwidth(min(i, j), max(i, j)) for j in range(count)]
                                     for i in range(count)]})


def node_cards(settings, node, *pods):
    names = settings.names
    state = snapshot(node, *pods, names=names)
    return topology_cards(state.get_node(node["metadata"]["name"]), state.pods_on_node(node["metadata"]["name"]),
                          names)


def test_card_count_from_the_whole_gpu_resource_else_the_card_count_label(settings):
    node = gpu_node("t", "topology", 8, labels={"aliyun.accelerator/nvidia_count": "4"})
    assert node_cards(settings, node).count == 8  # what the device plugin publishes wins over the label
    del node["status"]["allocatable"]["aliyun.com/gpu"]
    assert node_cards(settings, node).count == 8  # capacity, when allocatable does not list it
    del node["status"]["capacity"]["aliyun.com/gpu"]
    assert node_cards(settings, node).count == 4  # not published yet: the card-count label
    for label in ("four", "", "-4"):
        node["metadata"]["labels"]["aliyun.accelerator/nvidia_count"] = label
        cards = node_cards(settings, node)
        assert (cards.count, cards.free()) == (0, [])
        assert choose_card_set(cards, 1) is None


@pytest.mark.parametrize(("text", "count", "why"), [
    ("not json", 2, "not JSON (Expecting value: line 1 column 1 (char 0))"),
    ("[[0, 1], [1, 0]]", 2, 'needs {"bandwidth": [...]} with 2 rows, one per card'),
    ('{"bandwidth": [[0, 1], [1, 0]]}', 3, 'needs {"bandwidth": [...]} with 3 rows, one per card'),
    ('{"links": [[0, 1], [1, 0]]}', 2, 'needs {"bandwidth": [...]} with 2 rows, one per card'),
    ('{"bandwidth": [[0, 1], [1]]}', 2, "row 1 must list 2 non-negative numbers"),
    ('{"bandwidth": [[0, 1], 1]}', 2, "row 1 must list 2 non-negative numbers"),
    ('{"bandwidth": [[0, true], [true, 0]]}', 2, "row 0 must list 2 non-negative numbers"),
    ('{"bandwidth": [[0, "5"], ["5", 0]]}', 2, "row 0 must list 2 non-negative numbers"),
    ('{"bandwidth": [[0, 5], [-1, 0]]}', 2, "row 1 must list 2 non-negative numbers"),
    ('{"bandwidth": [[0, 5], [5, -0.5]]}', 2, "row 1 must list 2 non-negative numbers"),
    # The first link that differs from its mirror is named, whichever cards it joins.
    (links(3, lambda i, j: 1).replace("[1, 1, 0]", "[2, 1, 0]"), 3, "not symmetric: card 0 to 2 is 1, 2 to 0 is 2"),
    (links(4, lambda i, j: 1).replace("[1, 1, 0, 1]", "[1, 1, 0, 7.5]"), 4,
     "not symmetric: card 2 to 3 is 7.5, 3 to 2 is 1"),
    ('{"bandwidth": [[0, 1], [1, 0], [1, 1]]}', 2, 'needs {"bandwidth": [...]} with 2 rows, one per card'),
    ('{"bandwidth": [[0, 1, 1], [1, 0]]}', 2, "row 0 must list 2 non-negative numbers"),
])
def test_an_unusable_bandwidth_annotation_is_named_and_ignored(settings, text, count, why):
    assert parse_bandwidth(text, count) == (None, why)
    cards = node_cards(settings, gpu_node("odd", "topology", count, annotations={TOPOLOGY: text}))
    assert cards.bandwidth is None and cards.note == f"annotation {TOPOLOGY} ignored: {why}"
    assert choose_card_set(cards, 2) == (0, 1)  # as without the annotation: the lowest free cards


def test_a_usable_bandwidth_annotation(settings):
    assert parse_bandwidth('{"bandwidth": [[0, 12.5, 0], [12.5, 0, 3], [0, 3, 0]]}', 3) == (
        ((0.0, 12.5, 0.0), (12.5, 0.0, 3.0), (0.0, 3.0, 0.0)), "")
    cards = node_cards(settings, gpu_node("pair", "topology", 2, annotations={TOPOLOGY: links(2, lambda i, j: 50)}))
    assert (cards.best_link, cards.note) == (50.0, "")
    one = node_cards(settings, gpu_node("one", "topology", 1, annotations={TOPOLOGY: '{"bandwidth": [[0]]}'}))
    assert one.bandwidth == ((0.0,),) and one.best_link == 0.0  # one card has no link
    with pytest.raises(AttributeError):  # read-only: scoring keeps it across reviews
        one.count = 2  # type: ignore[misc]
    quiet = node_cards(settings, gpu_node("slow", "topology", 3, annotations={TOPOLOGY: links(3, lambda i, j: 0.5)}))
    assert choose_card_set(quiet, 2) == (0, 1)  # links under 1 GB/s are links all the same


def test_the_diagonal_is_ignored_on_nodes_of_any_size(settings):
    # Some tools report a card's bandwidth to itself on the diagonal: it is no link between two cards.
    for count, best in ((4, 45.0), (260, 46.0)):
        rows = [[900 if i == j else 40 + (i + j) % 7 for j in range(count)] for i in range(count)]
        text = json.dumps({"bandwidth": rows})
        matrix, why = parse_bandwidth(text, count)
        assert why == "" and matrix is not None and len(matrix) == count
        cards = node_cards(settings, gpu_node("big", "topology", count, annotations={TOPOLOGY: text}))
        assert cards.best_link == best


def test_which_pods_hold_whole_gpus(settings):
    names = settings.names
    node = gpu_node("t", "topology", 4)
    cards = node_cards(settings, node,
                       gpu_pod("one", "t", whole=1, annotations={VISIBLE: "3"}),
                       gpu_pod("done", "t", whole=1, annotations={VISIBLE: "0"}, phase="Succeeded"),
                       gpu_pod("cpu", "t", annotations={VISIBLE: "1"}),  # no whole GPU asked: holds none
                       gpu_pod("bad", "t", whole=1, annotations={VISIBLE: "2,x"}),  # unreadable: the lowest free
                       gpu_pod("out", "t", whole=1, annotations={VISIBLE: "4"}),  # no such card: the lowest free
                       gpu_pod("past", "t", whole=1, annotations={VISIBLE: "9"}))
    assert cards.held == {3: "default/one", 0: "default/bad", 1: "default/out", 2: "default/past"}
    assert cards.free() == []
    state = snapshot(node, gpu_pod("done", "t", whole=1, annotations={VISIBLE: "0"}, phase="Failed"), names=names)
    _, [verdict] = rank(state, names, 4)
    assert verdict.fits and verdict.cards == [0, 1, 2, 3]


def islands(count: int, *speeds: int, cross: int = 20) -> str:
    """Islands of ``count // len(speeds)`` cards, the n-th linked at ``speeds[n]`` GB/s inside, ``cross`` across."""
    size = count // len(speeds)
    return links(count, lambda i, j: speeds[i // size] if i // size == j // size else cross)


def test_the_set_and_the_words_for_each_size_of_request(settings):
    names = settings.names
    node = gpu_node("a100", "topology", 8, annotations={TOPOLOGY: islands(8, 300, 300)})
    state = snapshot(node, gpu_pod("held", "a100", whole=3, annotations={VISIBLE: "0,1,2"}), names=names)
    request, [two] = rank(state, names, 2)
    assert two.cards == [4, 5]  # not 3,4 across the islands, though they are the lowest free
    assert explain(two, request.demand) == ["topology: GPUs 4,5, slowest link 300 GB/s (best on the node 300)"]
    request, [one] = rank(state, names, 1)
    assert one.cards == [3] and explain(one, request.demand) == ["topology: GPU 3"]
    request, [five] = rank(state, names, 5)
    assert five.cards == [3, 4, 5, 6, 7]  # every free card
    assert explain(five, request.demand) == ["topology: GPUs 3,4,5,6,7, slowest link 20 GB/s (best on the node 300)"]
    _, [six] = rank(state, names, 6)
    assert not six.fits


def test_small_nodes_compare_every_set(settings):
    # Growing a set from its best link (the greedy choice for large nodes) ends at 10 GB/s here;
    # comparing every set of three finds GPUs 3,4,5, all linked at 50 GB/s or more.
    fast = {(1, 2), (1, 4), (2, 3), (0, 5), (3, 5), (4, 5)}
    text = links(6, lambda i, j: 100 if (i, j) in fast else 50 if (i, j) in {(0, 2), (3, 4)} else 10)
    cards = node_cards(settings, gpu_node("six", "topology", 6, annotations={TOPOLOGY: text}))
    assert choose_card_set(cards, 3) == (3, 4, 5)


@pytest.mark.parametrize(("speeds", "held", "wanted", "expected"), [
    # Two islands alike: the lowest indices.
    ((300, 300), "", 16, range(16)),
    # The first island has a card held: the whole second one, not the lowest free cards across both.
    ((300, 300), "0", 16, range(16, 32)),
    # The faster island holds what is asked, though the slower one would as well.
    ((300, 200), "0", 15, range(1, 16)),
    ((200, 300), "0", 15, range(16, 31)),
])
def test_large_nodes_grow_the_best_linked_set(settings, speeds, held, wanted, expected):
    pods = [gpu_pod("held", "big", whole=1, annotations={VISIBLE: held})] if held else []
    cards = node_cards(settings, gpu_node("big", "topology", 32, annotations={TOPOLOGY: islands(32, *speeds)}), *pods)
    assert choose_card_set(cards, wanted) == tuple(expected)  # C(31, 15) sets: too many to compare one by one
