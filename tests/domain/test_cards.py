"""Card occupancy (policies/placement/cards.py): what the scheduler recorded, what is pending on no card, where a
new container goes and why not; the annotation shapes are those of ACK GPU sharing (docs/scoring.md)."""

from __future__ import annotations

import json

import pytest

from policies.model.cluster import NodeInfo, PodGPU, PodInfo
from policies.model.settings import Names
from policies.placement.card_choice import CardOrder, Placed, choose_cards, no_fit_reasons, place_pod
from policies.placement.cards import (
    PENDING,
    Card,
    NodeCards,
    NoFit,
    card_count,
    node_cards,
    node_mode,
    node_placement,
    recorded_cards,
)

NAMES = Names()
MEM, COUNT = "aliyun.com/gpu-mem", "aliyun.com/gpu-count"
ALLOCATION, CORE_ALLOCATION = "scheduler.framework.gpushare.allocation", "gpushare.alibabacloud.com/core-percentage"
LEGACY = "ALIYUN_COM_GPU_MEM_IDX"


def node(cards: int = 4, gib: int = 15, *, mode: str = "share", placement: str | None = None,
         allocatable: dict[str, int] | None = None, capacity: dict[str, int] | None = None,
         labels: dict[str, str] | None = None) -> NodeInfo:
    node_labels = {"ack.node.gpu.schedule": mode, **(labels or {})}
    if placement:
        node_labels["ack.node.gpu.placement"] = placement
    resources = {MEM: cards * gib, COUNT: cards}
    return NodeInfo("n1", node_labels, {}, "", "", resources if allocatable is None else allocatable,
                    resources if capacity is None else capacity)


def pod(name: str, *gpus: PodGPU, annotations: dict[str, str] | None = None, namespace: str = "default",
        phase: str = "Running") -> PodInfo:
    return PodInfo(namespace, name, f"uid-{name}", "n1", phase, gpus, annotations or {})


def gpu(mem: int, core: int = 0, index: int | None = 0, container: str = "c") -> PodGPU:
    return PodGPU(container, mem, core, index)


def allocation(shares: dict[int, dict[int, int]], annotation: str = ALLOCATION) -> dict[str, str]:
    return {annotation: json.dumps({str(c): {str(k): v for k, v in s.items()} for c, s in shares.items()})}


def used(cards: NodeCards) -> list[tuple[int, int, tuple[str, ...]]]:
    return [(c.used_mem, c.used_core, c.pods) for c in cards.cards]


def choose_card(cards: list[Card], gpu_: PodGPU, key: str, placement: str, limit: int | None):
    """The card one container gets, and when none, why not card by card."""
    chosen = choose_cards(cards, gpu_, key, placement, limit)  # type: ignore[arg-type]
    return (chosen[0], []) if chosen else (None, no_fit_reasons(cards, gpu_, key, limit))


# ---- the node's cards -----------------------------------------------------------------------------

def test_cards_split_the_node_memory_evenly():
    cards = node_cards(node(cards=3, gib=10), [], NAMES)
    assert [(c.index, c.total_mem, c.free_mem, c.used_core) for c in cards.cards] == [
        (0, 10, 10, 0), (1, 10, 10, 0), (2, 10, 10, 0)]
    assert (cards.total_mem, cards.used_mem, cards.mode, cards.placement) == (30, 0, "share", "binpack")


def test_capacity_is_read_when_allocatable_lacks_the_resources():
    cards = node_cards(node(allocatable={}, capacity={MEM: 30, COUNT: 2}), [], NAMES)
    assert [c.total_mem for c in cards.cards] == [15, 15]


def test_card_count_falls_back_to_the_card_count_label():
    bare = node(allocatable={MEM: 32}, capacity={}, labels={"aliyun.accelerator/nvidia_count": "2"})
    assert card_count(bare, NAMES) == 2
    assert [c.total_mem for c in node_cards(bare, [], NAMES).cards] == [16, 16]


@pytest.mark.parametrize("label", ["", "two", "-1"])
def test_no_count_means_no_cards(label):
    bare = node(allocatable={MEM: 32}, capacity={}, labels={"aliyun.accelerator/nvidia_count": label})
    assert card_count(bare, NAMES) == 0
    assert node_cards(bare, [pod("p", gpu(2))], NAMES).cards == []


@pytest.mark.parametrize(("label", "placement"), [("spread", "spread"), ("binpack", "binpack"), (None, "binpack"),
                                                  ("Spread", "binpack")])
