"""GC001 at any scale: the index gives the walk's verdicts word for word, and the work of any review
is counted and capped (policies/placement/capacity_index.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.admission.engine import Engine
from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from policies.model.resources import container_requests
from policies.model.selectors import node_selector_from_spec
from policies.placement.capacity_index import CapacityIndex
from policies.placement.placement import demand_from_containers, node_profile
from policies.placement.work_budget import TooCostly, WorkBudget
from tests.support.capacity_reference import judge_capacity
from tests.support.cluster_builders import allocation, gpu_node, gpu_pod, snapshot
from tests.support.helpers import costly_pod
from tests.support.profiles import examples
from webhook.settings import Settings

SETTINGS = Settings()
NAMES = SETTINGS.names
MODEL = "aliyun.accelerator/nvidia_name"
POOL = "example.com/pool"
MODES = ["cgpu", "core_mem", "share", "mps", "topology", "default", ""]


def _walk(state, demand, selector):
    """The reference: judge_capacity over every node, in the state's order."""
    profiles = [node_profile(n, state.pods_on_node(n.name), NAMES) for n in state.nodes()]
    return judge_capacity(demand, selector, profiles, NAMES)


@st.composite
def nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 6))):
        mode = draw(st.sampled_from(MODES))
        cards = draw(st.integers(0, 4))
        node = gpu_node(f"n{i}", mode or "share", max(cards, 1), draw(st.sampled_from([8, 15, 16, 31])),
                        model=draw(st.sampled_from(["V100", "T4"])),
                        labels={POOL: draw(st.sampled_from(["a", "b"]))})
        if not mode:
            del node["metadata"]["labels"]["ack.node.gpu.schedule"]
        if cards == 0:
            node["status"]["allocatable"] = node["status"]["capacity"] = {"cpu": "32"}
        if draw(st.booleans()) and draw(st.booleans()):
            node["metadata"]["labels"]["gpushare.io/cpu-manager-policy"] = "static"
        out.append(node)
    return out


@st.composite
def pods_on(draw: st.DrawFn, node_names: list[str]) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(0, 8))):
        node = draw(st.sampled_from(node_names))
        mem = draw(st.integers(1, 16))
        core = draw(st.sampled_from([None, None, 20, 50]))
        annotations = allocation(draw(st.integers(0, 3)), mem) if draw(st.booleans()) else None
        out.append(gpu_pod(f"q{i}", node, mem=mem, core=core, annotations=annotations))
    return out


