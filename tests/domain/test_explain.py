"""Why a GPU pod is Pending, in-process (what `gpushare explain POD`, /explain and the dashboard say):
every node with its reason, the node that comes closest and what would have to change there, and the
ElasticQuotaTree node that holds the pod back whatever the nodes have."""

from __future__ import annotations

from typing import Any

import pytest

from policies.model.cluster import ClusterState, NodeInfo, PodInfo
from policies.model.cluster_manifests import pod_from_manifest
from policies.scoring.explain import explain_pod, pending, quota_holds
from policies.scoring.scoring import Scorer
from tests.support.cluster_builders import allocation, gpu_node, gpu_pod, snapshot
from tests.support.helpers import DATA
from webhook.settings import Settings
from webhook.state.snapshot import load_snapshot, snapshot_from_objects

MODE_NOTE = "(a node's mode changes only while it runs no GPU pods)"


class ProtocolOnly:
    """A cluster state that answers only what rules may ask (policies.model.cluster.ClusterState): no
    quota objects, no list of every pod."""

    def __init__(self, base: ClusterState) -> None:
        self.base = base

    def availability(self) -> Any:
        return self.base.availability()

    def get_node(self, name: str) -> NodeInfo | None:
        return self.base.get_node(name)

    def has_pod(self, namespace: str, name: str) -> bool:
        return self.base.has_pod(namespace, name)

    def nodes(self) -> list[NodeInfo]:
        return self.base.nodes()

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        return self.base.get_pod(namespace, name)

    def pods_on_node(self, node: str) -> list[PodInfo]:
        return self.base.pods_on_node(node)


def explained(names, *objects: dict[str, Any], pod: str = "p"):
    state = snapshot(*objects, names=names)
    return explain_pod(state.get_pod("default", pod), state, Scorer(names))


def holders(prefix: str, node: str, count: int, mem: int = 1, **kw: Any) -> list[dict[str, Any]]:
    return [gpu_pod(f"{prefix}{i}", node, mem=mem, **kw) for i in range(count)]