def test_placement_label(label, placement):
    assert node_placement(node(placement=label), NAMES) == placement


def test_mode_is_the_schedule_label():
    assert node_mode(node(mode="core_mem"), NAMES) == "core_mem"
    assert node_mode(NodeInfo("n", {}, {}, "", "", {}, {}), NAMES) == ""


def test_a_node_without_the_label_is_judged_by_what_it_advertises():
    # The open-source plugin's nodes (gpushare=true) and nodes whose label was removed ("GPU node
    # scheduling labels": removing a label does not restore exclusive scheduling).
    shared = {MEM: 60, COUNT: 4}
    assert node_mode(NodeInfo("n", {"gpushare": "true"}, {}, "", "", shared, shared), NAMES) == "share"
    core = {**shared, "aliyun.com/gpu-core.percentage": 400}
    assert node_mode(NodeInfo("n", {}, {}, "", "", {}, core), NAMES) == "core_mem"
    assert node_mode(NodeInfo("n", {}, {}, "", "", {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 4}), NAMES) == ""
    assert node_mode(node(mode="default"), NAMES) == "default"  # the label wins


def test_capacity_sizes_the_cards_as_the_scheduler_extender_reads_it():
    # allocatable drops when the device plugin reports a card unhealthy; the healthy cards keep their size
    cards = node_cards(node(allocatable={MEM: 45, COUNT: 4}, capacity={MEM: 60, COUNT: 4}), [], NAMES)
    assert [c.total_mem for c in cards.cards] == [15, 15, 15, 15]


@pytest.mark.parametrize(("mode", "limit"), [("cgpu", 20), ("core_mem", 20), ("share", None), ("", None)])
def test_twenty_pods_per_card_on_cgpu_modes_only(mode, limit):
    assert node_cards(node(mode=mode), [], NAMES).pod_limit() == limit


def test_a_copy_is_independent():
    cards = node_cards(node(cards=1), [pod("a", gpu(2))], NAMES)
    copy = cards.copy()
    place_pod(copy, "default/b", [gpu(3)])
    assert used(cards) == [(0, 0, ())] and cards.pending == {"default/a": 2}
    assert used(copy) == [(3, 0, ("default/b",))]


# ---- what the scheduler recorded -----------------------------------------------------------------

def test_allocation_annotation_charges_the_recorded_cards():
    p = pod("p", gpu(4, index=0), annotations=allocation({0: {2: 4}}))
    assert used(node_cards(node(), [p], NAMES)) == [(0, 0, ()), (0, 0, ()), (4, 0, ("default/p",)), (0, 0, ())]


def test_allocation_annotation_counts_spec_containers_with_sidecars_first():
    p = pod("p", gpu(3, index=1, container="a"), gpu(5, index=3, container="b"),
            annotations=allocation({1: {1: 3}, 3: {3: 5}}))
    assert [c.used_mem for c in node_cards(node(), [p], NAMES).cards] == [0, 3, 0, 5]


def test_a_container_may_hold_memory_on_several_cards():
    p = pod("p", gpu(8, index=0), annotations=allocation({0: {0: 5, 3: 3}}))
    assert [c.used_mem for c in node_cards(node(), [p], NAMES).cards] == [5, 0, 0, 3]


def test_records_without_positions_take_the_annotation_keys_in_order():
    p = pod("p", gpu(3, index=None), gpu(5, index=None), gpu(1, index=None),
            annotations=allocation({7: {1: 3}, 2: {3: 5}}))
    # key 2 is the first container's (5 GiB on card 3), key 7 the second's (3 GiB on card 1); the third
    # has none: pending, on no card
    cards = node_cards(node(), [p], NAMES)
    assert [c.used_mem for c in cards.cards] == [0, 3, 0, 5] and cards.pending == {"default/p": 1}


def test_amounts_may_be_written_as_digit_strings():
    p = pod("p", gpu(3), annotations={ALLOCATION: json.dumps({"0": {"1": "3"}})})
    assert [c.used_mem for c in node_cards(node(), [p], NAMES).cards] == [0, 3, 0, 0]


@pytest.mark.parametrize("text", [
    "not json", "[1, 2]", "", json.dumps({"0": {}}), json.dumps({"0": {"1": 0}}), json.dumps({"0": {"1": -3}}),
    json.dumps({"0": {"1": True}}), json.dumps({"0": {"x": 3}}), json.dumps({"0": {"1": 2.5}}),
    json.dumps({"0": {"9": 3}}), json.dumps({"0": [1]}), json.dumps({"x": {"1": 3}}),
])
def test_an_unusable_allocation_leaves_the_pod_pending(text):
    p = pod("p", gpu(3), annotations={ALLOCATION: text})
    fuller = pod("q", gpu(3), annotations=allocation({0: {2: 10}}))
    cards = node_cards(node(), [p, fuller], NAMES)
    assert [c.used_mem for c in cards.cards] == [0, 0, 10, 0]
    assert cards.pending == {"default/p": 3} and cards.used_mem == 13


