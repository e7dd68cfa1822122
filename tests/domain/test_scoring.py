"""Node filtering and scoring: seed 003's pictures, card choice, recorded cards, topology."""

from __future__ import annotations

import json

import pytest

from policies.model.cluster_manifests import pod_from_manifest
from policies.placement.cards import node_cards
from policies.placement.placement import placement_problems
from policies.scoring.scoring import Scorer, explain, pod_request, ranking_entry
from tests.support.cluster_builders import allocation, gpu_node, gpu_pod, snapshot


def request_for(pod: dict, names) -> object:
    meta = pod["metadata"]
    return pod_request("Pod", pod, names, key=f"{meta.get('namespace', 'default')}/{meta['name']}")


def inspect_row(state, node: str, names) -> str:
    """One line in the shape `kubectl inspect cgpu` prints: GPU0 15/15 ... and the node total."""
    cards = node_cards(state.get_node(node), state.pods_on_node(node), names)
    per_card = " ".join(f"{c.used_mem}/{c.total_mem}" for c in cards.cards)
    return f"{per_card} {cards.used_mem}/{cards.total_mem}"


def schedule(state, scorer: Scorer, pod: dict, names, *, record: bool) -> tuple[str, int]:
    """Place the pod where the ranking says, as the scheduler would, and add it to the state."""
    best = scorer.rank(request_for(pod, names), state)[0]
    assert best.fits, best.reasons
    card = best.cards[0]
    mem = pod["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"]
    pod["spec"]["nodeName"] = best.node
    if record:
        pod["metadata"]["annotations"] = allocation(card, mem)
    state.upsert_pod(pod_from_manifest(pod, names))
    return best.node, card


# Seed 003: GPU0(Allocated/Total) 15/15, GPU1 9/15, GPU2 0/15, GPU3 0/15, GPU Memory 24/60. Pods bound without
# a card record (bound around the scheduler): the extender counts them on no card, so each new pod is judged
# against free cards, and they count only in the node's total.
@pytest.mark.parametrize(("record", "chosen", "row"), [
    (True, [0, 0, 0, 0, 1, 1], "15/15 9/15 0/15 0/15 24/60"),
    (False, [0, 0, 0, 0, 0, 0], "0/15 0/15 0/15 0/15 24/60"),
], ids=["recorded-by-scheduler", "recorded-on-no-card"])
def test_binpack_fills_gpu0_to_15_of_15_before_gpu1_takes_9(settings, record, chosen, row):
    names = settings.names
    state = snapshot(gpu_node("cn-shanghai.192.0.2.109", "cgpu", 4, 15, placement="binpack"), names=names)
    scorer = Scorer(names)
    assert [schedule(state, scorer, gpu_pod(f"job-{i}", mem=mem), names, record=record)[1]
            for i, mem in enumerate([4, 4, 4, 3, 4, 5])] == chosen
    assert inspect_row(state, "cn-shanghai.192.0.2.109", names) == row


def test_spread_gives_4_of_15_on_three_cards(settings):
    names = settings.names
    state = snapshot(gpu_node("cn-shanghai.192.0.2.109", "cgpu", 4, 15, placement="spread"), names=names)
    scorer = Scorer(names)
    chosen = [schedule(state, scorer, gpu_pod(f"job-{i}", mem=4), names, record=True)[1] for i in range(3)]
    assert chosen == [0, 1, 2]
    assert inspect_row(state, "cn-shanghai.192.0.2.109", names) == "4/15 4/15 4/15 0/15 12/60"


def test_binpack_scores_the_fuller_node_higher_and_spread_the_emptier(settings):
    names = settings.names
    state = snapshot(
        gpu_node("full", "cgpu", 2, 15, placement="binpack"), gpu_node("empty", "cgpu", 2, 15, placement="binpack"),
        gpu_pod("old", "full", mem=8, annotations=allocation(0, 8)),
        gpu_node("s-full", "cgpu", 2, 15, placement="spread"), gpu_node("s-empty", "cgpu", 2, 15, placement="spread"),
        gpu_pod("old2", "s-full", mem=8, annotations=allocation(0, 8)), gpu_pod("old3", "s-full", mem=8,
                                                                          annotations=allocation(1, 8)),
        names=names)
    scores = {s.node: s.score for s in Scorer(names).rank(request_for(gpu_pod("new", mem=4), names), state)}
    assert scores["full"] == round(100 * 12 / 15) > scores["empty"] == round(100 * 4 / 15)
    assert scores["s-empty"] == round(100 * 11 / 15) > scores["s-full"] == round(100 * 3 / 15)


