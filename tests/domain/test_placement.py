"""judge(): whether a node takes a pod (GB001, GB002, GB005) and on which cards (GB003, GB004),
word for word; the shapes of nodes and pods are those of ACK GPU sharing (docs/scoring.md)."""

from __future__ import annotations

import json

import pytest

from policies.model.cluster import NodeInfo, PodGPU, PodInfo
from policies.model.cluster_manifests import node_from_manifest
from policies.model.resources import container_requests
from policies.model.settings import Names
from policies.placement.placement import (
    PodDemand,
    cpu_manager_policy,
    demand_from_containers,
    demand_from_pod,
    judge,
    mode_problems,
    node_profile,
    placement_problems,
    quick_card,
)

NAMES = Names()
MEM, COUNT, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-count", "aliyun.com/gpu-core.percentage"
TOPO, EXCL = "aliyun.com/gpu", "nvidia.com/gpu"
ALLOCATION = "scheduler.framework.gpushare.allocation"
SCHEDULE = "ack.node.gpu.schedule"


def node(mode: str | None = "share", cards: int = 2, gib: int = 10, *, labels: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None) -> NodeInfo:
    node_labels = {SCHEDULE: mode} if mode is not None else {}
    resources = {TOPO: cards} if mode == "topology" else {MEM: cards * gib, COUNT: cards}
    return NodeInfo("n1", {**node_labels, **(labels or {})}, annotations or {}, "", "", resources, resources)


def pod(name: str, mem: int = 0, core: int = 0, *, topology: int = 0, annotations: dict[str, str] | None = None,
        namespace: str = "default") -> PodInfo:
    gpus = (PodGPU(name, mem, core, 0),) if mem else ()
    return PodInfo(namespace, name, f"uid-{name}", "n1", "Running", gpus, annotations or {}, topology)


def shared(*gpus: tuple[str, int, int], key: str = "default/new") -> PodDemand:
    return PodDemand(key, tuple(PodGPU(c, m, k, i) for i, (c, m, k) in enumerate(gpus)))


def problems(demand: PodDemand, n: NodeInfo, pods=(), keep_state: bool = False) -> list[tuple[str, str]]:
    return judge(demand, node_profile(n, list(pods), NAMES), NAMES, keep_state=keep_state).problems


# ---- what the pod asks ----------------------------------------------------------------------------

def test_demand_counts_each_resource_and_keeps_container_positions():
    spec = {"initContainers": [{"name": "warm", "resources": {"limits": {MEM: 1}}}],
            "containers": [{"name": "side", "resources": {"limits": {"cpu": "1"}}},
                           {"name": "app", "resources": {"limits": {MEM: 4, CORE: "30"}}},
                           {"name": "w", "resources": {"limits": {EXCL: 2, TOPO: "1"}}},
                           {"name": "bad", "resources": {"limits": {MEM: "2Gi"}}}]}
    demand = demand_from_containers("ns/p", container_requests(spec, ("spec",), NAMES), NAMES)
    # The init container's GiB is on no card: the scheduler counts spec.containers only.
    assert demand == PodDemand("ns/p", (PodGPU("app", 4, 30, 1),), 2, 1,
                               refused=('container "bad": aliyun.com/gpu-mem=2Gi',))
    assert (demand.is_core_mem, demand.job_type, demand.uses_shared) == (True, "core+mem", True)
    assert PodDemand("x", (PodGPU("a", 1, 0),)).job_type == "mem-only"


def test_demand_of_a_running_pod():
    assert demand_from_pod(pod("p", 3, topology=2)) == PodDemand("default/p", (PodGPU("p", 3, 0, 0),), 0, 2)


def test_cpu_manager_policy_label_then_annotation():
    key = "gpushare.io/cpu-manager-policy"
    assert cpu_manager_policy(node(labels={key: "static"}, annotations={key: "none"}), NAMES) == "static"
    assert cpu_manager_policy(node(annotations={key: "static"}), NAMES) == "static"
    assert cpu_manager_policy(node(), NAMES) == ""


# ---- GB005, GB002, GB001 ------------------------------------------------------------------------