@pytest.mark.parametrize(("legacy", "card"), [("2", 2), ("3,1", 3), (" 1 ", 1)])
def test_the_v1_card_index_annotation_holds_the_whole_pod(legacy, card):
    p = pod("p", gpu(2, index=0), gpu(3, index=1), annotations={LEGACY: legacy})
    expected = [0, 0, 0, 0]
    expected[card] = 5
    assert [c.used_mem for c in node_cards(node(), [p], NAMES).cards] == expected
    assert recorded_cards(p, NAMES) == [{card: 2}, {card: 3}]


@pytest.mark.parametrize("legacy", ["", "x", "-1", "9"])
def test_an_unusable_v1_annotation_leaves_the_pod_pending(legacy):
    p = pod("p", gpu(2), annotations={LEGACY: legacy})
    cards = node_cards(node(), [p], NAMES)
    assert [c.used_mem for c in cards.cards] == [0, 0, 0, 0] and cards.pending == {"default/p": 2}


def test_the_v2_annotation_wins_over_the_v1_one():
    p = pod("p", gpu(2), annotations={**allocation({0: {1: 2}}), LEGACY: "3"})
    assert [c.used_mem for c in node_cards(node(), [p], NAMES).cards] == [0, 2, 0, 0]


# ---- compute ------------------------------------------------------------------------------------

def test_core_annotation_charges_compute_per_card():
    p = pod("p", gpu(8, 60, index=0), annotations={**allocation({0: {0: 4, 1: 4}}),
                                                   **allocation({0: {0: 20, 1: 40}}, CORE_ALLOCATION)})
    assert used(node_cards(node(mode="core_mem"), [p], NAMES))[:2] == [(4, 20, ("default/p",)),
                                                                      (4, 40, ("default/p",))]


def test_without_a_core_record_compute_goes_with_most_memory_lowest_index_on_ties():
    most = pod("a", gpu(6, 30), annotations=allocation({0: {1: 2, 2: 4}}))
    tie = pod("b", gpu(6, 20), annotations=allocation({0: {3: 3, 0: 3}}))
    assert [c.used_core for c in node_cards(node(mode="core_mem"), [most, tie], NAMES).cards] == [20, 0, 30, 0]
    tie = pod("c", gpu(6, 20), annotations=allocation({0: {3: 3, 1: 3}}))
    assert [c.used_core for c in node_cards(node(mode="core_mem"), [tie], NAMES).cards] == [0, 20, 0, 0]


def test_a_core_record_naming_a_missing_card_is_replaced_by_the_memory_rule():
    p = pod("p", gpu(4, 30), annotations={**allocation({0: {1: 4}}), **allocation({0: {7: 30}}, CORE_ALLOCATION)})
    assert [c.used_core for c in node_cards(node(mode="core_mem"), [p], NAMES).cards] == [0, 30, 0, 0]


def test_compute_may_fill_a_card_to_exactly_100_percent():
    cards = node_cards(node(cards=1, mode="core_mem"), [pod("a", gpu(2, 70), annotations=allocation({0: {0: 2}}))],
                       NAMES)
    assert place_pod(cards.copy(), "default/b", [gpu(2, 30)]) == Placed([(0,)])
    placed = place_pod(cards.copy(), "default/b", [gpu(2, 35, container="infer")])
    assert placed.cards is None
    assert (placed.no_fit.container, placed.no_fit.reasons) == ("infer", ("GPU0 has 30% compute free, needs 35%",))


# ---- pods without a record: pending, on no card -------------------------------------------------

def test_unrecorded_pods_hold_no_card_and_count_on_the_node():
    # As the scheduler extender's device cache and `kubectl inspect gpushare`'s Pending column count them.
    pods = [pod("b", gpu(10)), pod("a", gpu(10)), pod("c", gpu(3), namespace="aa")]
    cards = node_cards(node(cards=2), pods, NAMES)
    assert used(cards) == [(0, 0, ()), (0, 0, ())]
    assert cards.pending == {"aa/c": 3, "default/a": 10, "default/b": 10}
    assert (cards.used_mem, cards.total_mem) == (23, 30)