def test_a_node_that_does_not_fit_says_which_card_has_how_much(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 2, 15), gpu_pod("a", "n1", mem=15, annotations=allocation(0, 15)),
                     gpu_pod("b", "n1", mem=12, annotations=allocation(1, 12)), names=names)
    [verdict] = Scorer(names).rank(request_for(gpu_pod("new", mem=4), names), state)
    assert not verdict.fits
    assert verdict.reasons == ['GB004: node n1: container "new" fits no card: GPU0 has 0/15 GiB free, needs 4; '
                               'GPU1 has 3/15 GiB free, needs 4']
    assert not verdict.unresolvable  # evicting a pod would make room
    too_big = Scorer(names).rank(request_for(gpu_pod("huge", mem=16), names), state)[0]
    assert too_big.unresolvable  # no card of 15 GiB ever holds 16


def test_twenty_pods_per_card_on_cgpu_then_the_next_card(settings):
    names = settings.names
    pods = [gpu_pod(f"tiny-{i:02}", "n1", mem=1, annotations=allocation(0, 1)) for i in range(20)]
    state = snapshot(gpu_node("n1", "cgpu", 2, 40), *pods, names=names)
    [verdict] = Scorer(names).rank(request_for(gpu_pod("one-more", mem=1), names), state)
    assert verdict.fits and verdict.cards == [1]  # GPU0 has room by memory, not by the cGPU limit
    state.upsert_pod(pod_from_manifest(gpu_pod("blocker", "n1", mem=40, annotations=allocation(1, 40)), names))
    [verdict] = Scorer(names).rank(request_for(gpu_pod("one-more", mem=1), names), state)
    assert verdict.problems[0][0] == "GB003"
    assert "GPU0 already runs 20 pods, the cGPU limit is 20" in verdict.problems[0][1]


def test_core_mem_pods_only_on_core_mem_nodes_and_never_mixed(settings):
    names = settings.names
    state = snapshot(gpu_node("cm", "core_mem"), gpu_node("cg", "cgpu"), gpu_node("cm-busy", "core_mem"),
                     gpu_pod("memonly", "cm-busy", mem=2), names=names)
    ranking = Scorer(names).rank(request_for(gpu_pod("job", mem=2, core=30), names), state)
    by_node = {s.node: s for s in ranking}
    assert by_node["cm"].fits and by_node["cm"].score == round(100 * ((2 / 15) + 0.30) / 2)
    assert by_node["cg"].problems[0][0] == "GB002" and by_node["cg"].unresolvable
    assert by_node["cm-busy"].problems[0][0] == "GB001" and not by_node["cm-busy"].unresolvable
    assert ranking[0].node == "cm"