def test_gb005_static_cpu_manager():
    static = node(labels={"gpushare.io/cpu-manager-policy": "static"})
    assert problems(shared(("a", 2, 0)), static) == [
        ("GB005", "node n1 runs the static CPU manager policy, which shared GPU scheduling does not support; "
                  "pick a node with policy none")]


@pytest.mark.parametrize(("mode", "shown"), [(None, "unset (exclusive)"), ("", "unset (exclusive)"),
                                             ("default", "default"), ("topology", "topology")])
def test_gb002_shared_pods_need_a_shared_mode(mode, shown):
    exclusive = {EXCL: 2}  # a node that offers no shared GPU
    labels = {SCHEDULE: mode} if mode is not None else {}
    bare = NodeInfo("n1", labels, {}, "", "", exclusive, exclusive)
    assert problems(shared(("a", 2, 0)), bare if mode in (None, "") else node(mode)) == [
        ("GB002", f"node n1 has {SCHEDULE}={shown}; shared-GPU pods need one of cgpu, core_mem, mps, share")]


@pytest.mark.parametrize(("resources", "mode"), [({MEM: 20, COUNT: 2}, "share"),
                                                 ({MEM: 20, COUNT: 2, CORE: 200}, "core_mem")])
def test_a_node_offering_shared_gpu_without_the_label_takes_shared_pods_with_a_note(resources, mode):
    # What the node advertises is what the scheduler places against ("GPU node scheduling labels":
    # removing a label does not restore exclusive scheduling; the open-source plugin labels gpushare=true).
    bare = NodeInfo("n1", {"gpushare": "true"}, {}, "", "", resources, resources)
    demand = shared(("a", 2, 30 if mode == "core_mem" else 0))
    result = judge(demand, node_profile(bare, [], NAMES), NAMES)
    assert (result.problems, result.cards) == ([], [0])
    assert result.notes == [("GB002", f"node n1 has no {SCHEDULE} label; judged as {mode}, which its {MEM} "
                                      f"capacity shows")]


def test_an_unlabelled_share_node_has_no_pods_per_card_limit():
    one_card = {MEM: 40, COUNT: 1}
    bare = NodeInfo("n1", {}, {}, "", "", one_card, one_card)
    crowd = [pod(f"p{i}", 1, annotations={ALLOCATION: json.dumps({"0": {"0": 1}})}) for i in range(20)]
    assert problems(shared(("a", 1, 0)), bare, crowd) == []
    cgpu = NodeInfo("n1", {SCHEDULE: "cgpu"}, {}, "", "", one_card, one_card)
    assert [rule for rule, _ in problems(shared(("a", 1, 0)), cgpu, crowd)] == ["GB003"]


@pytest.mark.parametrize("mode", ["share", "cgpu", "mps"])
def test_gb002_core_mem_pods_need_core_mem(mode):
    assert problems(shared(("a", 2, 30)), node(mode)) == [
        ("GB002", f"node n1 has {SCHEDULE}={mode}; core+mem pods need core_mem")]


@pytest.mark.parametrize("mode", ["share", "cgpu", "mps", "core_mem"])
def test_mem_only_pods_go_on_every_shared_mode(mode):
    assert problems(shared(("a", 2, 0)), node(mode)) == []


def test_gb002_returns_before_cards_are_looked_at():
    assert [rule for rule, _ in problems(shared(("a", 99, 30)), node("share"))] == ["GB002"]


def test_gb001_core_mem_pod_beside_mem_only_pods_names_three_and_counts_the_rest():
    pods = [pod(f"m{i}", 1) for i in range(5)] + [pod("c", 1, 10)]
    assert problems(shared(("a", 1, 10)), node("core_mem", gib=20), pods) == [
        ("GB001", "node n1 already runs mem-only pods (default/m0, default/m1, default/m2 and 2 more); a core+mem "
                  "pod cannot share the node with them")]


def test_gb001_mem_only_pod_beside_core_mem_pods():
    pods = [pod("c1", 1, 10), pod("c2", 1, 10), pod("c3", 1, 10)]
    assert problems(shared(("a", 1, 0)), node("core_mem"), pods) == [
        ("GB001", "node n1 already runs core+mem pods (default/c1, default/c2, default/c3); a mem-only pod "
                  "cannot share the node with them")]