def test_an_unrecorded_pod_s_containers_add_up_on_no_card():
    two = pod("two", gpu(4, container="a"), gpu(4, index=1, container="b"))
    cards = node_cards(node(cards=2, gib=16), [two], NAMES)
    assert cards.pending == {"default/two": 8} and cards.used_mem == 8
    assert [(c.free_mem, c.free_core) for c in cards.cards] == [(16, 100), (16, 100)]
    held = node_cards(node(cards=2, gib=16), [pod("p", gpu(6), annotations=allocation({0: {1: 6}}))], NAMES)
    assert [c.free_mem for c in held.cards] == [16, 10]


def test_recorded_pods_are_charged_and_unrecorded_ones_pending():
    pods = [pod("a", gpu(10)), pod("z", gpu(10), annotations=allocation({0: {0: 10}}))]
    cards = node_cards(node(cards=2), pods, NAMES)
    assert [c.used_mem for c in cards.cards] == [10, 0] and cards.pending == {"default/a": 10}


def test_finished_pods_and_pods_without_shared_gpu_hold_nothing():
    pods = [pod("done", gpu(5), phase="Succeeded"), pod("failed", gpu(5), phase="Failed"), pod("cpu")]
    cards = node_cards(node(cards=1), pods, NAMES)
    assert used(cards) == [(0, 0, ())] and cards.pending == {}


def test_cards_of_a_node_that_counts_cards_but_not_their_memory():
    # a topology node, say: its cards have no GiB to share
    for count in (1, 2):
        bare = node(allocatable={COUNT: count}, capacity={})
        assert [(c.index, c.total_mem) for c in node_cards(bare, [], NAMES).cards] == [(i, 0) for i in range(count)]


def test_every_charge_is_heard():
    heard = []
    pods = [pod("a", gpu(4), annotations=allocation({0: {1: 3, 2: 1}})), pod("b", gpu(2))]
    node_cards(node(), pods, NAMES, on_charge=lambda *charge: heard.append(charge))
    assert heard == [(1, "default/a", 3), (2, "default/a", 1), (PENDING, "default/b", 2)]


# ---- where a new container goes ----------------------------------------------------------------

def cards_with(*used_mem: int, pods: tuple[int, ...] | None = None) -> list[Card]:
    return [Card(i, 10, u, 0, tuple(f"ns/p{i}-{k}" for k in range((pods or (0,) * len(used_mem))[i])))
            for i, u in enumerate(used_mem)]


def test_binpack_tries_the_fullest_card_first_lowest_index_on_ties():
    order = CardOrder(cards_with(2, 7, 5, 7), "binpack")
    assert [c.index for c in order.cards] == [1, 3, 2, 0]
    assert order.first_fit(gpu(3), "ns/new", None).index == 1
    assert order.first_fit(gpu(4), "ns/new", None).index == 2
    assert order.first_fit(gpu(9), "ns/new", None) is None


def test_spread_tries_the_emptiest_card_then_fewest_pods_then_lowest_index():
    order = CardOrder(cards_with(5, 2, 2, 2, pods=(0, 3, 1, 1)), "spread")
    assert [c.index for c in order.cards] == [2, 3, 1, 0]
    assert order.first_fit(gpu(3), "ns/new", None).index == 2


def test_choose_card_gives_one_reason_per_card_in_card_order():
    cards = [Card(0, 15, 12, 90), Card(1, 15, 2, 95)]
    card, reasons = choose_card(cards, gpu(4, 10), "ns/p", "binpack", None)
    assert card is None
    assert reasons == ["GPU0 has 3/15 GiB free, needs 4", "GPU1 has 5% compute free, needs 10%"]


def test_the_twenty_pods_per_card_limit():
    full = Card(0, 100, 20, 0, tuple(f"ns/p{i}" for i in range(20)))
    card, reasons = choose_card([full], gpu(1), "ns/new", "binpack", 20)
    assert (card, reasons) == (None, ["GPU0 already runs 20 pods, the cGPU limit is 20"])
    # a pod already on the card (its next container) does not count twice
    assert choose_card([full], gpu(1), "ns/p3", "binpack", 20) == (full, [])
    nineteen = Card(0, 100, 19, 0, tuple(f"ns/p{i}" for i in range(19)))
    assert choose_card([nineteen], gpu(1), "ns/new", "binpack", 20) == (nineteen, [])