requirements = st.sampled_from([
    {"key": MODEL, "operator": "In", "values": ["V100"]},
    {"key": MODEL, "operator": "NotIn", "values": ["T4"]},
    {"key": POOL, "operator": "Exists"},
    {"key": POOL, "operator": "In", "values": ["b"]},
    {"key": "example.com/absent", "operator": "DoesNotExist"},
    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n3"]},
    {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n0"]},
])


@st.composite
def pod_specs(draw: st.DrawFn) -> dict[str, Any]:
    containers = []
    for i in range(draw(st.integers(1, 3))):
        limits: dict[str, Any] = {"aliyun.com/gpu-mem": draw(st.integers(1, 40))}
        core = draw(st.sampled_from([None, None, 10, 30, 100]))
        if core is not None:
            limits["aliyun.com/gpu-core.percentage"] = core
        containers.append({"name": f"c{i}", "image": "x", "resources": {"limits": limits}})
    spec: dict[str, Any] = {"containers": containers}
    if draw(st.booleans()):
        spec["nodeSelector"] = {MODEL: draw(st.sampled_from(["V100", "T4"]))}
    if draw(st.booleans()):
        terms = []
        for _ in range(draw(st.integers(1, 3))):
            term: dict[str, Any] = {"matchExpressions": draw(st.lists(requirements, min_size=1, max_size=2))}
            if draw(st.integers(0, 4)) == 0:
                term["matchFields"] = [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]
            terms.append(term)
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    return spec


def test_a_spread_pod_is_weighed_by_what_its_cards_get_not_by_its_request():
    """25 GiB over 3 cards is 8 on each (rounded down): a node of three empty 8 GiB cards holds it
    beside pods on no card (found by the large profile: the index once weighed the 25)."""
    state = snapshot(gpu_node("n0", "cgpu", 3, 8), gpu_pod("a", "n0", mem=1), gpu_pod("b", "n0", mem=1), names=NAMES)
    spec = {"containers": [{"name": "c0", "image": "x", "resources": {"limits": {"aliyun.com/gpu-mem": 25}}}]}
    demand = demand_from_containers("", container_requests(spec, ("spec",), NAMES), NAMES,
                                    {"aliyun.com/gpu-count": "3"})
    selector = node_selector_from_spec(spec, ("spec",))
    walked = _walk(state, demand, selector)
    assert (walked.never, walked.not_now) == ("", "")
    assert CapacityIndex(NAMES).verdict(state, demand, selector, WorkBudget(10**9)) == walked


@settings(max_examples=examples(300))
@given(data=st.data())
def test_the_index_gives_the_walks_verdict_as_the_cluster_changes(data):
    """Generated clusters (modes, unlabelled nodes, cards or none, the static CPU policy, pods with
    and without card annotations) and pods (one or more containers, mem-only and core+mem, node
    selectors, affinity terms, names): the index's verdict is judge_capacity's, word for word,
    before and after pods come and go on one node."""
    node_objects = data.draw(nodes())
    names = [n["metadata"]["name"] for n in node_objects]
    pod_objects = data.draw(pods_on(names))
    state = snapshot(*node_objects, *pod_objects, names=NAMES)
    index = CapacityIndex(NAMES)
    for _ in range(3):
        spec = data.draw(pod_specs())
        # Sometimes spread over several cards (the multi-GPU pod label, N/M on each of M cards).
        labels = {"aliyun.com/gpu-count": str(data.draw(st.sampled_from([2, 3, 4, 5])))} \
            if data.draw(st.integers(0, 3)) == 0 else {}
        demand = demand_from_containers("", container_requests(spec, ("spec",), NAMES), NAMES, labels)
        selector = node_selector_from_spec(spec, ("spec",))
        assert index.verdict(state, demand, selector, WorkBudget(10**9)) == _walk(state, demand, selector)
        # The cluster changes between reviews: a pod starts, another ends, a node is relabelled.
        node = data.draw(st.sampled_from(names))
        state.upsert_pod(pod_from_manifest(gpu_pod(f"new{_}", node, mem=data.draw(st.integers(1, 16))), NAMES))
        if pod_objects and data.draw(st.booleans()):
            gone = pod_objects.pop()
            state.remove_pod(gone["metadata"]["namespace"], gone["metadata"]["name"])
        if data.draw(st.booleans()):
            relabelled = dict(node_objects[names.index(node)])
            relabelled["metadata"] = {**relabelled["metadata"], "labels": {
                **relabelled["metadata"]["labels"], MODEL: data.draw(st.sampled_from(["V100", "T4"]))}}
            state.upsert_node(node_from_manifest(relabelled, NAMES))


# ---- the cost bound at 5,000 nodes, as a count of work ------------------------------------------------

def _large_cluster(nodes: int = 5000):
    """5,000 nodes (half core_mem, 8 x 16 GiB cards) with three pods each: the issue's scale."""
    objects = []
    for n in range(nodes):
        mode = "core_mem" if n % 2 else "cgpu"
        objects.append(gpu_node(f"gpu-{n:05d}", mode, 8, 16, labels={POOL: f"pool-{n % 4}"}))
        for p in range(3):
            objects.append(gpu_pod(f"gpu-{n:05d}-p{p}", f"gpu-{n:05d}", mem=4, core=30 if mode == "core_mem" else None,
                                   annotations=allocation(p, 4)))
    return snapshot(*objects, names=NAMES)


_started = iter(range(10**6))


def _spent(index: CapacityIndex, state, spec: dict[str, Any], cap: int) -> int | None:
    """The work a pod spec costs GC001 (None: past the cap) right after a pod started on some node:
    a busy cluster, where nothing remembered from the last review answers."""
    n = next(_started)
    state.upsert_pod(pod_from_manifest(gpu_pod(f"churn-{n}", f"gpu-{n * 7919 % 5000:05d}", mem=1), NAMES))
    demand = demand_from_containers("", container_requests(spec, ("spec",), NAMES), NAMES)
    budget = WorkBudget(cap)
    try:
        index.verdict(state, demand, node_selector_from_spec(spec, ("spec",)), budget)
    except TooCostly:
        assert budget.spent > cap
        return None
    return budget.spent


def test_the_work_of_any_review_is_capped_and_an_ordinary_one_is_far_below_the_cap():
    """At 5,000 nodes, a pod starting between every two reviews: ordinary pods (no constraints, a
    card model, a pool, a few hostnames) cost a few hundred units at most, once their grouping is
    built; 800 containers are answered cheaply; the attack shapes (a thousand or five thousand
    affinity terms no node matches) stop at the cap; with no change in between, a pod asking what
    the last one asked costs nothing."""
    state = _large_cluster()
    cap = SETTINGS.capacity.max_work
    index = CapacityIndex(NAMES)
    index.warm(state)
    one = [{"name": "c", "image": "x", "resources": {"limits": {"aliyun.com/gpu-mem": 4,
                                                                    "aliyun.com/gpu-core.percentage": 30}}}]
    pinned = {"containers": one, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                     "values": ["gpu-00001", "gpu-00003"]}]}]}}}}
    ordinary = [
        {"containers": one},
        {"containers": one, "nodeSelector": {MODEL: "Tesla-V100-SXM2-16GB"}},
        {"containers": one, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": POOL, "operator": "In", "values": ["pool-1"]}]}]}}}},
        pinned,
    ]
    for spec in ordinary:
        first = _spent(index, state, spec, cap)  # builds its grouping, once
        assert first is not None and first <= cap // 2, (spec, first)
        for _ in range(5):
            spent = _spent(index, state, spec, cap)
            assert spent is not None and spent <= 300, (spec, spent)
    demand = demand_from_containers("", container_requests(ordinary[0], ("spec",), NAMES), NAMES)
    spent = []
    for _ in range(2):
        budget = WorkBudget(cap)
        index.verdict(state, demand, node_selector_from_spec(ordinary[0], ("spec",)), budget)
        spent.append(budget.spent)
    assert spent[0] > 0 and spent[1] == 0  # the state did not change: the verdict is remembered
    many = {"containers": [{"name": f"c{i}", "image": "x", "resources": {"limits": {"aliyun.com/gpu-mem": 1}}}
                           for i in range(800)]}
    spent = _spent(index, state, many, cap)
    assert spent is not None and spent <= 10_000  # 800 GiB: no node's free memory adds up
    for terms in (1000, 5000):  # stopped at the cap: "too costly to evaluate"
        assert _spent(index, state, costly_pod(f"attack-{terms}", terms)["spec"], cap) is None
    assert cap >= 300 * 300  # far above what a real pod takes (docs/operations.md)


def test_a_pod_past_the_cap_is_too_costly_with_the_rules_severity():
    state = _large_cluster(200)
    pod = costly_pod("x", 2000)
    for severity in ("warn", "deny"):
        engine = Engine(Settings(rules={"GC001": {"severity": severity}}, capacity={"max_work": 50_000}))
        subject = engine.subject("Pod", pod, namespace="default", state=state)
        [finding] = [f for f in engine.validate(subject).findings if f.rule == "GC001"]
        assert finding.severity == severity
        assert finding.message == (
            "GC001: Pod default/costly-x is too costly to evaluate: whether some node can hold its 1 GPU container(s) "
            "under its node constraints (2000 required node affinity terms, 2000 requirements in all) took more "
            "than capacity.max_work=50000 units of work; accepted: fewer affinity terms and GPU containers (real "
            "pods have a few of each, and take a few hundred units)")


def test_a_grouping_by_hostname_builds_the_maps_of_the_nodes_a_selector_names_only():
    """A label every node has its own value of (the hostname) groups each node apart: a selector
    naming two hosts builds what GC001 asks of those two nodes, not of all 2,000, and keeps them
    up to date as pods start there."""
    state = _large_cluster(2000)
    index = CapacityIndex(NAMES)
    index.warm(state)
    spec = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"aliyun.com/gpu-mem": 4}}}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                       "values": ["gpu-00002", "gpu-00004"]}]}]}}}}
    assert _spent(index, state, spec, SETTINGS.capacity.max_work) is not None
    (by_host,) = [p for key, p in index._projections.items() if key[0] == frozenset({"kubernetes.io/hostname"})]
    assert len(by_host.groups) == 2000
    built = {name for g in by_host.groups.values() if g.maps is not None for name in g.members}
    assert built == {"gpu-00002", "gpu-00004"}
    demand = demand_from_containers("", container_requests(spec, ("spec",), NAMES), NAMES)
    selector = node_selector_from_spec(spec, ("spec",))
    assert index.verdict(state, demand, selector, WorkBudget(10**9)) == _walk(state, demand, selector)