def test_static_cpu_policy_and_exclusive_nodes_are_filtered(settings):
    names = settings.names
    static = gpu_node("static", "cgpu", labels={"gpushare.io/cpu-manager-policy": "static"})
    state = snapshot(static, gpu_node("excl", "default"), names=names)
    ranking = {s.node: s for s in Scorer(names).rank(request_for(gpu_pod("p", mem=2), names), state)}
    assert ranking["static"].problems[0][0] == "GB005"
    assert ranking["excl"].problems[0][0] == "GB002"
    exclusive = {s.node: s for s in Scorer(names).rank(request_for(
        gpu_pod("w", spec={"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}),
        names), state)}
    assert exclusive["excl"].fits
    assert exclusive["static"].problems == [("NodeResourcesFit", "node static has 0 nvidia.com/gpu allocatable, "
                                                                 "needs 2")]


def test_ranking_agrees_with_placement_problems_on_the_demo_cluster(settings, demo_state):
    """The ranking's verdicts are the binding checks' verdicts (GB001-GB005), node by node."""
    names = settings.names
    pods = [gpu_pod("a", mem=4), gpu_pod("b", mem=2, core=30), gpu_pod("c", mem=20), gpu_pod("d", whole=4)]
    scorer = Scorer(names)
    for pod in pods:
        request = request_for(pod, names)
        for verdict in scorer.rank(request, demo_state):
            node = demo_state.get_node(verdict.node)
            expected = placement_problems(request.demand, node, demo_state.pods_on_node(node.name), names)
            assert verdict.fits == expected.fits and list(verdict.problems) == expected.problems
            assert verdict.cards == (expected.cards if expected.fits else None)


def test_scorer_cache_follows_changes_on_a_node(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 1, 15), names=names)
    scorer = Scorer(names)
    request = request_for(gpu_pod("new", mem=10), names)
    assert scorer.rank(request, state)[0].fits
    state.upsert_pod(pod_from_manifest(gpu_pod("big", "n1", mem=8, annotations=allocation(0, 8)), names))
    assert not scorer.rank(request, state)[0].fits
    state.remove_pod("default", "big")
    assert scorer.rank(request, state)[0].fits
    finished = gpu_pod("done", "n1", mem=8, phase="Succeeded")
    state.upsert_pod(pod_from_manifest(finished, names))
    assert scorer.rank(request, state)[0].fits  # finished pods hold no memory


def test_recorded_allocation_is_keyed_by_container_index(settings):
    """{"1": {"2": 7}}: the second container (index 1) holds 7 GiB on GPU2; a sidecar at 0 holds none."""
    names = settings.names
    pod = gpu_pod("svc", "n1", annotations={"scheduler.framework.gpushare.allocation": json.dumps({"1": {"2": 7}})})
    pod["spec"]["containers"] = [{"name": "sidecar", "image": "envoy"},
                                 {"name": "model", "image": "cuda", "resources": {"limits": {"aliyun.com/gpu-mem": 7}}}]
    state = snapshot(gpu_node("n1", "cgpu", 4, 15), pod, names=names)
    assert [c.used_mem for c in node_cards(state.get_node("n1"), state.pods_on_node("n1"), names).cards] == [0, 0, 7, 0]


def test_recorded_allocation_across_two_cards_and_compute(settings):
    names = settings.names
    annotations = {"scheduler.framework.gpushare.allocation": json.dumps({"0": {"1": 6, "3": 6}}),
                   "gpushare.alibabacloud.com/core-percentage": json.dumps({"0": {"1": 30, "3": 30}})}
    state = snapshot(gpu_node("n1", "core_mem", 4, 15), gpu_pod("wide", "n1", mem=12, core=60,
                                                                 annotations=annotations), names=names)
    cards = node_cards(state.get_node("n1"), state.pods_on_node("n1"), names).cards
    assert [(c.used_mem, c.used_core) for c in cards] == [(0, 0), (6, 30), (0, 0), (6, 30)]


def test_legacy_card_index_annotation(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "share", 4, 15), gpu_pod("old", "n1", mem=5,
                                                            annotations={"ALIYUN_COM_GPU_MEM_IDX": "3"}), names=names)
    assert [c.used_mem for c in node_cards(state.get_node("n1"), state.pods_on_node("n1"), names).cards] == [0, 0, 0, 5]


def test_unusable_records_leave_the_pod_pending(settings):
    names = settings.names
    bad = [{"scheduler.framework.gpushare.allocation": "not json"},
           {"scheduler.framework.gpushare.allocation": json.dumps({"0": {"9": 5}})},  # no GPU9 on the node
           {"ALIYUN_COM_GPU_MEM_IDX": "-1"}]
    for records in bad:
        state = snapshot(gpu_node("n1", "cgpu", 2, 15), gpu_pod("p", "n1", mem=5, annotations=records),
                         names=names)
        cards = node_cards(state.get_node("n1"), state.pods_on_node("n1"), names)
        assert ([c.used_mem for c in cards.cards], cards.pending) == ([0, 0], {"default/p": 5}), records


def test_ranking_entry_shows_cards_before_and_after(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 2, 15), gpu_pod("a", "n1", mem=11, annotations=allocation(1, 11)),
                     names=names)
    request = request_for(gpu_pod("new", mem=4), names)
    [verdict] = Scorer(names).rank(request, state)
    entry = ranking_entry(verdict, request.demand)
    assert entry == {"node": "n1", "score": 100, "fits": True,
                     "cards": [{"container": "new", "gpus": [1], "mem": 4, "gpu_mem_before": "11/15",
                                "gpu_mem_after": "15/15"}],
                     "reasons": ['binpack: container "new" on GPU1: 11/15 -> 15/15 GiB']}
    assert explain(verdict, request.demand) == entry["reasons"]


def test_two_containers_fill_cards_in_turn(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 2, 15), names=names)
    pod = gpu_pod("pair")
    pod["spec"]["containers"] = [{"name": "a", "resources": {"limits": {"aliyun.com/gpu-mem": 10}}},
                                 {"name": "b", "resources": {"limits": {"aliyun.com/gpu-mem": 10}}}]
    request = request_for(pod, names)
    [verdict] = Scorer(names).rank(request, state)
    assert verdict.fits and verdict.cards == [0, 1] and verdict.score == round(100 * 20 / 30)
    pod["spec"]["containers"][1]["resources"]["limits"]["aliyun.com/gpu-mem"] = 5
    [verdict] = Scorer(names).rank(request_for(pod, names), state)
    assert verdict.cards == [0, 0] and verdict.score == 100  # GPU0 ends 15/15