def test_gb001_a_pod_is_not_in_its_own_way():
    assert problems(shared(("a", 1, 10), key="default/c"), node("core_mem"), [pod("c", 1, 0)]) == []


def test_gb005_and_gb001_are_both_reported():
    static = node("core_mem", labels={"gpushare.io/cpu-manager-policy": "static"})
    assert [rule for rule, _ in problems(shared(("a", 1, 0)), static, [pod("c", 1, 10)])] == ["GB005", "GB001"]


@pytest.mark.parametrize(("mode", "expected"), [
    ("share", [("GB002", f"node n1 has {SCHEDULE}=share; pods asking for {TOPO} need {SCHEDULE}=topology")]),
    # No label, but it offers shared GPU (node() gives it gpu-mem): judged as share.
    (None, [("GB002", f"node n1 has {SCHEDULE}=share; pods asking for {TOPO} need {SCHEDULE}=topology")]),
    ("topology", []),
])
def test_gb002_topology_pods_need_a_topology_node(mode, expected):
    assert problems(PodDemand("default/t", (), 0, 1), node(mode, cards=2)) == expected


def test_gb002_a_topology_node_takes_only_topology_pods():
    assert problems(PodDemand("default/w", (), 1, 0), node("topology")) == [
        ("GB002", f"node n1 has {SCHEDULE}=topology and takes only topology workloads ({TOPO}); this pod asks "
                  f"for {EXCL}")]
    assert problems(PodDemand("default/w", (), 1, 0), node("default")) == []
    assert problems(PodDemand("default/cpu", ()), node("topology")) == []


# ---- GB003, GB004: cards ----------------------------------------------------------------------------

@pytest.mark.parametrize("keep_state", [False, True])
def test_gb004_one_container_fits_no_card(keep_state):
    pods = [pod("a", 8, annotations={ALLOCATION: json.dumps({"0": {"0": 8}})}),
            pod("b", 5, annotations={ALLOCATION: json.dumps({"0": {"1": 5}})})]
    assert problems(shared(("infer", 6, 0)), node(), pods, keep_state) == [
        ("GB004", 'node n1: container "infer" fits no card: GPU0 has 2/10 GiB free, needs 6; '
                  "GPU1 has 5/10 GiB free, needs 6")]


@pytest.mark.parametrize("keep_state", [False, True])
def test_gb004_a_node_without_cards(keep_state):
    bare = NodeInfo("n1", {SCHEDULE: "share"}, {}, "", "", {}, {})
    assert problems(shared(("infer", 1, 0)), bare, (), keep_state) == [
        ("GB004", 'node n1: container "infer" fits no card: the node has no shared GPU cards')]


@pytest.mark.parametrize("keep_state", [False, True])
def test_gb003_the_cgpu_limit_of_20_pods_per_card(keep_state):
    pods = [pod(f"p{i:02}", 1, annotations={ALLOCATION: json.dumps({"0": {str(i % 2): 1}})}) for i in range(40)]
    assert problems(shared(("infer", 1, 0)), node("cgpu", gib=100), pods, keep_state) == [
        ("GB003", 'node n1: container "infer" fits no card under the cGPU limit of pods per card: '
                  "GPU0 already runs 20 pods, the cGPU limit is 20; GPU1 already runs 20 pods, the cGPU limit is 20")]
    # a pod already on a card is not a 21st pod there, and the share mode has no limit
    assert problems(shared(("infer", 1, 0), key="default/p00"), node("cgpu", gib=100), pods, keep_state) == []
    assert problems(shared(("infer", 1, 0)), node("share", gib=100), pods, keep_state) == []


def test_gb003_lists_only_the_cards_that_are_crowded_or_full():
    pods = [pod(f"p{i:02}", 1, annotations={ALLOCATION: json.dumps({"0": {"0": 1}})}) for i in range(20)]
    pods.append(pod("big", 29, annotations={ALLOCATION: json.dumps({"0": {"1": 29}})}))
    assert problems(shared(("infer", 2, 0)), node("cgpu", gib=30), pods) == [
        ("GB003", 'node n1: container "infer" fits no card under the cGPU limit of pods per card: '
                  "GPU0 already runs 20 pods, the cGPU limit is 20; GPU1 has 1/30 GiB free, needs 2")]