# ---- what the index keeps between reviews ------------------------------------------------------------

def _review(index: CapacityIndex, state, spec: dict[str, Any], budget: WorkBudget | None = None):
    demand = demand_from_containers("", container_requests(spec, ("spec",), NAMES), NAMES)
    selector = node_selector_from_spec(spec, ("spec",))
    return index.verdict(state, demand, selector, budget or WorkBudget(10**9)), _walk(state, demand, selector)


def _shared(mem: int, core: int | None = None, **spec: Any) -> dict[str, Any]:
    limits: dict[str, Any] = {"aliyun.com/gpu-mem": mem}
    if core is not None:
        limits["aliyun.com/gpu-core.percentage"] = core
    return {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}], **spec}


def test_a_core_mem_pod_is_judged_by_the_core_mem_nodes_there_are_as_they_change_and_go():
    """The index counts each mode's nodes: a core_mem node whose pods change is still one, and once
    it is gone a core+mem pod hears there is no such node (the walk's words)."""
    state = snapshot(gpu_node("n0", "share", 2, 16), gpu_node("n2", "core_mem", 2, 16), names=NAMES)
    index = CapacityIndex(NAMES)
    for mem in (4, 5):
        verdict, walked = _review(index, state, _shared(mem, 30))
        assert verdict == walked and verdict.never == "" and verdict.not_now == ""
        state.upsert_pod(pod_from_manifest(gpu_pod(f"p{mem}", "n2", mem=2, core=20, annotations=allocation(0, 2)),
                                           NAMES))
    state.remove_node("n2")
    verdict, walked = _review(index, state, _shared(4, 30))
    assert verdict == walked and "core" in verdict.never