def test_memory_may_fill_a_card_exactly():
    assert choose_card([Card(0, 15, 11)], gpu(4), "ns/p", "binpack", None)[0].index == 0
    assert choose_card([Card(0, 15, 12)], gpu(4), "ns/p", "binpack", None)[0] is None


def test_place_pod_takes_cards_container_by_container():
    cards = node_cards(node(cards=2, gib=10, mode="cgpu"), [], NAMES)
    placed = place_pod(cards, "ns/p", [gpu(6, container="a"), gpu(6, container="b"), gpu(4, container="c")])
    assert placed == Placed([(0,), (1,), (0,)])
    assert used(cards) == [(10, 0, ("ns/p",)), (6, 0, ("ns/p",))]


def test_place_pod_names_the_container_that_does_not_fit():
    cards = node_cards(node(cards=1, gib=10), [], NAMES)
    placed = place_pod(cards, "ns/p", [gpu(6, container="a"), gpu(6, container="b")])
    assert placed.cards is None
    assert (placed.no_fit.container, placed.no_fit.reasons) == ("b", ("GPU0 has 4/10 GiB free, needs 6",))
    assert used(cards) == [(0, 0, ())]  # a pod that does not fit leaves the cards as they were


def test_place_pod_on_a_node_without_cards():
    placed = place_pod(NodeCards("n", "share", "binpack", []), "ns/p", [gpu(1, container="a")])
    assert placed.cards is None
    assert (placed.no_fit.container, placed.no_fit.reasons) == ("a", ("the node has no shared GPU cards",))


def test_when_the_policy_choice_leaves_no_room_every_assignment_is_tried():
    # GPU0 has 4 GiB free, GPU1 6. binpack puts "a" (3) on the fuller GPU0 and "b" (4) on GPU1, and
    # then "c" (3) fits neither (1 and 2 free). a->GPU1, b->GPU0, c->GPU1 holds all three: a scheduler
    # choosing that way places the pod, so it is not refused.
    state = NodeCards("n", "share", "binpack", [Card(0, 10, 6), Card(1, 10, 4)])
    placed = place_pod(state, "ns/p", [gpu(3, container="a"), gpu(4, container="b"), gpu(3, container="c")])
    assert placed == Placed([(1,), (0,), (1,)])
    assert [c.used_mem for c in state.cards] == [10, 10]


def test_the_search_also_tries_leaving_a_card_for_later_containers():
    # GPU0 has 6 GiB free, GPU1 4. binpack puts "a" (3) on GPU1 and "b" (3) on GPU0, and "c" (4) then
    # fits neither. The search tries the largest, "c", on GPU0 first (then 3 fits GPU1, the other 3
    # nothing) and then on GPU1, which leaves GPU0 to both 3s. On a cGPU node (20 pods per card, far
    # from reached here) the same. GPU2 is recorded past its size (12 of 10 GiB): it has no room,
    # and takes none from the others (the pod needs all of theirs).
    for mode, limit in (("share", None), ("cgpu", 20)):
        state = NodeCards("n", mode, "binpack", [Card(0, 10, 4), Card(1, 10, 6), Card(2, 10, 12)])
        placed = place_pod(state, "ns/p", [gpu(3, container="a"), gpu(3, container="b"), gpu(4, container="c")],
                           limit)
        assert placed == Placed([(0,), (0,), (1,)]), mode
        assert [c.used_mem for c in state.cards] == [10, 10, 12]
    # With 10% compute each on a core_mem node: GPU0 holds both 3s and 20% of its compute.
    state = NodeCards("n", "core_mem", "binpack", [Card(0, 10, 4), Card(1, 10, 6), Card(2, 10, 12)])
    placed = place_pod(state, "ns/p", [gpu(3, 10, container="a"), gpu(3, 10, container="b"),
                                       gpu(4, 10, container="c")])
    assert placed == Placed([(0,), (0,), (1,)])
    assert [(c.used_mem, c.used_core) for c in state.cards] == [(10, 20), (10, 10), (12, 0)]


def test_the_search_weighs_each_card_s_free_compute():
    # "x" (60%) goes first by binpack onto the fuller GPU0 and leaves "y", which needs a whole card's
    # compute, nowhere; the search puts "y" on GPU0, the only card with 100% free, and "x" on GPU1.
    state = NodeCards("n", "core_mem", "binpack", [Card(0, 10, 5), Card(1, 10, 0, 40)])
    placed = place_pod(state, "ns/p", [gpu(4, 60, container="x"), gpu(4, 100, container="y")])
    assert placed == Placed([(1,), (0,)])
    assert [(c.used_mem, c.used_core) for c in state.cards] == [(9, 100), (4, 100)]


