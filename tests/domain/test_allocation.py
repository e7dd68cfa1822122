"""GPU allocation per node and card as `kubectl inspect cgpu` reports it (policies/placement/allocation.py),
read in process; the figures are those of the ACK page "GPU node scheduling labels (ACK managed cluster
Pro)" (15/15 9/15 0/15 0/15, 24/60 (40%) under binpack)."""

from __future__ import annotations

import json

from policies.placement.allocation import cluster_usage, node_usage
from tests.support.cluster_builders import allocation, gpu_node, gpu_pod, snapshot

CORE_ALLOCATION = "gpushare.alibabacloud.com/core-percentage"


def test_the_ack_page_s_binpack_node(settings):
    names = settings.names
    state = snapshot(gpu_node("a", "cgpu", 4, 15), gpu_pod("p1", "a", mem=15, annotations=allocation(0, 15)),
                     gpu_pod("p2", "a", mem=9, annotations=allocation(1, 9)), names=names)
    usage = cluster_usage(state, names)
    [node] = usage.nodes
    assert [(c.index, c.used_mem, c.total_mem) for c in node.cards] == [(0, 15, 15), (1, 9, 15), (2, 0, 15), (3, 0, 15)]
    assert (node.used_mem, node.total_mem, node.mode, node.placement, node.shows_core) == (24, 60, "cgpu", "binpack",
                                                                                          False)
    assert (usage.used_mem, usage.total_mem, usage.percent, usage.max_cards, usage.has_pending) == (24, 60, 40, 4,
                                                                                                   False)
    assert [(p.name, p.mem_by_card, p.mem, p.pending_mem) for p in node.pods] == [("p1", {0: 15}, 15, 0),
                                                                                 ("p2", {1: 9}, 9, 0)]


def test_percent_is_rounded_down_and_pending_memory_counts_on_the_node(settings):
    names = settings.names
    # 11 of 30 GiB is 36.7%: 36, as the pages print whole percents rounded down.
    # The node as the API server sends it (parsed JSON): its label values are read, not written here.
    state = snapshot(json.loads(json.dumps(gpu_node("b", "core_mem", 2, 15))),
                     gpu_pod("c", "b", mem=4, core=30, annotations={**allocation(1, 4),
                                                                   CORE_ALLOCATION: json.dumps({"0": {"1": 30}})}),
                     gpu_pod("waiting", "b", mem=7, core=20), names=names)
    usage = cluster_usage(state, names)
    [node] = usage.nodes
    assert (node.shows_core, node.pending_mem, node.used_mem) == (True, 7, 11)
    assert [(c.used_mem, c.used_core, c.total_core) for c in node.cards] == [(0, 0, 100), (4, 30, 100)]
    assert (usage.percent, usage.has_pending) == (36, True)
    assert [(p.name, p.mem_by_card, p.pending_mem) for p in node.pods] == [("c", {1: 4}, 0), ("waiting", {-1: 7}, 7)]


def test_only_nodes_with_shared_gpu_memory_are_reported(settings):
    names = settings.names
    bare = gpu_node("counts-only", "cgpu", 2)
    bare["status"]["capacity"] = bare["status"]["allocatable"] = {"aliyun.com/gpu-count": "2", "cpu": "8"}
    state = snapshot(gpu_node("x", "share", 1, 16), gpu_node("t", "topology", 8), bare,
                     gpu_node("y", "share", 2, 8, placement="spread"), names=names)
    assert node_usage(state, "missing", names) is None
    assert node_usage(state, "t", names) is None  # whole GPUs only
    assert node_usage(state, "counts-only", names) is None  # cards of no GiB
    usage = cluster_usage(state, names)
    assert [(n.name, len(n.cards), n.placement) for n in usage.nodes] == [("x", 1, "binpack"), ("y", 2, "spread")]
    assert (usage.max_cards, usage.percent) == (2, 0)
    assert [n.name for n in cluster_usage(state, names, only=("y", "t")).nodes] == ["y"]
    assert [n.shows_core for n in usage.nodes] == [False, False]  # compute is shown on core_mem nodes only
    tiny = snapshot(gpu_node("one-gib", "share", 1, 1), names=names)  # 1 GiB is memory to report
    assert [(n.name, n.total_mem) for n in cluster_usage(tiny, names).nodes] == [("one-gib", 1)]
    empty = cluster_usage(snapshot(gpu_node("t", "topology", 8), names=names), names)
    assert (empty.nodes, empty.used_mem, empty.total_mem, empty.percent, empty.max_cards) == ((), 0, 0, 0, 0)