def test_a_core_mem_pod_fits_a_card_with_exactly_the_compute_it_asks_left():
    """70 % of the only card's compute taken: a pod asking the other 30 % fits it now."""
    state = snapshot(gpu_node("n2", "core_mem", 1, 16),
                     gpu_pod("busy", "n2", mem=4, core=70, annotations=allocation(0, 4)), names=NAMES)
    for core, fits in ((30, True), (31, False), (35, False)):
        verdict, walked = _review(CapacityIndex(NAMES), state, _shared(4, core))
        assert verdict == walked and (verdict.not_now == "") == fits, core


class _Recording(WorkBudget):
    __slots__ = ("charges",)

    def __init__(self) -> None:
        super().__init__(10**9)
        self.charges: list[int] = []

    def charge(self, units: int) -> None:
        self.charges.append(units)
        super().charge(units)


def test_the_groupings_of_the_sixteen_key_sets_used_last_are_kept_and_an_older_one_is_built_again():
    state = snapshot(gpu_node("n0", "share", 2, 16), gpu_node("n1", "share", 2, 16), names=NAMES)
    index = CapacityIndex(NAMES)
    index.warm(state)

    def grouping_built(key: int, mem: int) -> bool:
        budget = _Recording()
        _review(index, state, _shared(mem, nodeSelector={f"example.com/k{key}": "x"}), budget)
        return budget.charges[:2] == [6, 6]  # each node joined to a new grouping: 5 + its label read

    assert [grouping_built(k, 1) for k in range(17)] == [True] * 17  # the first is dropped for the 17th
    assert not grouping_built(16, 2) and not grouping_built(1, 2)  # kept: the last 16 used
    assert grouping_built(0, 2)  # the oldest was dropped


