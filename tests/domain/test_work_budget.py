"""What one review may spend on GC001's question (policies/placement/work_budget.py): the cap is
reached exactly where docs/operations.md ("What one review may cost") says, each kind of work
weighs what it says, and a pod past the cap is told what it asked."""

from __future__ import annotations

import json
from typing import Any

import pytest

from policies.model.resources import container_requests
from policies.model.selectors import node_selector_from_spec
from policies.placement.capacity_index import CapacityIndex
from policies.placement.placement import demand_from_containers
from policies.placement.work_budget import TooCostly, WorkBudget, too_costly
from tests.support.cluster_builders import allocation, gpu_node, gpu_pod, snapshot
from webhook.settings import Settings

NAMES = Settings().names


class Recording(WorkBudget):
    """A budget that keeps each charge, in order."""

    __slots__ = ("charges",)

    def __init__(self, cap: int) -> None:
        super().__init__(cap)
        self.charges: list[int] = []

    def charge(self, units: int) -> None:
        self.charges.append(units)
        super().charge(units)


def test_a_review_may_spend_exactly_the_cap_and_not_one_unit_more():
    budget = WorkBudget(30)
    budget.charge(10)
    budget.charge(20)
    assert budget.spent == 30
    with pytest.raises(TooCostly) as raised:
        budget.charge(1)
    assert raised.value.cap == 30 and str(raised.value) == "more than 30 units of work"
    assert budget.spent == 31


def test_each_kind_of_work_weighs_what_the_operations_guide_says():
    """A pod pinned to one host, on a cold index of three nodes: the grouping by hostname is built
    (a node added: 5, plus 1 for the one label read, each), the hostname and its group looked up (1
    each), one group asked about (10), its one node's maps built (5 a node), the largest card, the
    most cards and the candidates read from its maps (1 each), and the container placed on each of
    the node's two cards (10 each)."""
    state = snapshot(gpu_node("n0", "share", 2, 16), gpu_node("n1", "share", 2, 16),
                     gpu_node("n2", "core_mem", 4, 16), names=NAMES)
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {"aliyun.com/gpu-mem": 4}}}],
                            "nodeSelector": {"kubernetes.io/hostname": "n1"}}
    demand = demand_from_containers("", container_requests(spec, ("spec",), NAMES), NAMES)
    budget = Recording(10**6)
    verdict = CapacityIndex(NAMES).verdict(state, demand, node_selector_from_spec(spec, ("spec",)), budget)
    assert verdict.never == "" and verdict.not_now == ""  # it fits on n1
    assert budget.charges == [6, 6, 6, 1, 1, 10, 5, 1, 1, 1, 20]
    assert budget.spent == 58


def container(name: str, mem: int, core: int | None = None) -> dict[str, Any]:
    limits: dict[str, Any] = {"aliyun.com/gpu-mem": mem}
    if core is not None:
        limits["aliyun.com/gpu-core.percentage"] = core
    return {"name": name, "resources": {"limits": limits}}


NODES = (gpu_node("n0", "share", 2, 16), gpu_node("n1", "share", 2, 16), gpu_node("n2", "core_mem", 4, 16))
FULL_SHARED = tuple(gpu_pod(f"q{i}", f"n{i // 2}", mem=14, annotations=allocation(i % 2, 14)) for i in range(4))
FULL_CORE = tuple(gpu_pod(f"r{i}", "n2", mem=14, core=90, annotations=allocation(i, 14)) for i in range(4))

# (what, the pod's spec, the pods running, each charge in order, whether it fits now). Every review
# starts on a cold index, so it first builds its grouping: 5 a node plus 1 a label its selector reads
# (three nodes: [5, 5, 5] without constraints, [6, 6, 6] with a one-key selector); then 10 a group
# asked about, 5 a node whose maps are built, 1 a map entry read, and 10 a container on a card where
# it is placed. The sequences pin those weights (docs/operations.md, "What one review may cost") and
# where each is charged.
REVIEWS = [
    ("mem-only, fits", {"containers": [container("c", 4)]}, (),
     [5, 5, 5, 20, 10, 5, 2, 1, 1, 20], True),
    ("core+mem, fits", {"containers": [container("c", 4, 30)]}, (),
     [5, 5, 5, 20, 5, 1, 1, 1, 40], True),
    ("two containers, fit", {"containers": [container("c", 4), container("d", 4)]}, (),
     [5, 5, 5, 20, 10, 5, 2, 1, 40], True),
    ("mem-only, every card full", {"containers": [container("c", 4)],
                                   "nodeSelector": {"ack.node.gpu.schedule": "share"}}, FULL_SHARED,
     [6, 6, 6, 1, 1, 10, 10, 1, 1, 1], False),
    ("core+mem, every card busy", {"containers": [container("c", 4, 30)]}, FULL_CORE,
     [5, 5, 5, 20, 5, 1, 1, 1, 1], False),
]