def test_several_containers_under_the_cgpu_limit():
    # Without the limit "a" would share the crowded card 0 and "b" take card 1; under it, both need card 1.
    pods = [pod(f"p{i:02}", 1, annotations={ALLOCATION: json.dumps({"0": {"0": 1}})}) for i in range(20)]
    result = placement_problems(shared(("a", 2, 0), ("b", 29, 0)), node("cgpu", gib=30), pods, NAMES)
    assert result.problems == [
        ("GB003", 'node n1: container "b" fits no card under the cGPU limit of pods per card: '
                  "GPU0 has 10/30 GiB free, needs 29; GPU1 has 28/30 GiB free, needs 29")]


def test_one_container_gets_the_binpack_card_and_the_profile_is_unchanged():
    pods = [pod("a", 3, annotations={ALLOCATION: json.dumps({"0": {"1": 3}})})]
    profile = node_profile(node(), pods, NAMES)
    assert judge(shared(("x", 2, 0)), profile, NAMES).cards == [1]
    assert [c.used_mem for c in profile.cards.cards] == [0, 3]
    assert (profile.card_size, profile.binpack, profile.pod_limit) == (10, True, None)


def test_profile_of_a_spread_cgpu_node():
    n = node("cgpu", labels={"ack.node.gpu.placement": "spread"})
    profile = node_profile(n, [pod("a", 3, annotations={ALLOCATION: json.dumps({"0": {"0": 3}})})], NAMES)
    assert (profile.binpack, profile.pod_limit, profile.mem_only, profile.core_mem) == (
        False, 20, ("default/a",), ())
    assert judge(shared(("x", 2, 0)), profile, NAMES).cards == [1]


# ---- whole GPUs on topology nodes -------------------------------------------------------------------

def test_topology_pod_gets_free_cards():
    result = placement_problems(PodDemand("default/t", (), 0, 2), node("topology", cards=4), [pod("a", topology=1)],
                                NAMES)
    assert (result.problems, result.cards) == ([], [1, 2])


def test_gb004_not_enough_whole_gpus_names_three_holders():
    pods = [pod(f"h{i}", topology=1) for i in range(5)]
    assert problems(PodDemand("default/t", (), 0, 2), node("topology", cards=6), pods) == [
        ("GB004", "node n1 has 1 of 6 GPUs free (held by default/h0, default/h1, default/h2 and 2 more), needs 2")]
    assert problems(PodDemand("default/t", (), 0, 3), node("topology", cards=2)) == [
        ("GB004", "node n1 has 2 of 2 GPUs free, needs 3")]


def test_a_pod_asking_for_no_gpu_goes_on_any_node():
    cpu_only = PodDemand("default/web", ())
    for mode in ("share", "cgpu", "core_mem", "default", "topology", None):
        assert problems(cpu_only, node(mode)) == []


def test_gb001_with_exactly_four_others_names_three_and_one_more():
    pods = [pod(f"c{i}", 1, 10) for i in range(4)]
    assert problems(shared(("a", 1, 0)), node("core_mem", gib=20), pods) == [
        ("GB001", "node n1 already runs core+mem pods (default/c0, default/c1, default/c2 and 1 more); a mem-only pod "
                  "cannot share the node with them")]


def test_gb004_whole_gpus_held_by_exactly_four_pods():
    pods = [pod(f"h{i}", topology=1) for i in range(4)]
    assert problems(PodDemand("default/t", (), 0, 2), node("topology", cards=5), pods) == [
        ("GB004", "node n1 has 1 of 5 GPUs free (held by default/h0, default/h1, default/h2 and 1 more), needs 2")]


def test_an_exclusive_pod_is_not_refused_by_a_mode_label_gn001_judges():
    # an unknown mode label is GN001's finding on the node; placement refuses only the topology mode
    assert problems(PodDemand("default/w", (), 1, 0), node("vgpu")) == []