def test_warming_builds_the_grouping_of_pods_without_node_constraints_within_its_own_budget():
    state = snapshot(*(gpu_node(f"n{i}", "share", 2, 16) for i in range(3)), names=NAMES)
    index = CapacityIndex(NAMES)
    index.warm(state)
    budget = _Recording()
    verdict, walked = _review(index, state, _shared(4), budget)
    assert verdict == walked
    assert 5 not in budget.charges[:3] and budget.charges[0] == 10  # no node joined or built: one group asked


def test_one_index_is_kept_per_configuration_and_at_most_eight_configurations(monkeypatch):
    from policies.placement import capacity_index as module

    monkeypatch.setattr(module, "_INDEXES", {})
    configurations = [Settings().names for _ in range(9)]  # nine objects: one configuration each, by identity
    assert len({id(n) for n in configurations}) == 9
    first = module.capacity_index(configurations[0])
    assert module.capacity_index(configurations[0]) is first
    assert first.names is configurations[0]
    for names in configurations[1:8]:
        module.capacity_index(names)
    assert module.capacity_index(configurations[0]) is first  # eight kept
    module.capacity_index(configurations[8])  # a ninth: the eight are dropped
    assert module.capacity_index(configurations[0]) is not first


def test_a_pod_that_fits_no_card_now_hears_of_the_first_closest_card_the_walk_meets():
    """Two nodes, each with cards 2 GiB short: the words name the first node's, as the walk does."""
    for mode, core in (("share", None), ("core_mem", 30)):
        state = snapshot(gpu_node("n0", mode, 2, 16), gpu_node("n1", mode, 2, 16),
                         *(gpu_pod(f"q{i}", f"n{i // 2}", mem=14, core=core and 20,
                                   annotations=allocation(i % 2, 14)) for i in range(4)), names=NAMES)
        verdict, walked = _review(CapacityIndex(NAMES), state, _shared(4, core))
        assert verdict == walked and "GPU0 of node n0" in verdict.not_now, mode


def test_a_pod_fits_a_card_with_exactly_the_memory_it_asks_left():
    """12 of a 16 GiB card taken: 4 GiB fits it now, alone or as two containers of 2, mem-only or
    core+mem; 5 GiB does not."""
    for mode, core in (("share", None), ("core_mem", 30)):
        state = snapshot(gpu_node("n0", mode, 1, 16),
                         gpu_pod("busy", "n0", mem=12, core=core and 20, annotations=allocation(0, 12)), names=NAMES)
        two = {"containers": [{"name": n, "image": "x", "resources": {"limits": {
            "aliyun.com/gpu-mem": 2, **({"aliyun.com/gpu-core.percentage": core} if core else {})}}} for n in "cd"]}
        for spec, fits in ((_shared(4, core), True), (two, True), (_shared(5, core), False)):
            verdict, walked = _review(CapacityIndex(NAMES), state, spec)
            assert verdict == walked and verdict.never == "" and (verdict.not_now == "") == fits, (mode, spec)
        # Two cards with 4 and 2 GiB free: containers of 4 and 2 GiB fit, one on each.
        state = snapshot(gpu_node("n0", mode, 2, 16), *(
            gpu_pod(f"busy{i}", "n0", mem=gib, core=core and 20, annotations=allocation(i, gib))
            for i, gib in enumerate((12, 14))), names=NAMES)
        pair = {"containers": [{"name": n, "image": "x", "resources": {"limits": {
            "aliyun.com/gpu-mem": gib, **({"aliyun.com/gpu-core.percentage": core} if core else {})}}}
            for n, gib in (("c", 4), ("d", 2))]}
        verdict, walked = _review(CapacityIndex(NAMES), state, pair)
        assert verdict == walked and verdict.never == "" and verdict.not_now == "", mode


def test_a_core_mem_pod_that_fits_no_card_now_hears_of_the_card_with_its_memory_and_the_most_compute():
    """The only card with 4 GiB free has 10 % of its compute free: a 4 GiB, 30 % pod is told of it."""
    state = snapshot(gpu_node("n0", "core_mem", 2, 16),
                     gpu_pod("a", "n0", mem=12, core=90, annotations=allocation(0, 12)),
                     gpu_pod("b", "n0", mem=14, core=10, annotations=allocation(1, 14)), names=NAMES)
    verdict, walked = _review(CapacityIndex(NAMES), state, _shared(4, 30))
    assert verdict == walked and "GPU0 of node n0" in verdict.not_now