@pytest.mark.parametrize(("what", "spec", "pods", "charges", "fits"), REVIEWS, ids=[r[0] for r in REVIEWS])
def test_a_review_is_charged_for_each_thing_it_does(what, spec, pods, charges, fits):
    state = snapshot(*NODES, *pods, names=NAMES)
    demand = demand_from_containers("", container_requests(spec, ("spec",), NAMES), NAMES)
    budget = Recording(10**6)
    verdict = CapacityIndex(NAMES).verdict(state, demand, node_selector_from_spec(spec, ("spec",)), budget)
    assert (verdict.never, bool(verdict.not_now)) == ("", not fits)
    assert budget.charges == charges and budget.spent == sum(charges)


ONE_CARD = (gpu_node("m0", "share", 1, 16),)
SPREAD = {"aliyun.com/gpu-count": "2"}  # each container N/2 GiB on each of two cards

# (what, the nodes, the pods running, the pod's spec, its labels, each charge in order, the verdict)
MORE_REVIEWS = [
    ("core+mem, compute free but no card with the memory", NODES,
     tuple(gpu_pod(f"r{i}", "n2", mem=14, core=10, annotations=allocation(i, 14)) for i in range(4)),
     {"containers": [container("c", 4, 30)]}, {}, [5, 5, 5, 20, 5, 1, 1, 1, 1], "not now"),
    ("a node of one card", ONE_CARD, (), {"containers": [container("c", 4)]}, {}, [5, 10, 5, 1, 1, 1, 10], "fits"),
    ("one container spread over two cards", NODES, (), {"containers": [container("c", 4)]}, SPREAD,
     [5, 5, 5, 20, 10, 5, 2, 1, 40], "fits"),
    ("two containers spread over two cards", NODES, (), {"containers": [container("c", 4), container("d", 4)]},
     SPREAD, [5, 5, 5, 20, 10, 5, 2, 1, 80], "fits"),
    ("two containers, room for one", ONE_CARD, (gpu_pod("x", "m0", mem=10, annotations=allocation(0, 10)),),
     {"containers": [container("c", 4), container("d", 4)]}, {}, [5, 10, 5, 1, 1, 1], "not now"),
    ("two containers spread over two cards, room for one", (gpu_node("m2", "share", 2, 16),),
     tuple(gpu_pod(f"x{i}", "m2", mem=13, annotations=allocation(i, 13)) for i in range(2)),
     {"containers": [container("c", 4), container("d", 4)]}, SPREAD, [5, 10, 5, 1, 1, 1], "not now"),
    ("mem-only, every card full or busy", NODES, FULL_SHARED + FULL_CORE, {"containers": [container("c", 4)]}, {},
     [5, 5, 5, 20, 10, 5, 2, 1, 0, 2], "not now"),
    ("two containers, one card full and room for one on the other", (gpu_node("m2", "share", 2, 16),),
     (gpu_pod("x", "m2", mem=16, annotations=allocation(0, 16)),
      gpu_pod("y", "m2", mem=9, annotations=allocation(1, 9))),
     {"containers": [container("c", 4), container("d", 4)]}, {}, [5, 10, 5, 1, 1, 1], "not now"),
    ("two containers, one card over-committed and room for both on the other", (gpu_node("m2", "share", 2, 16),),
     (gpu_pod("x", "m2", mem=18, annotations=allocation(0, 18)),
      gpu_pod("y", "m2", mem=8, annotations=allocation(1, 8))),
     {"containers": [container("c", 4), container("d", 4)]}, {}, [5, 10, 5, 1, 1, 40], "fits"),
    ("core+mem, one percent more compute than any card has free", NODES,
     tuple(gpu_pod(f"r{i}", "n2", mem=2, core=60, annotations=allocation(i, 2)) for i in range(4)),
     {"containers": [container("c", 4, 41)]}, {}, [5, 5, 5, 20, 5, 1, 1, 1], "not now"),
    ("a node whose only card is full", ONE_CARD, (gpu_pod("x", "m0", mem=16, annotations=allocation(0, 16)),),
     {"containers": [container("c", 4)]}, {}, [5, 10, 5, 1, 1, 1], "not now"),
    ("a cGPU card running its limit of 20 pods", (gpu_node("c0", "cgpu", 1, 32),),
     tuple(gpu_pod(f"x{i}", "c0", mem=1, annotations=allocation(0, 1)) for i in range(20)),
     {"containers": [container("c", 1)]}, {}, [5, 10, 5, 1, 0, 1], "not now"),
    ("an affinity term whose first requirement no node meets", NODES, (),
     {"containers": [container("c", 4)], "affinity": {"nodeAffinity": {
         "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
             {"key": "example.com/pool", "operator": "In", "values": ["zzz"]},
             {"key": "aliyun.accelerator/nvidia_name", "operator": "In", "values": ["A", "B", "C"]}]}]}}}},
     {}, [7, 7, 7, 1, 0, 0], "never"),
    # As the API server sends it: JSON, so no string in it is one of Python's interned literals.
    ("a host named by In, read from JSON", NODES, (), json.loads(
        '{"containers": [{"name": "c", "resources": {"limits": {"aliyun.com/gpu-mem": 4}}}], "affinity": {'
        '"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{'
        '"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}}'),
     {}, [6, 6, 6, 1, 1, 1, 10, 5, 1, 1, 1, 20], "fits"),
    ("two containers, room for exactly both", ONE_CARD, (gpu_pod("x", "m0", mem=8, annotations=allocation(0, 8)),),
     {"containers": [container("c", 4), container("d", 4)]}, {}, [5, 10, 5, 1, 1, 20], "fits"),
]