@pytest.mark.parametrize(("objects", "summary", "changes"), [
    ([gpu_node("n1", "cgpu", 2, 15), gpu_pod("p", mem=2, core=30)],
     'Pod default/p ("p" 2 GiB 30% compute) fits none of 1 node(s); closest is n1: GB002: node n1 has '
     "ack.node.gpu.schedule=cgpu; core+mem pods need core_mem",
     [f"node n1 would need ack.node.gpu.schedule=core_mem {MODE_NOTE}"]),
    ([gpu_node("n1", "topology", 2, 15), gpu_pod("p", mem=2)], None,
     [f"node n1 would need ack.node.gpu.schedule=cgpu, core_mem, share or mps {MODE_NOTE}"]),
    ([gpu_node("n1", "cgpu", 2, 15), gpu_pod("p", whole=2)],
     "Pod default/p (2 whole GPUs) fits none of 1 node(s); closest is n1: GB002: node n1 has "
     "ack.node.gpu.schedule=cgpu; pods asking for aliyun.com/gpu need ack.node.gpu.schedule=topology",
     [f"node n1 would need ack.node.gpu.schedule=topology {MODE_NOTE}"]),
    ([gpu_node("n1", "topology", 2, 15), gpu_pod("p", whole=4)], None,
     ["more whole GPUs would have to be free on node n1: node n1 has 2 of 2 GPUs free, needs 4"]),
    ([gpu_node("n1", "cgpu", 2, 15, labels={"gpushare.io/cpu-manager-policy": "static"}), gpu_pod("p", mem=2)],
     None, ["node n1 would need the CPU manager policy none"]),
    ([gpu_node("n1", "core_mem", 2, 15), *holders("m", "n1", 7), gpu_pod("p", mem=2, core=30)], None,
     ["the mem-only pods on node n1 (default/m0, default/m1, default/m2 and 4 more) would have to finish or move"]),
    ([gpu_node("n1", "core_mem", 2, 15), *holders("m", "n1", 3), gpu_pod("p", mem=2, core=30)], None,
     ["the mem-only pods on node n1 (default/m0, default/m1, default/m2) would have to finish or move"]),
    ([gpu_node("n1", "core_mem", 2, 15), *holders("c", "n1", 2, core=10), gpu_pod("p", mem=2)], None,
     ["the core+mem pods on node n1 (default/c0, default/c1) would have to finish or move"]),
    ([gpu_node("n1", "cgpu", 2, 15), gpu_pod("p", mem=20)],
     'Pod default/p ("p" 20 GiB) fits none of 1 node(s); closest is n1: GB004: node n1: container "p" fits no card: '
     "GPU0 has 15/15 GiB free, needs 20; GPU1 has 15/15 GiB free, needs 20",
     ['container "p" asks for 20 GiB, more than a whole card of node n1 (15 GiB): ask for at most 15']),
    ([gpu_node("n1", "cgpu", 1, 15), *holders("h", "n1", 3, 4, annotations=allocation(0, 4)), gpu_pod("p", mem=5)],
     None, ["2 GiB more would have to be free on node n1 GPU0 (3/15 GiB free; held by default/h0, default/h1, "
            'default/h2), or container "p" ask for at most 3 GiB']),
    ([gpu_node("n1", "cgpu", 1, 15), *holders("h", "n1", 7, 1, annotations=allocation(0, 1)),
      gpu_pod("h7", "n1", mem=5, annotations=allocation(0, 5)), gpu_pod("p", mem=6)],
     None, ["3 GiB more would have to be free on node n1 GPU0 (3/15 GiB free; held by default/h0, default/h1, "
            'default/h2 and 5 more), or container "p" ask for at most 3 GiB']),
    ([gpu_node("n1", "cgpu", 1, 15), gpu_pod("h", "n1", mem=12, annotations=allocation(0, 12)), gpu_pod("p", mem=7)],
     None, ["4 GiB more would have to be free on node n1 GPU0 (3/15 GiB free; held by default/h), or container "
            '"p" ask for at most 3 GiB']),
    # Two cards equally free: the first is named.
    ([gpu_node("n1", "cgpu", 2, 15), gpu_pod("a", "n1", mem=12, annotations=allocation(0, 12)),
      gpu_pod("b", "n1", mem=12, annotations=allocation(1, 12)), gpu_pod("p", mem=4)],
     None, ["1 GiB more would have to be free on node n1 GPU0 (3/15 GiB free; held by default/a), or container "
            '"p" ask for at most 3 GiB']),
    ([gpu_node("n1", "core_mem", 1, 15), gpu_pod("h", "n1", mem=2, core=80, annotations=allocation(0, 2)),
      gpu_pod("p", mem=2, core=30)],
     'Pod default/p ("p" 2 GiB 30% compute) fits none of 1 node(s); closest is n1: GB004: node n1: container "p" '
     "fits no card: GPU0 has 20% compute free, needs 30%",
     ["10% more compute would have to be free on node n1 GPU0"]),
    ([gpu_node("n1", "cgpu", 1, 31), *holders("s", "n1", 20, annotations=allocation(0, 1)), gpu_pod("p", mem=1)],
     None, ["a card of node n1 would need fewer pods (the cGPU limit of pods per card)"]),
    ([gpu_node("n1", "cgpu", 1, 15), gpu_pod("p", mem=1, spec={"nodeSelector": {"x": "y"}})],
     'Pod default/p ("p" 1 GiB) fits none of 1 node(s); closest is n1: NodeAffinity: node n1: nodeSelector x=y: '
     "node has no label x",
     ["the pod's node selector or required node affinity would have to admit node n1 (nodeSelector x=y: node has "
      "no label x)"]),
], ids=["core-mem-mode", "shared-mode", "topology-mode", "whole-gpus", "cpu-manager", "mixing-many", "mixing-three",
        "mixing-core-mem", "larger-than-a-card", "free-memory", "free-memory-many-holders", "free-memory-7-of-3",
        "first-card",
        "free-compute", "pods-per-card", "node-affinity"])
def test_the_closest_node_and_what_would_have_to_change_there(settings, objects, summary, changes):
    explanation = explained(settings.names, *objects)
    assert (explanation.closest, explanation.changes, explanation.fitting) == ("n1", changes, [])
    assert explanation.phase == "Running" and explanation.node == ""  # the builder's phase, not bound
    if summary is not None:
        assert explanation.summary == summary
    [entry] = explanation.ranking
    assert entry["node"] == "n1" and entry["fits"] is False and explanation.summary.endswith("; ".join(
        entry["reasons"]))