def test_of_two_alike_cards_with_the_memory_a_core_mem_pod_hears_of_the_first_node_s():
    state = snapshot(*(gpu_node(f"n{i}", "core_mem", 1, 16) for i in range(3)), *(
        gpu_pod(f"p{i}", f"n{i}", mem=12, core=90, annotations=allocation(0, 12)) for i in range(3)), names=NAMES)
    verdict, walked = _review(CapacityIndex(NAMES), state, _shared(4, 30))
    assert verdict == walked and "GPU0 of node n0" in verdict.not_now


def test_an_empty_affinity_term_matches_no_node_and_the_terms_after_it_still_count():
    """Kubernetes: the terms are ORed, and a term with no requirement matches no node; a term of
    matchFields only is not empty."""
    state = snapshot(gpu_node("n0", "share", 1, 16), gpu_node("n1", "share", 1, 16), names=NAMES)
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    for terms, fits in (([{}, by_name], True), ([by_name], True), ([{}], False),
                        ([{"matchExpressions": []}, {"matchExpressions": [{"key": POOL, "operator": "DoesNotExist"}]}],
                         True)):
        spec = _shared(4, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}})
        verdict, walked = _review(CapacityIndex(NAMES), state, spec)
        assert verdict == walked and (verdict.never == "") == fits, terms


def test_the_nodes_of_a_mode_are_counted_one_each():
    """Two core_mem nodes, one removed: a core+mem pod still has the other."""
    state = snapshot(gpu_node("n1", "core_mem", 2, 16), gpu_node("n2", "core_mem", 2, 16), names=NAMES)
    index = CapacityIndex(NAMES)
    assert _review(index, state, _shared(4, 30))[0].never == ""
    state.remove_node("n1")
    verdict, walked = _review(index, state, _shared(5, 30))
    assert verdict == walked and verdict.never == "" and verdict.not_now == ""


def test_at_most_1024_verdicts_are_remembered_while_the_cluster_is_quiet():
    state = snapshot(gpu_node("n0", "share", 1, 16), names=NAMES)
    index = CapacityIndex(NAMES)
    for value in range(1100):  # 1,100 pods asking for nodes of 1,100 pools (none there)
        _review(index, state, _shared(4, nodeSelector={"example.com/pool": str(value)}))
    assert len(index._verdicts) == CapacityIndex.MAX_VERDICTS == 1024