def test_gb001_and_gb004_count_the_rest_exactly():
    pods = [pod(f"c{i}", 1, 10) for i in range(6)]
    assert problems(shared(("a", 1, 0)), node("core_mem", gib=20), pods)[0][1].startswith(
        "node n1 already runs core+mem pods (default/c0, default/c1, default/c2 and 3 more)")
    holders = [pod(f"h{i}", topology=1) for i in range(6)]
    assert problems(PodDemand("default/t", (), 0, 2), node("topology", cards=6), holders) == [
        ("GB004", "node n1 has 0 of 6 GPUs free (held by default/h0, default/h1, default/h2 and 3 more), needs 2")]


# ---- values read from a manifest, as the webhook receives them ----------------------------------------

def received_node(mode: str, cards: int = 2, gib: int = 10, labels: dict[str, str] | None = None) -> NodeInfo:
    """A Node as it arrives: parsed from JSON, so its label values are fresh strings, not the code's constants."""
    resources = {TOPO: str(cards)} if mode == "topology" else {MEM: str(cards * gib), COUNT: str(cards)}
    manifest = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "n1", "labels": {SCHEDULE: mode, **(labels or {})}},
                "status": {"allocatable": resources, "capacity": resources}}
    return node_from_manifest(json.loads(json.dumps(manifest)), NAMES)


def test_a_received_node_is_judged_like_any_other():
    topo = received_node("topology")
    assert (problems(PodDemand("default/t", (), 0, 2), topo), judge(PodDemand("default/t", (), 0, 2),
                                                                     node_profile(topo, [], NAMES), NAMES).cards) == (
        [], [0, 1])
    assert problems(PodDemand("default/w", (), 1, 0), topo) == [
        ("GB002", f"node n1 has {SCHEDULE}=topology and takes only topology workloads ({TOPO}); this pod asks "
                  f"for {EXCL}")]
    assert problems(shared(("a", 2, 30)), received_node("share")) == [
        ("GB002", f"node n1 has {SCHEDULE}=share; core+mem pods need core_mem")]
    assert problems(shared(("a", 2, 30)), received_node("core_mem")) == []
    static = received_node("share", labels={"gpushare.io/cpu-manager-policy": "static"})
    assert [rule for rule, _ in problems(shared(("a", 2, 0)), static)] == ["GB005"]


def test_only_a_topology_node_gets_a_whole_gpu_occupancy():
    assert node_profile(received_node("topology", cards=4), [], NAMES).topology.count == 4
    for mode in ("share", "default", "vgpu"):
        assert node_profile(received_node(mode), [], NAMES).topology is None


@pytest.mark.parametrize("policy", ["none", "Static", "statics", ""])
def test_only_the_static_cpu_manager_policy_is_refused(policy):
    assert problems(shared(("a", 2, 0)), node(labels={"gpushare.io/cpu-manager-policy": policy})) == []


# ---- mode_problems: what the audit asks of pods already running -----------------------------------------

@pytest.mark.parametrize(("demand", "mode", "expected"), [
    (PodDemand("default/w", (), 1, 0), "default", []),
    (PodDemand("default/w", (), 1, 0), "vgpu", []),
    (PodDemand("default/w", (), 1, 0), "share", []),
    (PodDemand("default/w", (), 1, 0), "topology",
     [("GB002", f"node n1 has {SCHEDULE}=topology and takes only topology workloads ({TOPO}); this pod asks "
                f"for {EXCL}")]),
    (PodDemand("default/cpu", ()), "topology", []),
    (PodDemand("default/cpu", ()), "share", []),
    (PodDemand("default/t", (), 0, 1), "topology", []),
    (PodDemand("default/c", (PodGPU("c", 2, 30, 0),)), "core_mem", []),
    (PodDemand("default/c", (PodGPU("c", 2, 30, 0),)), "cgpu",
     [("GB002", f"node n1 has {SCHEDULE}=cgpu; core+mem pods need core_mem")]),
    (PodDemand("default/t", (), 0, 1), "vgpu",
     [("GB002", f"node n1 has {SCHEDULE}=vgpu; pods asking for {TOPO} need {SCHEDULE}=topology")]),
])
def test_mode_problems_of_a_running_pod(demand, mode, expected):
    for n in (node(mode), received_node(mode)):
        assert mode_problems(demand, node_profile(n, [], NAMES), NAMES) == expected


