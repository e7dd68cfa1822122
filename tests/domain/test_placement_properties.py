"""The ranking's shortcuts agree with the plain definitions, on random nodes and pods (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from policies.model.cluster import NodeInfo, PodGPU, PodInfo
from policies.placement.card_choice import CardOrder
from policies.placement.cards import Card
from policies.placement.placement import PodDemand, _may_object, _mode_problems, judge, node_profile
from tests.support.profiles import examples
from webhook.settings import load_settings

NAMES = load_settings().names
MODES = ["", "default", "cgpu", "core_mem", "share", "mps", "topology"]


@st.composite
def cards(draw) -> list[Card]:
    total = draw(st.integers(1, 16))
    out = []
    for index in range(draw(st.integers(0, 6))):
        used = draw(st.integers(0, total))
        pods = tuple(f"ns/p{i}" for i in range(draw(st.integers(0, 22))))
        out.append(Card(index, total, used, draw(st.integers(0, 100)), pods))
    return out


@given(cards(), st.sampled_from(["binpack", "spread"]), st.integers(1, 17), st.sampled_from([0, 0, 5, 50, 100]),
       st.sampled_from([None, 20, 1]), st.sampled_from(["ns/p0", "ns/new"]))
def test_first_fit_is_the_fullest_or_emptiest_card_that_fits(cards_, placement, mem, core, limit, key):
    def fits(c: Card) -> bool:
        return (c.free_mem >= mem and (not core or 100 - c.used_core >= core)
                and (limit is None or key in c.pods or len(c.pods) < limit))

    fitting = [c for c in cards_ if fits(c)]
    if placement == "binpack":
        expected = min(fitting, key=lambda c: (c.free_mem, c.index), default=None)
    else:
        expected = min(fitting, key=lambda c: (c.used_mem, len(c.pods), c.index), default=None)
    assert CardOrder(cards_, placement).first_fit(PodGPU("c", mem, core), key, limit) is expected


@st.composite
def node_and_pods(draw) -> tuple[NodeInfo, list[PodInfo]]:
    mode = draw(st.sampled_from(MODES))
    count = draw(st.integers(0, 4))
    gib = draw(st.integers(1, 16))
    labels = {NAMES.labels.schedule: mode} if mode else {}
    if draw(st.booleans()):
        labels[NAMES.labels.placement] = "spread"
    if draw(st.integers(0, 5)) == 0:
        labels[NAMES.labels.cpu_manager_policy] = "static"
    r = NAMES.resources
    resources = {r.gpu_topology: count} if mode == "topology" else {r.gpu_mem: count * gib, r.gpu_count: count}
    node = NodeInfo("n1", labels, {}, "", "", resources, resources)
    pods = []
    for i in range(draw(st.integers(0, 8))):
        gpus = tuple(PodGPU(f"c{j}", draw(st.integers(1, 16)), draw(st.sampled_from([0, 0, 10, 30])), j)
                     for j in range(draw(st.integers(0, 2))))
        annotations = {}
        if gpus and count and draw(st.booleans()):
            annotations[NAMES.card_index_annotation] = str(draw(st.integers(0, count - 1)))
        topology = 0 if gpus else draw(st.integers(0, 3))
        phase = draw(st.sampled_from(["Running", "Running", "Succeeded"]))
        pods.append(PodInfo("ns", f"p{i}", f"u{i}", "n1", phase, gpus, annotations, topology))
    return node, pods


@st.composite
def demands(draw) -> PodDemand:
    kind = draw(st.sampled_from(["shared", "shared", "topology", "exclusive", "none"]))
    if kind == "shared":
        core = draw(st.sampled_from([0, 0, 20, 60]))
        gpus = tuple(PodGPU(f"k{j}", draw(st.integers(1, 17)), core, j) for j in range(draw(st.integers(1, 2))))
        return PodDemand(draw(st.sampled_from(["ns/new", "ns/p0"])), gpus)
    if kind == "topology":
        return PodDemand("ns/new", (), 0, draw(st.integers(1, 5)))
    return PodDemand("ns/new", (), draw(st.integers(1, 2)) if kind == "exclusive" else 0, 0)


@hyp_settings(max_examples=examples(400), deadline=None)
@given(node_and_pods(), demands())
def test_quick_judging_agrees_with_full_placement(node_pods, demand):
    node, pods = node_pods
    profile = node_profile(node, pods, NAMES)
    quick = judge(demand, profile, NAMES)  # shortcuts: quick_card, cached order, messages only on failure
    full = judge(demand, profile, NAMES, keep_state=True)  # copies and places container by container
    assert quick.problems == full.problems
    assert quick.cards == full.cards
    if not _may_object(demand, profile):
        assert _mode_problems(demand, profile, NAMES) == []
    # Judging never changes the profile it reads.
    assert judge(demand, profile, NAMES, keep_state=True).problems == full.problems