def test_a_pod_asking_more_than_the_node_s_whole_room_is_refused_without_searching():
    # Eleven containers of 10 GiB on ten 10 GiB cards (each card told apart by its compute, so
    # the search could not treat them as one): trying every assignment would pass the search's
    # budget and leave the pod undecided (taken to fit); asking more than all the room there is,
    # in memory or in compute, it is refused with the policy choice's reasons.
    def ten_cards() -> list[Card]:
        return [Card(i, 10, 0, i) for i in range(10)]

    memory = place_pod(NodeCards("n", "share", "binpack", ten_cards()), "ns/p",
                       [PodGPU(f"c{i}", 10, 0, i) for i in range(11)])
    assert memory.no_fit == NoFit("c10", tuple(f"GPU{i} has 0/10 GiB free, needs 10" for i in range(10)))
    compute = place_pod(NodeCards("n", "core_mem", "binpack", ten_cards()), "ns/p",
                        [PodGPU(f"c{i}", 1, 90, i) for i in range(11)])
    assert compute.no_fit == NoFit("c10", tuple(f"GPU{i} has {10 - i}% compute free, needs 90%" for i in range(10)))


def test_a_card_at_the_cgpu_limit_is_no_room_for_a_new_pod():
    # Ten 10 GiB containers, ten 10 GiB cards, but GPU9 already runs 20 pods (the cGPU limit): the
    # room a new pod has is nine cards, so it is refused without a search (which would run past its
    # budget and leave the pod undecided).
    crowd = tuple(f"ns/other-{k}" for k in range(20))
    state = NodeCards("n", "cgpu", "binpack", [Card(i, 10, 0, i) for i in range(9)] + [Card(9, 10, 0, 9, crowd)])
    placed = place_pod(state, "ns/p", [PodGPU(f"c{i}", 10, 0, i) for i in range(10)], 20)
    assert placed.no_fit == NoFit("c9", (*(f"GPU{i} has 0/10 GiB free, needs 10" for i in range(9)),
                                         "GPU9 already runs 20 pods, the cGPU limit is 20"))


def test_a_search_past_its_budget_leaves_the_pod_undecided_and_the_cards_as_they_were():
    # Ten 9 GiB containers and one of 10 on ten 10 GiB cards told apart: the sum fits, no assignment
    # does (a card holds one of them), and proving it means trying millions of orders. Past the
    # budget the pod is taken to fit (never stricter than the scheduler), holding no card.
    state = NodeCards("n", "share", "binpack", [Card(i, 10, 0, i) for i in range(10)])
    placed = place_pod(state, "ns/p", [PodGPU(f"c{i}", 9, 0, i) for i in range(10)] + [PodGPU("big", 10, 0, 10)])
    assert placed == Placed(None) and placed.fits
    assert [c.used_mem for c in state.cards] == [0] * 10


def test_a_card_s_free_compute_is_what_its_pods_leave_of_100_percent():
    # GC001's "the most compute free is N%" reads it.
    card = Card(0, 15, 3, 30)
    assert (card.free_mem, card.free_core) == (12, 70)


def test_a_node_without_cards_names_the_first_container_and_what_it_spreads_over():
    placed = place_pod(NodeCards("n", "cgpu", "binpack", []), "ns/p",
                       [PodGPU("a", 8, 0, 0, 2), PodGPU("b", 4, 0, 1, 2)])
    assert placed.no_fit == NoFit("a", ("the node has no shared GPU cards",), 2)


def test_a_pod_no_assignment_holds_is_refused_with_the_policy_choice_s_reasons():
    state = NodeCards("n", "share", "binpack", [Card(0, 10, 6), Card(1, 10, 4)])
    placed = place_pod(state, "ns/p", [gpu(3, container="a"), gpu(4, container="b"), gpu(4, container="c")])
    assert placed.cards is None
    assert placed.no_fit.container == "c"
    assert placed.no_fit.reasons == ("GPU0 has 1/10 GiB free, needs 4", "GPU1 has 2/10 GiB free, needs 4")