def test_a_topology_pod_on_a_node_of_an_unknown_mode():
    assert problems(PodDemand("default/t", (), 0, 1), node("vgpu")) == [
        ("GB002", f"node n1 has {SCHEDULE}=vgpu; pods asking for {TOPO} need {SCHEDULE}=topology")]


# ---- quick_card, the state a placement leaves, rules reported together --------------------------------------

def test_quick_card_answers_only_for_one_container_the_node_surely_takes():
    pods = [pod("a", 3, annotations={ALLOCATION: json.dumps({"0": {"1": 3}})})]
    profile = node_profile(node(), pods, NAMES)
    position = quick_card(shared(("x", 2, 0)), profile)
    assert (position, profile.order.cards[position].index) == (0, 1)  # binpack: the fuller card first
    position = quick_card(shared(("x", 8, 0)), profile)
    assert (position, profile.order.cards[position].index) == (1, 0)  # card 1 has only 7 GiB free
    assert quick_card(shared(("x", 11, 0)), profile) == -1  # fits no card
    assert quick_card(shared(("x", 1, 0), ("y", 1, 0)), profile) == -1  # two containers: ask judge
    assert quick_card(PodDemand("default/t", (), 0, 1), profile) == -1  # no shared-GPU container
    assert quick_card(shared(("x", 1, 30)), profile) == -1  # core+mem on a share node: judge says why not


def test_a_card_further_down_the_binpack_order():
    pods = [pod("a", 3, annotations={ALLOCATION: json.dumps({"0": {"1": 3}})})]
    profile = node_profile(node(), pods, NAMES)
    result = judge(shared(("x", 8, 0)), profile, NAMES)
    assert (result.problems, result.cards) == ([], [0])


def test_only_keep_state_carries_the_occupancy_after_the_placement():
    pods = [pod("a", 3, annotations={ALLOCATION: json.dumps({"0": {"1": 3}})})]
    profile = node_profile(node(), pods, NAMES)
    assert judge(shared(("x", 2, 0)), profile, NAMES).state is None
    kept = judge(shared(("x", 2, 0)), profile, NAMES, keep_state=True)
    assert (kept.cards, [c.used_mem for c in kept.state.cards]) == ([1], [0, 5])
    one = placement_problems(shared(("x", 2, 0)), node(), pods, NAMES)
    assert (one.cards, [c.used_mem for c in one.state.cards]) == ([1], [0, 5])
    placed = placement_problems(shared(("x", 2, 0), ("y", 6, 0)), node(), pods, NAMES)
    assert (placed.cards, [c.used_mem for c in placed.state.cards]) == ([1, 0], [6, 5])
    assert [c.used_mem for c in profile.cards.cards] == [0, 3]


def test_a_node_without_cards_has_card_size_zero():
    assert node_profile(NodeInfo("n1", {SCHEDULE: "share"}, {}, "", "", {}, {}), [], NAMES).card_size == 0
    assert node_profile(node(gib=16), [], NAMES).card_size == 16


def test_the_cards_are_judged_beside_gb005_and_gb001():
    static = node(labels={"gpushare.io/cpu-manager-policy": "static"})
    assert problems(shared(("a", 11, 0)), static) == [
        ("GB005", "node n1 runs the static CPU manager policy, which shared GPU scheduling does not support; "
                  "pick a node with policy none"),
        ("GB004", 'node n1: container "a" fits no card: GPU0 has 10/10 GiB free, needs 11; '
                  "GPU1 has 10/10 GiB free, needs 11")]
    recorded = {ALLOCATION: json.dumps({"0": {"0": 1}})}
    assert problems(shared(("a", 11, 0)), node("core_mem"), [pod("c", 1, 10, annotations=recorded)]) == [
        ("GB001", "node n1 already runs core+mem pods (default/c); a mem-only pod cannot share the node with them"),
        ("GB004", 'node n1: container "a" fits no card: GPU0 has 9/10 GiB free, needs 11; '
                  "GPU1 has 10/10 GiB free, needs 11")]