def test_change_log_names_the_nodes_touched(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu"), gpu_node("n2", "cgpu"), names=names)
    start = state.generation
    state.upsert_pod(pod_from_manifest(gpu_pod("a", "n2", mem=1), names))
    state.upsert_pod(pod_from_manifest(gpu_pod("a", "n1", mem=1), names))  # moved: both nodes changed
    state.remove_node("n2")
    assert state.changes_since(start) == ["n2", "n2", "n1", "n2"]
    assert state.changes_since(state.generation) == []


def test_scorer_follows_nodes_coming_and_going_and_a_truncated_log(settings):
    names = settings.names
    state = snapshot(gpu_node("n1", "cgpu", 1, 15), names=names)
    state.CHANGE_LOG = 4  # remember few changes, so the scorer must start over
    scorer = Scorer(names)
    request = request_for(gpu_pod("new", mem=10), names)
    assert [s.node for s in scorer.rank(request, state)] == ["n1"]
    state.upsert_node(snapshot(gpu_node("n2", "cgpu", 1, 15), names=names).get_node("n2"))
    assert {s.node for s in scorer.rank(request, state)} == {"n1", "n2"}
    seen = state.generation
    for i in range(6):  # more changes than the log keeps
        state.upsert_pod(pod_from_manifest(gpu_pod(f"p{i}", "n1", mem=1, annotations=allocation(0, 1)), names))
    assert state.changes_since(seen) is None
    verdicts = {s.node: s for s in scorer.rank(request, state)}
    assert not verdicts["n1"].fits and verdicts["n2"].fits
    state.remove_node("n2")
    assert [s.node for s in scorer.rank(request, state)] == ["n1"]
    assert [s.node for s in scorer.rank(request, state, node_names=["n2"])] == ["n2"]
    assert scorer.rank(request, state, node_names=["n2"])[0].problems[0][0] == "state"


def test_one_scorer_over_two_states_ranks_each_by_its_own_nodes(settings):
    # GC001 keeps one scorer per configuration; a dry run or a check may hand it another state
    names = settings.names
    first = snapshot(gpu_node("n1", "cgpu", 1, 10), gpu_node("n3", "cgpu", 1, 10), names=names)
    second = snapshot(gpu_node("n1", "cgpu", 1, 4), gpu_node("n2", "cgpu", 1, 10), names=names)
    assert first.generation == second.generation
    scorer = Scorer(names)
    request = request_for(gpu_pod("new", mem=6), names)
    assert [(s.node, s.fits) for s in scorer.rank(request, first)] == [("n1", True), ("n3", True)]
    assert [(s.node, s.fits) for s in scorer.rank(request, second)] == [("n2", True), ("n1", False)]
    later = snapshot(gpu_node("n1", "cgpu", 1, 4), gpu_node("n2", "cgpu", 1, 10), gpu_node("n4", "cgpu", 1, 10),
                     names=names)
    assert [(s.node, s.fits) for s in scorer.rank(request, first)] == [("n1", True), ("n3", True)]
    assert [(s.node, s.fits) for s in scorer.rank(request, later)] == [("n2", True), ("n4", True), ("n1", False)]


def test_a_container_spread_over_two_cards_fills_both_with_its_share(settings):
    names = settings.names
    pod = gpu_pod("p", mem=8)
    pod["metadata"]["labels"] = {"aliyun.com/gpu-count": "2"}  # 4 GiB on each of two cards
    state = snapshot(gpu_node("bin", "cgpu", 2, 15, placement="binpack"),
                     gpu_node("spr", "cgpu", 2, 15, placement="spread"), names=names)
    ranked = Scorer(names).rank(request_for(pod, names), state)
    # 8 of the two cards' 30 GiB: binpack scores how full, spread how empty.
    assert [(s.node, s.score, s.cards) for s in ranked] == [("spr", 73, [0, 1]), ("bin", 27, [0, 1])]
    core = gpu_pod("p", mem=8, core=40)
    core["metadata"]["labels"] = {"aliyun.com/gpu-count": "2"}  # 20 % of each card
    [scored] = Scorer(names).rank(request_for(core, names), snapshot(gpu_node("cm", "core_mem", 2, 15), names=names))
    assert scored.score == round(100 * (8 / 30 + 40 / 200) / 2)