def test_a_container_spread_over_several_cards_takes_its_share_of_each():
    # ACK "Use cGPU to achieve GPU sharing based on multiple GPUs": N GiB over M cards, N/M on each.
    state = NodeCards("n", "cgpu", "binpack", [Card(0, 31), Card(1, 31), Card(2, 31, 20)])
    placed = place_pod(state, "ns/p", [PodGPU("c", 40, 0, 0, 2)])
    assert placed == Placed([(0, 1)])
    assert [c.used_mem for c in state.cards] == [20, 20, 20]
    refused = place_pod(NodeCards("n", "cgpu", "binpack", [Card(0, 31), Card(1, 31, 20)]), "ns/q",
                        [PodGPU("c", 40, 0, 0, 2)])
    assert (refused.no_fit.cards, refused.no_fit.fitting, refused.no_fit.reasons) == (
        2, 1, ("GPU1 has 11/31 GiB free, needs 20",))
    fewer = place_pod(NodeCards("n", "cgpu", "binpack", [Card(0, 31)]), "ns/q", [PodGPU("c", 40, 0, 0, 2)])
    assert fewer.no_fit.reasons == ("the node has 1 card",)


def test_a_container_over_several_cards_takes_them_in_the_node_s_placement_order():
    # 20 GiB over 2 cards on GPU0 (10 of 31 used), GPU1 and GPU2 (empty): binpack takes the fullest
    # first, spread the emptiest.
    for placement, expected in (("binpack", (0, 1)), ("spread", (1, 2))):
        state = NodeCards("n", "cgpu", placement, [Card(0, 31, 10), Card(1, 31), Card(2, 31)])
        assert place_pod(state, "ns/p", [PodGPU("c", 20, 0, 0, 2)]) == Placed([expected]), placement


def test_a_spread_container_that_does_not_fit_counts_the_cards_that_could_take_their_share():
    # 40 GiB over 4 cards is 10 on each: three cards have it, GPU3 (25 of 31 used) does not.
    state = NodeCards("n", "cgpu", "binpack", [Card(0, 31), Card(1, 31), Card(2, 31), Card(3, 31, 25)])
    refused = place_pod(state, "ns/p", [PodGPU("c", 40, 0, 0, 4)])
    assert refused.no_fit == NoFit("c", ("GPU3 has 6/31 GiB free, needs 10",), 4, 3)
    # Over 3 cards on a node of 2: no card is counted, the node's cards are named.
    two = place_pod(NodeCards("n", "cgpu", "binpack", [Card(0, 31), Card(1, 31)]), "ns/p", [PodGPU("c", 30, 0, 0, 3)])
    assert two.no_fit == NoFit("c", ("the node has 2 cards",), 3, -1)


# ---- what `inspect -d` lists per pod ---------------------------------------------------------------

def test_inspect_details_list_each_pod_per_card():
    from policies.placement.allocation import cluster_usage
    from tests.support.cluster_builders import gpu_node, gpu_pod, snapshot
    from webhook.report.inspect_view import detail_table

    split = gpu_pod("split", "n1", mem=6, annotations={ALLOCATION: json.dumps({"0": {"0": 2, "1": 4}})})
    two = gpu_pod("two", "n1", mem=3, namespace="ml", annotations={ALLOCATION: json.dumps({"0": {"0": 3},
                                                                                            "1": {"0": 2}})})
    two["spec"]["containers"].append({"name": "second", "resources": {"limits": {MEM: 2}}})
    pending = gpu_pod("pending", "n1", mem=5)
    state = snapshot(gpu_node("n1", "cgpu", 2, 10), split, two, pending, names=NAMES)
    [usage] = cluster_usage(state, NAMES).nodes
    # split and ml/two as recorded (both containers of ml/two on GPU0, their GiB summed); pending on no card
    assert [(p.namespace, p.name, p.mem_by_card) for p in usage.pods] == [
        ("default", "pending", {PENDING: 5}), ("default", "split", {0: 2, 1: 4}), ("ml", "two", {0: 5})]
    rows = {line.split()[0]: line.split()[1:] for line in detail_table(cluster_usage(state, NAMES)).splitlines()
            if line.split() and line.split()[0] in ("split", "two", "pending", "NAME")}
    assert rows == {"NAME": ["NAMESPACE", "GPU0(Allocated)", "GPU1(Allocated)", "Pending(Allocated)"],
                    "pending": ["default", "0", "0", "5"], "split": ["default", "2", "4", "0"],
                    "two": ["ml", "5", "0", "0"]}


def test_a_pod_already_on_a_crowded_card_later_in_the_order_may_add_a_container():
    fuller = Card(0, 100, 50, 0, tuple(f"ns/a{i}" for i in range(20)))
    mine = Card(1, 100, 20, 0, (*(f"ns/b{i}" for i in range(19)), "ns/mine"))
    order = CardOrder([fuller, mine], "binpack")
    assert [c.index for c in order.cards] == [0, 1]
    assert order.first_fit(gpu(1), "ns/mine", 20) is mine
    assert order.first_fit(gpu(1), "ns/a3", 20) is fuller
    assert order.first_fit(gpu(1), "ns/new", 20) is None