@pytest.mark.parametrize(("what", "nodes", "pods", "spec", "labels", "charges", "verdict"), MORE_REVIEWS,
                         ids=[r[0] for r in MORE_REVIEWS])
def test_a_review_of_other_shapes_is_charged_for_each_thing_it_does(what, nodes, pods, spec, labels, charges, verdict):
    state = snapshot(*nodes, *pods, names=NAMES)
    demand = demand_from_containers("", container_requests(spec, ("spec",), NAMES), NAMES, labels)
    budget = Recording(10**6)
    got = CapacityIndex(NAMES).verdict(state, demand, node_selector_from_spec(spec, ("spec",)), budget)
    assert ("never" if got.never else "not now" if got.not_now else "fits") == verdict
    assert budget.charges == charges


def test_a_pod_past_the_cap_is_told_what_it_asked_and_what_would_be_accepted():
    """Requirements count the node selector's labels and every term's label and field requirements."""
    terms = [{"matchExpressions": [{"key": k, "operator": "Exists"} for k in ("a", "b", "c")],
              "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
             {"matchExpressions": [{"key": "d", "operator": "DoesNotExist"}],
              "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]},
                              {"key": "metadata.name", "operator": "NotIn", "values": ["n3"]}]}]
    spec: dict[str, Any] = {
        "containers": [{"name": n, "resources": {"limits": {"aliyun.com/gpu-mem": 1}}} for n in ("c", "d")],
        "nodeSelector": {"x": "1", "y": "2"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}
    demand = demand_from_containers("", container_requests(spec, ("spec",), NAMES), NAMES)
    words = too_costly("Pod default/p", node_selector_from_spec(spec, ("spec",)), demand, 500)
    assert words == (
        "Pod default/p is too costly to evaluate: whether some node can hold its 2 GPU container(s) under its "
        "node constraints (2 required node affinity terms, 9 requirements in all) took more than "
        "capacity.max_work=500 units of work; accepted: fewer affinity terms and GPU containers (real pods have "
        "a few of each, and take a few hundred units)")
    no_terms = too_costly("Pod default/q", node_selector_from_spec({"containers": []}, ("spec",)), demand, 7)
    assert "(0 required node affinity terms, 0 requirements in all)" in no_terms