def test_a_container_over_more_cards_than_the_node_has(settings):
    pod = gpu_pod("p", mem=2)
    pod["metadata"]["labels"] = {"aliyun.com/gpu-count": "4"}
    explanation = explained(settings.names, gpu_node("n1", "cgpu", 2, 15), pod)
    assert explanation.summary.startswith('Pod default/p ("p" 2 GiB over 4 cards) fits none of 1 node(s)')
    assert explanation.changes == ['container "p" spreads over 4 cards; node n1 has 2: its aliyun.com/gpu-count label '
                                   "would have to be at most 2"]
    explanation = explained(settings.names, gpu_node("n1", "cgpu", 2, 15), pod_with(2, 40))  # 20 GiB a card
    assert explanation.changes == ['container "p" asks for 20 GiB a card, more than a whole card of node n1 (15 GiB): '
                                   "ask for at most 15 a card"]
    crowded = explained(settings.names, gpu_node("n1", "cgpu", 2, 15),
                        gpu_pod("h0", "n1", mem=12, annotations=allocation(0, 12)),
                        gpu_pod("h1", "n1", mem=13, annotations=allocation(1, 13)), pod_with(2, 10))
    assert crowded.changes == ["2 GiB more would have to be free on node n1 GPU0 (3/15 GiB free; held by default/h0), "
                               'or container "p" ask for at most 3 GiB a card']