def test_a_memory_only_container_ignores_compute_even_when_a_record_overfills_it():
    overfilled = Card(0, 15, 2, 120)  # two recorded pods of 60 % each
    assert CardOrder([overfilled], "binpack").first_fit(gpu(4), "ns/p", None) is overfilled
    assert choose_card([overfilled], gpu(4), "ns/p", "spread", None) == (overfilled, [])
    assert choose_card([overfilled], gpu(4, 5), "ns/p", "spread", None) == (
        None, ["GPU0 has -20% compute free, needs 5%"])


@pytest.mark.parametrize(("used_core", "request_core"), [(50, 10), (120, 0)])
def test_a_crowded_card_is_reported_as_crowded_whatever_its_compute(used_core, request_core):
    crowded = Card(0, 15, 2, used_core, tuple(f"ns/p{i}" for i in range(20)))
    assert choose_card([crowded], gpu(4, request_core), "ns/new", "binpack", 20) == (
        None, ["GPU0 already runs 20 pods, the cGPU limit is 20"])


# ---- boundaries -------------------------------------------------------------------------------------

def test_a_card_recorded_with_more_than_twenty_pods_is_crowded():
    # a record can overfill a card (pods placed before the limit was enforced): 21 is over 20 too
    crowded = Card(0, 100, 21, 0, tuple(f"ns/p{i}" for i in range(21)))
    assert choose_card([crowded], gpu(1), "ns/new", "binpack", 20) == (
        None, ["GPU0 already runs 21 pods, the cGPU limit is 20"])
    assert choose_card([crowded], gpu(1), "ns/new", "spread", 20) == (
        None, ["GPU0 already runs 21 pods, the cGPU limit is 20"])
    assert choose_card([crowded], gpu(1), "ns/p20", "binpack", 20) == (crowded, [])


def test_a_card_with_exactly_the_memory_asked_is_reported_for_what_it_lacks():
    # memory fits exactly; compute does not, or the card is crowded: that is the reason given
    assert choose_card([Card(0, 15, 11, 95)], gpu(4, 10), "ns/p", "binpack", None) == (
        None, ["GPU0 has 5% compute free, needs 10%"])
    crowded = Card(0, 15, 11, 90, tuple(f"ns/p{i}" for i in range(20)))
    assert choose_card([crowded], gpu(4, 10), "ns/new", "binpack", 20) == (
        None, ["GPU0 already runs 20 pods, the cGPU limit is 20"])


def test_records_without_positions_beyond_the_annotations_entries_are_pending():
    p = pod("p", gpu(3, index=None), gpu(1, index=None), gpu(2, index=None), annotations=allocation({4: {1: 3}}))
    # the first container is recorded on card 1; the other two are pending
    cards = node_cards(node(), [p], NAMES)
    assert [c.used_mem for c in cards.cards] == [0, 3, 0, 0] and cards.pending == {"default/p": 3}


def test_a_record_naming_the_card_just_past_the_last_leaves_it_pending():
    p = pod("p", gpu(3), annotations=allocation({0: {4: 3}}))
    cards = node_cards(node(), [p], NAMES)
    assert [c.used_mem for c in cards.cards] == [0, 0, 0, 0] and cards.pending == {"default/p": 3}
    core = pod("c", gpu(4, 30), annotations={**allocation({0: {1: 4}}), **allocation({0: {4: 30}}, CORE_ALLOCATION)})
    assert [c.used_core for c in node_cards(node(mode="core_mem"), [core], NAMES).cards] == [0, 30, 0, 0]


def test_the_placement_label_as_received():
    spread = node(placement=json.loads('"spread"'))  # decoded from JSON: not the code's own string object
    assert node_placement(spread, NAMES) == "spread"
    assert CardOrder([Card(0, 10, 5), Card(1, 10, 0)], node_placement(spread, NAMES)).cards[0].index == 1


def test_binpack_skips_many_cards_too_full_for_the_request():
    # the order is bisected by free GiB: sixteen cards too full come before the four that fit
    cards = [Card(i, 10, 9 if i < 16 else 0) for i in range(20)]
    order = CardOrder(cards, "binpack")
    assert order.first_fit(gpu(5), "ns/new", None).index == 16
    assert order.first_fit(gpu(1), "ns/new", None).index == 0
    assert order.first_fit(gpu(11), "ns/new", None) is None
