"""Where a new pod's containers go (policies/placement/card_choice.py): the policy's order, the greedy
choice, and the search of every assignment that runs before a pod is refused (docs/design.md,
"several containers"; containers spread over cards: ACK "Use cGPU to achieve GPU sharing based on
multiple GPUs", N/M GiB on each of M cards)."""

from __future__ import annotations

import pytest

from policies.model.cluster import PodGPU
from policies.placement.card_choice import CardOrder, Placed, choose_cards, place_pod
from policies.placement.cards import Card, NodeCards, NoFit


def spread(container: str, mem: int, cards: int, core: int = 0) -> PodGPU:
    """A container asking ``mem`` GiB (and ``core`` percent) over ``cards`` cards."""
    return PodGPU(container, mem, core, 0, cards)


def test_compute_may_fill_a_card_exactly():
    cards = [Card(0, 15, 0, 40), Card(1, 15, 0, 50)]
    assert CardOrder(cards, "binpack").first_fit(PodGPU("c", 4, 60, 0), "ns/p", None) == cards[0]
    assert CardOrder(cards, "binpack").first_fit(PodGPU("c", 4, 61, 0), "ns/p", None) is None
    assert [c.index for c in choose_cards(cards, spread("c", 8, 2, 100), "ns/p", "binpack", None) or []] == [0, 1]


def test_the_search_places_containers_spread_over_cards():
    # spread puts "a" (5 GiB) on the emptiest card, GPU1, and "b" (6 GiB on each of two cards) then
    # finds one card with 6 free. The search places "b" first (the larger share): GPU0 and GPU1, and
    # "a" on GPU2.
    state = NodeCards("n", "share", "spread", [Card(0, 10, 4), Card(1, 10), Card(2, 10, 5)])
    placed = place_pod(state, "ns/p", [PodGPU("a", 5, 0, 0), spread("b", 12, 2)])
    assert placed == Placed([(2,), (0, 1)])
    assert [c.used_mem for c in state.cards] == [10, 6, 10]


def test_cards_that_look_alike_are_one_choice_and_the_search_goes_past_them():
    # GPU0 and GPU1 look alike (8 free), GPU2 and GPU3 too (6 free). binpack puts "b" (4 on each of two
    # cards) on GPU2 and GPU3, "a" (8) on GPU0, and "d" (4 on each of two) finds one card with room.
    # The search places "a" first (the largest share), on GPU0 for both 8s; then "b" on one 8 and one 6,
    # "d" on what is left of each.
    state = NodeCards("n", "share", "binpack", [Card(0, 10, 2), Card(1, 10, 2), Card(2, 10, 4), Card(3, 10, 4)])
    placed = place_pod(state, "ns/p", [spread("b", 8, 2), PodGPU("a", 8, 0, 1), spread("d", 8, 2)])
    assert placed == Placed([(1, 2), (0,), (1, 3)])
    assert [c.used_mem for c in state.cards] == [10, 10, 8, 8]


def test_spread_containers_asking_more_than_all_the_room_are_refused_without_searching():
    # Eleven containers of 10 GiB, each over two cards (5 on each), on ten 10 GiB cards told apart
    # (by their compute): 110 GiB for 100. Searching every assignment would pass the search's
    # budget and leave the pod undecided; the room there is refuses it at once. The same in compute:
    # 100% over two cards is 50% on each, 1,100% for ten cards of 100%.
    def ten_cards() -> list[Card]:
        return [Card(i, 10, 0, i) for i in range(10)]

    memory = place_pod(NodeCards("n", "share", "binpack", ten_cards()), "ns/p",
                       [spread(f"c{i}", 10, 2) for i in range(11)])
    assert memory.no_fit == NoFit("c10", tuple(f"GPU{i} has 0/10 GiB free, needs 5" for i in range(10)), 2, 0)
    cards = [Card(i, 20, i) for i in range(10)]
    compute = place_pod(NodeCards("n", "core_mem", "binpack", cards), "ns/p",
                        [spread(f"c{i}", 2, 2, 100) for i in range(11)])
    assert compute.no_fit == NoFit("c10", tuple(f"GPU{i} has 0% compute free, needs 50%" for i in range(10)), 2, 0)


def test_a_card_past_the_cgpu_limit_is_no_room_either():
    # GPU9 runs 21 pods (more than the limit of 20: placed before the limit, or by hand): the room
    # is nine cards, and ten containers of 10 GiB are refused at once.
    crowd = tuple(f"ns/other-{k}" for k in range(21))
    state = NodeCards("n", "cgpu", "binpack", [Card(i, 10, 0, i) for i in range(9)] + [Card(9, 10, 0, 9, crowd)])
    placed = place_pod(state, "ns/p", [PodGPU(f"c{i}", 10, 0, i) for i in range(10)], 20)
    assert placed.no_fit == NoFit("c9", (*(f"GPU{i} has 0/10 GiB free, needs 10" for i in range(9)),
                                         "GPU9 already runs 21 pods, the cGPU limit is 20"))


def test_a_node_without_cards_names_the_first_container_and_its_cards():
    placed = place_pod(NodeCards("n", "cgpu", "binpack", []), "ns/p", [spread("a", 8, 2), PodGPU("b", 4, 0, 1)])
    assert placed.no_fit == NoFit("a", ("the node has no shared GPU cards",), 2)