def test_gb004_whole_gpus_held_by_one_or_two_pods():
    assert problems(PodDemand("default/t", (), 0, 2), node("topology", cards=2), [pod("h0", topology=1)]) == [
        ("GB004", "node n1 has 1 of 2 GPUs free (held by default/h0), needs 2")]
    holders = [pod("h0", topology=1), pod("h1", topology=1)]
    assert problems(PodDemand("default/t", (), 0, 2), node("topology", cards=3), holders) == [
        ("GB004", "node n1 has 1 of 3 GPUs free (held by default/h0, default/h1), needs 2")]


def test_gb004_whole_gpus_held_by_exactly_three_pods():
    pods = [pod(f"h{i}", topology=1) for i in range(3)]
    assert problems(PodDemand("default/t", (), 0, 2), node("topology", cards=4), pods) == [
        ("GB004", "node n1 has 1 of 4 GPUs free (held by default/h0, default/h1, default/h2), needs 2")]


def test_gb004_on_a_node_of_many_cards():
    many = node("share", cards=300, gib=1)
    [(rule, message)] = problems(shared(("a", 2, 0)), many)
    assert rule == "GB004"
    assert message == 'node n1: container "a" fits no card: ' + "; ".join(
        f"GPU{i} has 1/1 GiB free, needs 2" for i in range(300))


def test_gpu_memory_past_the_largest_card_is_refused_unless_spread_over_cards():
    # GS003's ceiling is 1024 GiB per card, times the cards the pod label spreads each container
    # over (docs/design.md, "GS003's ceiling"); a refused value is no card demand.
    spec = {"containers": [{"name": "big", "resources": {"limits": {MEM: 1500}}}]}
    alone = demand_from_containers("ns/p", container_requests(spec, ("spec",), NAMES), NAMES)
    assert (alone.gpus, alone.refused) == ((), ('container "big": aliyun.com/gpu-mem=1500',))
    spread = demand_from_containers("ns/p", container_requests(spec, ("spec",), NAMES), NAMES,
                                    {"aliyun.com/gpu-count": "2"})
    assert (spread.gpus, spread.refused) == ((PodGPU("big", 1500, 0, 0, 2),), ())


@pytest.mark.parametrize(("cards", "used", "rule", "words"), [
    # 12 GiB over 2 cards is 6 on each: GPU0 has it, GPU1 (5 free) does not.
    (2, [0, 5], "GB004", 'container "c" needs 2 cards and 1 fits: GPU1 has 5/10 GiB free, needs 6'),
    # Over 3 cards of which two have 4 free: 2 fit.
    (3, [0, 0, 8], "GB004", 'container "c" needs 3 cards and 2 fit: GPU2 has 2/10 GiB free, needs 4'),
    # Over 3 cards on a node of 2: the node's cards are named, no card is counted.
    (3, [0, 0], "GB004", 'container "c" needs 3 cards: the node has 2 cards'),
])
def test_a_container_spread_over_cards_is_refused_naming_the_cards_it_needs(cards, used, rule, words):
    n = node("cgpu", cards=len(used))
    pods = [pod(f"o{i}", gib, annotations={ALLOCATION: json.dumps({"0": {str(i): gib}})})
            for i, gib in enumerate(used) if gib]
    demand = PodDemand("default/new", (PodGPU("c", 12, 0, 0, cards),))
    assert problems(demand, n, pods) == [(rule, f"node n1: {words}")]


def test_a_spread_container_past_the_cgpu_limit_names_the_cards_under_it():
    crowd = [pod(f"o{k}", 1, annotations={ALLOCATION: json.dumps({"0": {"1": 1}})}) for k in range(20)]
    demand = PodDemand("default/new", (PodGPU("c", 4, 0, 0, 2),))
    assert problems(demand, node("cgpu", gib=24), crowd) == [
        ("GB003", 'node n1: container "c" needs 2 cards and 1 fits under the cGPU limit of pods per card: '
                  "GPU1 already runs 20 pods, the cGPU limit is 20")]