def test_a_node_of_a_shape_already_judged_is_skipped_and_the_search_goes_on():
    """Nodes grouped by pool: a and b have the same shape (free 6, 4 and 4 GiB: the largest card and
    the room, but two 6 GiB containers do not fit), c has two cards of 6 free and holds them."""
    pool = "example.com/pool"
    nodes = [gpu_node(n, "share", cards, 16, labels={pool: n}) for n, cards in (("a", 3), ("b", 3), ("c", 2))]
    used = {"a": (10, 12, 12), "b": (10, 12, 12), "c": (10, 10)}
    pods = [gpu_pod(f"{n}{i}", n, mem=gib, annotations=allocation(i, gib))
            for n, gibs in used.items() for i, gib in enumerate(gibs)]
    state = snapshot(*nodes, *pods, names=NAMES)
    spec = {"containers": [{"name": n, "image": "x", "resources": {"limits": {"aliyun.com/gpu-mem": 6}}} for n in "xy"],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": pool, "operator": "Exists"}]}]}}}}
    verdict, walked = _review(CapacityIndex(NAMES), state, spec)
    assert verdict == walked and verdict.never == "" and verdict.not_now == ""


def test_a_node_selector_of_two_labels_matches_only_the_nodes_with_both():
    pool = "example.com/pool"
    state = snapshot(gpu_node("n0", "share", 1, 16, model="T4", labels={pool: "a"}),
                     gpu_node("n1", "share", 1, 16, model="V100", labels={pool: "b"}), names=NAMES)
    index = CapacityIndex(NAMES)
    for wanted, fits in ((("a", "T4"), True), (("a", "V100"), False), (("b", "V100"), True)):
        verdict, walked = _review(index, state, _shared(4, nodeSelector={pool: wanted[0], MODEL: wanted[1]}))
        assert verdict == walked and (verdict.never == "") == fits, wanted


def _assert_maps_current(index: CapacityIndex) -> None:
    """Every built group's maps are those its members' summaries give now, and each remembered
    best node still holds its key: nothing of a node as it was is left behind."""
    from policies.placement.node_groups import GroupMaps

    tables = ("sizes", "counts", "free_cards", "free_both", "mem_only", "core_cards", "shapes")
    bests = {"last_by_size": "sizes", "last_by_count": "counts", "first_by_free": "free_cards",
             "first_by_both": "free_both"}
    for projection in index._projections.values():
        for group in projection.groups.values():
            if group.maps is None:
                continue
            fresh = GroupMaps()
            for name in group.members:
                fresh.add(index._nodes[name])
            for table in tables:
                assert getattr(group.maps, table) == getattr(fresh, table), table
            for best, table in bests.items():
                for key, (_, name) in getattr(group.maps, best)._best.items():
                    assert name in getattr(group.maps, table)[key], (best, key, name)


def test_an_index_kept_up_to_date_leaves_nothing_of_a_node_as_it_was():
    """Pods start and end and nodes go between reviews: the index that followed every change gives
    the walk's verdict, and its maps are those of the nodes as they are now."""
    pool = "example.com/pool"
    state = snapshot(*(gpu_node(f"n{i}", "share", 1 + i // 2, 16, labels={pool: "a"}) for i in range(3)),
                     gpu_node("n3", "core_mem", 2, 16), gpu_node("n4", "core_mem", 2, 16),
                     gpu_node("n5", "share", 1, 16), gpu_pod("p5", "n5", mem=16, annotations=allocation(0, 16)),
                     gpu_pod("p1", "n1", mem=10, annotations=allocation(0, 10)), names=NAMES)
    index = CapacityIndex(NAMES)
    specs = [_shared(4), _shared(4, 30), _shared(4, nodeSelector={pool: "a"}),
             {"containers": [{"name": n, "image": "x", "resources": {"limits": {"aliyun.com/gpu-mem": 3}}}
                             for n in "xy"]}]

    def start(name: str, node: str, mem: int, core: int | None = None) -> None:
        state.upsert_pod(pod_from_manifest(gpu_pod(name, node, mem=mem, core=core, annotations=allocation(0, mem)),
                                           NAMES))

    changes = [lambda: start("s0", "n0", 14), lambda: start("s3", "n3", 13, 80),
               lambda: state.remove_pod("default", "p1"), lambda: state.remove_node("n2"),
               lambda: start("s1", "n1", 15), lambda: state.remove_node("n3"), lambda: state.remove_node("n5")]
    for step, change in enumerate([lambda: None, *changes]):
        change()
        for spec in specs:
            for mem in (2, 7, 15):  # a demand of each size, some fitting now, some not
                asked = {**spec, "containers": [{**c, "resources": {"limits": {
                    **c["resources"]["limits"], "aliyun.com/gpu-mem": mem}}} for c in spec["containers"]]}
                verdict, walked = _review(index, state, asked)
                assert verdict == walked, (step, asked)
        _assert_maps_current(index)


def test_the_largest_card_and_the_closest_card_are_found_again_after_their_node_goes():
    """Four alike nodes: n3 holds the largest card last by name, and n0 the closest card first in
    order. Once both are gone, the words name n2 (last by name) and n1 (first in order), as the walk."""
    state = snapshot(*(gpu_node(f"n{i}", "share", 1, 16) for i in range(4)), names=NAMES)
    for i in range(4):
        state.upsert_pod(pod_from_manifest(gpu_pod(f"p{i}", f"n{i}", mem=10, annotations=allocation(0, 10)), NAMES))
    index = CapacityIndex(NAMES)
    assert "node n3" in _review(index, state, _shared(20))[0].never
    assert "GPU0 of node n0" in _review(index, state, _shared(8))[0].not_now
    state.remove_node("n3")
    state.remove_node("n0")
    never, walked = _review(index, state, _shared(21))
    assert never == walked and "node n2" in never.never
    not_now, walked = _review(index, state, _shared(9))
    assert not_now == walked and "GPU0 of node n1" in not_now.not_now