def cards_of(*shapes: tuple[int, int, int]) -> list[Card]:
    """10 GiB cards, each (GiB used, compute % used, pods running) by other pods."""
    return [Card(i, 10, mem, core, tuple(f"ns/o{k}" for k in range(pods)))
            for i, (mem, core, pods) in enumerate(shapes)]


# Pods whose containers the policy's greedy choice cannot place: the search then finds where
# they all go (the first assignment it meets, largest share first), or refuses with the greedy
# attempt's reasons. Each case turns on one thing the search must weigh.
SEARCHES = {
    "the card the greedy choice took is left to the container that needs its compute":
        ("spread", None, [(5, 0, 1), (5, 50, 20)], [("a", 4, 40, 1), ("b", 2, 60, 1)], [(1,), (0,)]),
    "compute may fill a card exactly":
        ("binpack", None, [(0, 0, 20), (0, 20, 0)], [("a", 2, 20, 1), ("b", 4, 100, 1)], [(1,), (0,)]),
    "memory may fill a card exactly":
        ("spread", None, [(4, 20, 19), (0, 40, 20)], [("a", 6, 60, 1), ("b", 8, 40, 1)], [(0,), (1,)]),
    "a container over two cards takes one the first container is on":
        ("binpack", None, [(0, 0, 20), (4, 0, 1)], [("a", 6, 40, 1), ("b", 6, 0, 2)], [(0,), (0, 1)]),
    "a spread container's room is counted per card, in memory and compute":
        ("binpack", None, [(2, 0, 20), (0, 0, 1)], [("a", 5, 0, 1), ("b", 10, 120, 2)], [(1,), (0, 1)]),
    "the room there is counts whole containers":
        ("spread", None, [(2, 0, 19), (5, 0, 1)], [("a", 4, 0, 1), ("b", 8, 0, 1)], [(1,), (0,)]),
    "the largest share is placed first":
        ("binpack", None, [(4, 0, 20), (5, 0, 1), (0, 20, 1)], [("a", 4, 120, 2), ("b", 5, 100, 1)], [(1, 2), (0,)]),
    "of equal memory, the larger compute is placed first":
        ("binpack", None, [(0, 0, 1), (4, 20, 0)], [("a", 3, 40, 1), ("b", 6, 0, 1), ("c", 6, 40, 1)],
         [(0,), (1,), (0,)]),
    "a pod's own card stays open to its other containers at the cGPU limit":
        ("binpack", 20, [(0, 40, 19), (2, 50, 0)], [("a", 5, 20, 1), ("b", 8, 80, 2)], [(0,), (0, 1)]),
    "a card at the cGPU limit takes no share of a new pod":
        ("binpack", 20, [(6, 20, 20), (6, 0, 1)], [("a", 4, 0, 2)],
         NoFit("a", ("GPU0 already runs 20 pods, the cGPU limit is 20",), 2, 1)),
    "a card past the cGPU limit takes none either":
        ("spread", 20, [(2, 40, 19), (0, 50, 21)], [("a", 4, 40, 2)],
         NoFit("a", ("GPU1 already runs 21 pods, the cGPU limit is 20",), 2, 1)),
    "no card has the compute":
        ("binpack", None, [(2, 50, 0), (2, 20, 20)], [("a", 8, 100, 1)],
         NoFit("a", ("GPU0 has 50% compute free, needs 100%", "GPU1 has 80% compute free, needs 100%"))),
    "no card has the memory":
        ("binpack", None, [(5, 40, 1), (5, 50, 19)], [("a", 6, 60, 1)],
         NoFit("a", ("GPU0 has 5/10 GiB free, needs 6", "GPU1 has 5/10 GiB free, needs 6"))),
}


@pytest.mark.parametrize("case", SEARCHES)
def test_the_search_of_every_assignment(case):
    placement, limit, shapes, containers, expected = SEARCHES[case]
    state = NodeCards("n", "core_mem", placement, cards_of(*shapes))
    gpus = [PodGPU(name, mem, core, i, cards) for i, (name, mem, core, cards) in enumerate(containers)]
    placed = place_pod(state, "ns/p", gpus, limit)
    if isinstance(expected, NoFit):
        assert placed == Placed(None, expected)
        assert state.cards == cards_of(*shapes)  # a refused pod takes nothing
    else:
        assert placed == Placed(expected)
        taken = {i: sum(g.mem_per_card for g, cards in zip(gpus, expected, strict=True) if i in cards)
                 for i in range(len(shapes))}
        assert [c.used_mem for c in state.cards] == [shapes[i][0] + taken[i] for i in range(len(shapes))]


def test_a_search_within_its_budget_refuses_the_pod_no_assignment_holds():
    # Six 8 GiB containers and one of 9 on six 10 GiB cards told apart (by their compute): 57 GiB fit
    # the 60 there are, but a card holds one of them. Proving it takes 1,956 choices, within the
    # search's 2,000: the pod is refused, not left undecided (as one past the budget is: test_cards).
    cards = [Card(i, 10, 0, i) for i in range(6)]
    gpus = [PodGPU(f"c{i}", 8, 0, i) for i in range(6)] + [PodGPU("big", 9, 0, 6)]
    placed = place_pod(NodeCards("n", "core_mem", "binpack", cards), "ns/p", gpus)
    assert placed.no_fit == NoFit("big", tuple(f"GPU{i} has 2/10 GiB free, needs 9" for i in range(6)))
    assert placed.cards is None and not placed.fits
