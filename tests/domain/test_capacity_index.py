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