def pod_with(cards: int, mem: int) -> dict[str, Any]:
    pod = gpu_pod("p", mem=mem)
    pod["metadata"]["labels"] = {"aliyun.com/gpu-count": str(cards)}
    pod["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = mem
    return pod


def test_each_container_is_said_for_a_pod_of_several(settings):
    pod = gpu_pod("p", mem=20)
    pod["spec"]["containers"].append({"name": "side", "resources": {"limits": {"aliyun.com/gpu-mem": 18}}})
    explanation = explained(settings.names, gpu_node("n1", "cgpu", 2, 15), pod)
    assert explanation.summary.startswith('Pod default/p ("p" 20 GiB, "side" 18 GiB) fits none')
    assert explanation.changes == [
        'container "p" asks for 20 GiB, more than a whole card of node n1 (15 GiB): ask for at most 15',
        'container "side" asks for 18 GiB, more than a whole card of node n1 (15 GiB): ask for at most 15']


def test_the_closest_node_is_curable_then_has_fewer_problems_then_the_smallest_shortfall(settings):
    names = settings.names
    # a: unresolvable (its mode); b: 2 GiB short; c and d: 1 GiB short.
    objects = [gpu_node("a", "topology", 2, 15),
               gpu_node("b", "cgpu", 1, 15), gpu_pod("hb", "b", mem=12, annotations=allocation(0, 12)),
               gpu_node("c", "cgpu", 1, 15), gpu_pod("hc", "c", mem=11, annotations=allocation(0, 11)),
               gpu_node("d", "cgpu", 1, 15), gpu_pod("hd", "d", mem=11, annotations=allocation(0, 11)),
               gpu_pod("p", mem=5)]
    explanation = explained(names, *objects)
    assert explanation.closest == "c"  # 1 GiB short, and before d by name
    assert explanation.summary.startswith('Pod default/p ("p" 5 GiB) fits none of 4 node(s); closest is c: GB004')
    assert [e["node"] for e in explanation.ranking] == ["a", "b", "c", "d"]
    assert explained(names, *objects[:3], objects[-1]).closest == "b"  # curable before a, whatever the name
    # Fewer problems first: a selector miss and the shortfall on e, the shortfall alone on f.
    pod = gpu_pod("p", mem=5, spec={"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                     "values": ["f", "g"]}]}]}}}})
    crowded = [gpu_node("e", "cgpu", 1, 15), gpu_pod("he", "e", mem=14, annotations=allocation(0, 14)),
               gpu_node("f", "cgpu", 1, 15), gpu_pod("hf", "f", mem=14, annotations=allocation(0, 14)),
               gpu_node("g", "cgpu", 1, 15, labels={"gpushare.io/cpu-manager-policy": "static"}),
               gpu_pod("hg", "g", mem=14, annotations=allocation(0, 14)), pod]
    assert explained(names, *crowded).closest == "f"


def test_a_pod_that_fits_somewhere_waits_for_its_scheduler(settings):
    names = settings.names
    explanation = explained(names, gpu_node("full", "cgpu", 1, 15),
                            gpu_pod("h", "full", mem=14, annotations=allocation(0, 14)),
                            gpu_node("roomy", "cgpu", 1, 15), gpu_node("roomier", "cgpu", 2, 15), gpu_pod("p", mem=4))
    assert explanation.fitting == ["roomier", "roomy"]  # the same score (4/15 full): by name
    assert explanation.summary == (f'Pod default/p ("p" 4 GiB) fits 2 node(s) now, best {explanation.fitting[0]}; it '
                                   f"is waiting for its scheduler, not for room")
    assert explanation.closest == "" and explanation.changes == [] and len(explanation.ranking) == 3
    assert explanation.as_dict()["closest"] is None and explanation.as_dict()["node"] is None


def test_no_node_in_the_state(settings):
    explanation = explained(settings.names, gpu_pod("p", mem=1))
    assert explanation.summary == 'Pod default/p ("p" 1 GiB) is Pending: the cluster state holds no node'
    assert explanation.ranking == [] and explanation.closest == ""


def test_a_bound_pod_and_a_pod_without_a_shared_gpu_are_not_waiting_for_a_node(settings):
    names = settings.names
    bound = explained(names, gpu_node("n1", "cgpu", 1, 15), gpu_pod("p", "n1", mem=1))
    assert (bound.node, bound.phase, bound.ranking) == ("n1", "Running", [])
    assert bound.summary == ("Pod default/p is bound to node n1 (phase Running); it is not waiting for a node")
    assert bound.as_dict()["node"] == "n1"
    unknown = explained(names, gpu_node("n1", "cgpu", 1, 15), gpu_pod("p", "n1", mem=1, phase=""))
    assert unknown.phase == "Unknown" and "(phase Unknown)" in unknown.summary
    plain = explained(names, gpu_node("n1", "default", 1, 15), gpu_pod("p", mem=None, whole=None, phase=""))
    assert plain.summary == ("Pod default/p asks for no shared or topology GPU; kube-scheduler's own events explain it")
    assert plain.phase == "Unknown" and plain.node == "" and plain.ranking == []
    pending_phase = explained(names, gpu_pod("p", mem=1, phase=""))
    assert pending_phase.phase == "Pending"


def test_pending_means_a_gpu_pod_not_bound_and_not_finished(settings):
    names = settings.names
    state = snapshot(gpu_pod("shared", mem=1), gpu_pod("whole", whole=1), gpu_pod("bound", "n1", mem=1),
                     gpu_pod("done", mem=1, phase="Succeeded"), gpu_pod("cpu", mem=None), names=names)
    assert {p: pending(state.get_pod("default", p)) for p in ("shared", "whole", "bound", "done")} == {
        "shared": True, "whole": True, "bound": False, "done": False}


QUOTA_CLUSTER = "quota/cluster.yaml"
HELD = ('ElasticQuotaTree kube-system/elasticquotatree quota node team-b has max["aliyun.com/gpu-mem"] 40 GiB, '
        "30 used, 10 left; the pod needs 16 GiB: it waits until the quota node's usage falls below its max")


def test_a_pod_held_by_its_quota_node_is_said_to_wait_on_it(settings):
    names = settings.names
    state = load_snapshot(DATA / QUOTA_CLUSTER, names)
    queued = explain_pod(state.get_pod("team-b", "queued"), state, Scorer(names))
    assert queued.quota == [HELD] and queued.as_dict()["quota"] == [HELD]
    assert queued.summary == (f'Pod team-b/queued ("main" 16 GiB) waits on its quota: {HELD}; '
                              "1 node(s) could take it now")
    # 10 GiB, with 10 left: room enough (the scheduler admits requests that reach max exactly).
    waiting = explain_pod(state.get_pod("team-b", "waiting"), state, Scorer(names))
    assert waiting.quota == [] and waiting.summary.endswith("it is waiting for its scheduler, not for room")
    # Only the ElasticQuotaTree holds a created pod back: a ResourceQuota refused it at creation instead.
    assert quota_holds(state.get_pod("team-b", "queued"), ProtocolOnly(state), names) == []


def test_a_quota_node_s_compute_is_said_in_percent_and_with_no_node_that_fits(settings):
    names = settings.names
    tree = {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "metadata": {"name": "t", "namespace": "kube-system"},
            "spec": {"root": {"name": "root", "max": {"aliyun.com/gpu-core.percentage": "100"},
                              "children": [{"name": "ml", "namespaces": ["default"],
                                            "max": {"aliyun.com/gpu-mem": "10"}}]}}}
    objects = [gpu_node("n1", "core_mem", 1, 15), gpu_pod("run", "n1", mem=2, core=80, annotations=allocation(0, 2)),
               gpu_pod("p", mem=9, core=30), tree]
    explanation = explain_pod(*_pod_and_state(objects, names, "p"), Scorer(names))
    assert explanation.quota == [
        'ElasticQuotaTree kube-system/t quota node root has max["aliyun.com/gpu-core.percentage"] 100 %, 80 used, 20 '
        "left; the pod needs 30 %: it waits until the quota node's usage falls below its max",
        'ElasticQuotaTree kube-system/t quota node ml has max["aliyun.com/gpu-mem"] 10 GiB, 2 used, 8 left; the pod '
        "needs 9 GiB: it waits until the quota node's usage falls below its max"]
    assert explanation.summary == ('Pod default/p ("p" 9 GiB 30% compute) waits on its quota: '
                                   + "; ".join(explanation.quota))  # and no node could take it now


def _pod_and_state(objects: list[dict[str, Any]], names, pod: str) -> tuple[PodInfo, ClusterState]:
    state = snapshot_from_objects(objects, names)
    return state.get_pod("default", pod), state


@pytest.mark.parametrize(("objects", "changes"), [
    ([gpu_node("n1", "core_mem", 2, 15), *holders("m", "n1", 4), gpu_pod("p", mem=2, core=30)],
     ["the mem-only pods on node n1 (default/m0, default/m1, default/m2 and 1 more) would have to finish or move"]),
    ([gpu_node("n1", "cgpu", 1, 15), *holders("h", "n1", 4, 3, annotations=allocation(0, 3)), gpu_pod("p", mem=4)],
     ["1 GiB more would have to be free on node n1 GPU0 (3/15 GiB free; held by default/h0, default/h1, "
      'default/h2 and 1 more), or container "p" ask for at most 3 GiB']),
    # A node without shared cards: its reason as the ranking says it.
    ([gpu_node("n1", "cgpu", 0, 15), gpu_pod("p", mem=2)],
     ['GB004: node n1: container "p" fits no card: the node has no shared GPU cards']),
], ids=["four-mem-only-pods", "four-holders", "no-cards"])
def test_four_pods_are_three_named_and_one_more(settings, objects, changes):
    assert explained(settings.names, *objects).changes == changes


def test_a_container_that_fits_the_freest_card_by_itself_is_asked_to_change_nothing(settings):
    pod = gpu_pod("p", mem=10, core=30)
    pod["spec"]["containers"].append({"name": "d", "resources": {"limits": {"aliyun.com/gpu-mem": 10,
                                                                             "aliyun.com/gpu-core.percentage": 30}}})
    explanation = explained(settings.names, gpu_node("n1", "core_mem", 1, 15), pod)
    assert explanation.closest == "n1" and not any("compute" in change for change in explanation.changes)


def test_a_container_over_two_cards_is_said_so(settings):
    explanation = explained(settings.names, gpu_node("n1", "cgpu", 1, 15), pod_with(2, 10))
    assert explanation.summary.startswith('Pod default/p ("p" 10 GiB over 2 cards) fits none of 1 node(s)')


@pytest.mark.parametrize(("cardless", "closest"), [("a", "a"), ("z", "b")])
def test_among_nodes_no_eviction_cures_a_node_without_cards_has_no_shortfall(settings, cardless, closest):
    # Both unresolvable with one problem and no memory short: the name decides.
    objects = [gpu_node(cardless, "cgpu", 0, 15),
               gpu_node("b", "cgpu", 1, 15, labels={"gpushare.io/cpu-manager-policy": "static"}), gpu_pod("p", mem=2)]
    assert explained(settings.names, *objects).closest == closest


def test_the_shortfall_is_what_the_freest_card_lacks_and_never_below_zero(settings):
    names = settings.names
    # a lacks 1 GiB; b runs core+mem pods (one problem, like a) with memory to spare: b is closer.
    short = [gpu_node("a", "cgpu", 1, 15), gpu_pod("ha", "a", mem=12, annotations=allocation(0, 12)),
             gpu_node("b", "core_mem", 1, 15), gpu_pod("hb", "b", mem=2, core=20, annotations=allocation(0, 2)),
             gpu_pod("p", mem=4)]
    assert explained(names, *short).closest == "b"
    # Exactly enough on a, more than enough on b: neither lacks anything, so the name decides.
    spare = [gpu_node("a", "core_mem", 1, 15), gpu_pod("ha", "a", mem=11, core=20, annotations=allocation(0, 11)),
             gpu_node("b", "core_mem", 1, 15), gpu_pod("hb", "b", mem=2, core=20, annotations=allocation(0, 2)),
             gpu_pod("p", mem=4)]
    assert explained(names, *spare).closest == "a"
    roomy_first = [gpu_node("a", "core_mem", 1, 15), gpu_pod("ha", "a", mem=2, core=20, annotations=allocation(0, 2)),
                   gpu_node("b", "core_mem", 1, 15), gpu_pod("hb", "b", mem=11, core=20, annotations=allocation(0, 11)),
                   gpu_pod("p", mem=4)]
    assert explained(names, *roomy_first).closest == "a"


@pytest.mark.parametrize(("used", "asked", "more"), [(80, 45, 25), (40, 70, 10), (90, 25, 15)])
def test_the_compute_a_card_lacks(settings, used, asked, more):
    objects = [gpu_node("n1", "core_mem", 1, 15), gpu_pod("h", "n1", mem=2, core=used, annotations=allocation(0, 2)),
               gpu_pod("p", mem=2, core=asked)]
    changes = explained(settings.names, *objects).changes
    assert changes == [f"{more}% more compute would have to be free on node n1 GPU0"]


def test_a_quota_node_s_compute_under_other_resource_names(settings):
    names = Settings(names={"resources": {"gpu_core": "example.com/z-core"}}).names
    tree = {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "metadata": {"name": "t", "namespace": "kube-system"},
            "spec": {"root": {"name": "root", "namespaces": ["default"], "max": {"example.com/z-core": "100"}}}}
    running = gpu_pod("run", "n1", mem=2, annotations=allocation(0, 2))
    running["spec"]["containers"][0]["resources"]["limits"]["example.com/z-core"] = 80
    pending = gpu_pod("p", mem=9)
    pending["spec"]["containers"][0]["resources"]["limits"]["example.com/z-core"] = 30
    node = gpu_node("n1", "core_mem", 1, 15)
    node["status"]["allocatable"]["example.com/z-core"] = node["status"]["capacity"]["example.com/z-core"] = "100"
    explanation = explain_pod(*_pod_and_state([node, running, pending, tree], names, "p"), Scorer(names))
    assert explanation.quota == [
        'ElasticQuotaTree kube-system/t quota node root has max["example.com/z-core"] 100 %, 80 used, 20 left; the '
        "pod needs 30 %: it waits until the quota node's usage falls below its max"]


def test_a_resource_quota_holds_no_created_pod_back(settings):
    names = settings.names
    state = load_snapshot(DATA / QUOTA_CLUSTER, names)
    # team-a's ResourceQuota has less than 20 GiB left; a pod already created waits on nodes, not on it.
    pod = gpu_pod("late", mem=20, namespace="team-a")
    state.upsert_pod(pod_from_manifest(pod, names))
    assert quota_holds(state.get_pod("team-a", "late"), state, names) == []


@pytest.mark.parametrize(("holder", "asked", "core", "change"), [
    (2, 15, None, '2 GiB more would have to be free on node n1 GPU0 (13/15 GiB free; held by default/h), or container '
                  '"p" ask for at most 13 GiB'),  # a whole card's worth is not more than a card
    (11, 4, 30, "10% more compute would have to be free on node n1 GPU0"),  # the memory is there exactly
])
def test_a_request_equal_to_the_limit_fits_it(settings, holder, asked, core, change):
    objects = [gpu_node("n1", "core_mem", 1, 15),
               gpu_pod("h", "n1", mem=holder, core=80, annotations=allocation(0, holder)),
               gpu_pod("p", mem=asked, core=core)]
    if core is None:
        objects[0] = gpu_node("n1", "cgpu", 1, 15)
        objects[1] = gpu_pod("h", "n1", mem=holder, annotations=allocation(0, holder))
    assert explained(settings.names, *objects).changes == [change]


@pytest.mark.parametrize("used", [50, 60])
def test_no_compute_is_asked_of_a_card_with_as_much_as_each_container_needs(settings, used):
    pod = gpu_pod("p", mem=5, core=40)
    pod["spec"]["containers"].append({"name": "d", "resources": {"limits": {"aliyun.com/gpu-mem": 5,
                                                                             "aliyun.com/gpu-core.percentage": 40}}})
    objects = [gpu_node("n1", "core_mem", 1, 15), gpu_pod("h", "n1", mem=2, core=used, annotations=allocation(0, 2)),
               pod]
    explanation = explained(settings.names, *objects)
    assert explanation.closest == "n1" and not any("compute" in change for change in explanation.changes)
