"""GC001 word for word, in process: some node of the cluster can hold the pod (policies/placement/capacity.py).

The served paths (the webhook's warning, `check --snapshot`, the dry run, failing open without a
usable state) are in tests/server/test_fidelity.py; here each verdict of the rule is pinned exactly."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import yaml

from policies.admission.engine import Engine
from policies.model.cluster import Availability
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.rules.rule_index import rule_entries
from tests.support.cluster_builders import allocation, gpu_node, gpu_pod, snapshot
from tests.support.helpers import costly_pod
from tests.support.manifests import received
from webhook.settings import Settings

MODEL = "aliyun.accelerator/nvidia_name"
ACCEPTED = "; accepted: a request that fits such a card, or add nodes with bigger cards first"


def gc001(engine, obj, state, *, kind="Pod", operation="CREATE"):
    subject = engine.subject(received(kind), received(obj), operation=received(operation),
                             namespace=obj.get("metadata", {}).get("namespace", "default"), state=state)
    return [(f.severity, f.message, f.path_text) for f in engine.validate(subject).findings if f.rule == "GC001"]


def cluster(settings, *objects):
    """The cluster as the watch delivers it: objects decoded from JSON."""
    return snapshot(*(received(obj) for obj in objects), names=settings.names)


def pod(name="p", **kwargs):
    return gpu_pod(name, **kwargs)


def two_containers(first: int, second: int, *, core: int | None = None):
    obj = gpu_pod("p", mem=first, core=core)
    side = {"name": "side", "image": "cuda:12", "resources": {"limits": {"aliyun.com/gpu-mem": second}}}
    obj["spec"]["containers"].append(side)
    return obj


# ---- never: no node the cluster has could hold it ------------------------------------------------------

def test_larger_than_the_largest_card_of_a_node_that_could_take_it(engine, settings):
    state = cluster(settings, gpu_node("a", "share", 2, 15), gpu_node("b", "core_mem", 1, 31),
                    gpu_node("t", "topology", 8), gpu_node("x", "default", 8))
    assert gc001(engine, pod(mem=40), state) == [
        ("warn", 'GC001: Pod default/p cannot run on any node the cluster has: container "p" asks for '
                 "aliyun.com/gpu-mem=40, more than the largest card of any node that could take it: 31 GiB "
                 "(GPU0 of node b)" + ACCEPTED, "spec")]


def test_exactly_the_largest_card_fits():
    # 31 GiB on a 31 GiB card: holdable (nothing else runs there), so nothing is said
    engine = Engine(Settings())
    state = cluster(engine.settings, gpu_node("b", "share", 2, 31))
    assert gc001(engine, pod(mem=31), state) == []
    assert gc001(engine, pod(mem=32), state)[0][1].endswith("32, more than the largest card of any node that "
                                                             "could take it: 31 GiB (GPU0 of node b)" + ACCEPTED)


def test_the_largest_card_is_named_by_size_then_by_node_then_its_first_index(engine, settings):
    state = cluster(settings, gpu_node("a", "share", 2, 20), gpu_node("c", "cgpu", 3, 20),
                    gpu_node("b", "mps", 4, 20), gpu_node("d", "share", 2, 10))
    assert gc001(engine, pod(mem=21), state)[0][1] == (
        'GC001: Pod default/p cannot run on any node the cluster has: container "p" asks for aliyun.com/gpu-mem=21, '
        "more than the largest card of any node that could take it: 20 GiB (GPU0 of node c)" + ACCEPTED)


def test_the_container_asking_most_is_the_one_named(engine, settings):
    state = cluster(settings, gpu_node("a", "share", 2, 15))
    assert gc001(engine, two_containers(2, 40), state)[0][1] == (
        'GC001: Pod default/p cannot run on any node the cluster has: container "side" asks for '
        "aliyun.com/gpu-mem=40, more than the largest card of any node that could take it: 15 GiB "
        "(GPU0 of node a)" + ACCEPTED)
    # on a tie the first container is named
    assert 'container "p" asks for aliyun.com/gpu-mem=40' in gc001(engine, two_containers(40, 40), state)[0][1]


def test_a_pod_spread_over_cards_is_named_by_its_share_of_each(engine, settings):
    # The multi-GPU label: 40 GiB over 2 cards is 20 on each, which no 15 GiB card holds; 30 over 2 fits.
    state = cluster(settings, gpu_node("a", "share", 4, 15))

    def spread(mem, cards):
        obj = pod(mem=mem)
        obj["metadata"].setdefault("labels", {})["aliyun.com/gpu-count"] = cards
        return obj

    assert gc001(engine, spread(40, "2"), state) == [
        ("warn", 'GC001: Pod default/p cannot run on any node the cluster has: container "p" asks for 20 GiB on each '
                 "of 2 cards, more than the largest card of any node that could take it: 15 GiB (GPU0 of node a)"
         + ACCEPTED, "spec")]
    assert gc001(engine, spread(30, "2"), state) == []
    assert gc001(engine, spread(20, "1"), state)[0][1] == (
        'GC001: Pod default/p cannot run on any node the cluster has: container "p" asks for aliyun.com/gpu-mem=20, '
        "more than the largest card of any node that could take it: 15 GiB (GPU0 of node a)" + ACCEPTED)


def test_a_core_mem_pod_needs_a_core_mem_node(engine, settings):
    state = cluster(settings, gpu_node("a", "share", 2, 15), gpu_node("c", "cgpu", 2, 15))
    assert gc001(engine, pod(mem=2, core=30), state) == [
        ("warn", "GC001: Pod default/p cannot run on any node the cluster has: it asks for "
                 "aliyun.com/gpu-core.percentage and the cluster has no core_mem node (computing power allocation "
                 "needs a core_mem node pool)" + ACCEPTED, "spec")]


def test_a_core_mem_pod_is_bounded_by_the_core_mem_nodes_only(engine, settings):
    state = cluster(settings, gpu_node("a", "share", 2, 40), gpu_node("b", "core_mem", 1, 15))
    assert gc001(engine, pod(mem=16, core=30), state)[0][1] == (
        'GC001: Pod default/p cannot run on any node the cluster has: container "p" asks for aliyun.com/gpu-mem=16, '
        "more than the largest card of any node that could take it: 15 GiB (GPU0 of node b)" + ACCEPTED)
    # a mem-only pod goes on the core_mem node too, and on the share node's 40 GiB cards
    assert gc001(engine, pod(mem=16), state) == []


def test_no_node_of_a_shared_mode(engine, settings):
    state = cluster(settings, gpu_node("t", "topology", 8), gpu_node("x", "default", 8))
    assert gc001(engine, pod(mem=2), state) == [
        ("warn", "GC001: Pod default/p cannot run on any node the cluster has: the cluster has no shared-mode "
                 "(cgpu, core_mem, mps, share) node; accepted: add a shared-mode (cgpu, core_mem, mps, share) node "
                 "first", "spec")]
    two = cluster(settings, gpu_node("b", "core_mem", 1, 15, labels={MODEL: "A10"}),
                  gpu_node("s", "share", 1, 15, labels={MODEL: "T4"}))
    selected = {**pod(mem=2, core=30), "spec": {**pod(mem=2, core=30)["spec"], "nodeSelector": {MODEL: "T4"}}}
    assert gc001(engine, selected, two)[0][1] == (
        "GC001: Pod default/p cannot run on any node the cluster has: the cluster has no core_mem node that matches "
        "its node selectors or affinity; accepted: add a core_mem node that matches its node selectors or affinity "
        "first")


def test_a_node_selector_that_matches_no_node_says_so(engine, settings):
    # Not "add nodes with bigger cards": no node of any mode matches what the pod selects.
    core_mem = cluster(settings, gpu_node("b", "core_mem", 1, 15, labels={MODEL: "A10"}))
    selected = {**pod(mem=2, core=30), "spec": {**pod(mem=2, core=30)["spec"], "nodeSelector": {MODEL: "T4"}}}
    assert gc001(engine, selected, core_mem)[0][1] == (
        "GC001: Pod default/p cannot run on any node the cluster has: no node of the cluster matches its node "
        "selectors or affinity; accepted: a node selector or affinity that a node of the cluster matches")


def test_card_model_selectors_narrow_the_nodes(engine, settings):
    state = cluster(settings, gpu_node("big", "share", 1, 40, model="A100"), gpu_node("small", "share", 1, 15,
                                                                                        model="T4"))
    selected = pod(mem=20)
    selected["spec"]["nodeSelector"] = {MODEL: "T4"}
    assert gc001(engine, selected, state)[0][1] == (
        'GC001: Pod default/p cannot run on any node the cluster has: container "p" asks for aliyun.com/gpu-mem=20, '
        "more than the largest card of any node that could take it: 15 GiB (GPU0 of node small)" + ACCEPTED)
    assert gc001(engine, pod(mem=20), state) == []


def test_nodes_that_show_no_cards(engine, settings):
    bare = gpu_node("a", "share", 2, 15)
    for block in ("allocatable", "capacity"):
        for resource in ("aliyun.com/gpu-mem", "aliyun.com/gpu-count"):
            del bare["status"][block][resource]
    bare["metadata"]["labels"].pop("aliyun.accelerator/nvidia_count")
    assert gc001(engine, pod(mem=2), cluster(settings, bare)) == [
        ("warn", "GC001: Pod default/p cannot run on any node the cluster has: no node that could take it shows "
                 "its GPU cards (gpu-mem and gpu-count)" + ACCEPTED, "spec")]


def test_deny_by_configuration():
    engine = Engine(Settings(rules={"GC001": {"severity": "deny"}}))
    state = cluster(engine.settings, gpu_node("a", "share", 1, 15))
    [(severity, message, _)] = gc001(engine, pod(mem=40), state)
    assert (severity, message.split(":")[1]) == ("deny", " Pod default/p cannot run on any node the cluster has")


# ---- not now: a card could hold it, none holds it now -----------------------------------------------------

def test_fits_no_card_now_names_the_card_with_most_free_that_could_hold_it(engine, settings):
    state = cluster(settings, gpu_node("a", "share", 2, 15), gpu_node("b", "share", 1, 15),
                    gpu_node("c", "share", 1, 3),
                    gpu_pod("x", "a", mem=12, annotations=allocation(0, 12)),
                    gpu_pod("y", "a", mem=11, annotations=allocation(1, 11)),
                    gpu_pod("z", "b", mem=11, annotations=allocation(0, 11)))
    expected = [("warn", 'GC001: Pod default/p cannot be scheduled now: container "p" (aliyun.com/gpu-mem=5) fits '
                         "no card of the nodes that could take it right now; the closest is GPU1 of node a with 4 of "
                         "15 GiB free; it stays Pending until GPU memory is freed", "spec")]
    assert gc001(engine, pod(mem=5), state) == expected
    # advisory: a warning even where the rule denies
    assert gc001(Engine(Settings(rules={"GC001": {"severity": "deny"}})), pod(mem=5), state) == expected
    assert gc001(engine, pod(mem=4), state) == []


def test_not_now_counts_every_container_of_the_pod(engine, settings):
    # each container alone fits a card, both together do not
    state = cluster(settings, gpu_node("a", "share", 2, 15), gpu_pod("x", "a", mem=10, annotations=allocation(0, 10)),
                    gpu_pod("y", "a", mem=13, annotations=allocation(1, 13)))
    assert gc001(engine, two_containers(3, 4), state) == [
        ("warn", 'GC001: Pod default/p cannot be scheduled now: container "side" (aliyun.com/gpu-mem=4) fits '
                 "no card of the nodes that could take it right now; the closest is GPU0 of node a with 5 of 15 GiB "
                 "free; it stays Pending until GPU memory is freed", "spec")]
    assert gc001(engine, two_containers(3, 2), state) == []


def test_the_closest_card_may_be_exactly_the_size_asked(engine, settings):
    state = cluster(settings, gpu_node("a", "share", 1, 15), gpu_node("c", "share", 1, 3),
                    gpu_pod("x", "a", mem=12, annotations=allocation(0, 12)))
    assert gc001(engine, pod(mem=15), state)[0][1] == (
        'GC001: Pod default/p cannot be scheduled now: container "p" (aliyun.com/gpu-mem=15) fits no card of the '
        "nodes that could take it right now; the closest is GPU0 of node a with 3 of 15 GiB free; it stays Pending "
        "until GPU memory is freed")


# ---- when the rule judges -------------------------------------------------------------------------------

def test_a_workload_template_is_judged_at_its_template(engine, settings):
    state = cluster(settings, gpu_node("a", "share", 1, 15))
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
                  "spec": {"template": {"spec": pod(mem=40)["spec"]}}}
    assert gc001(engine, deployment, state, kind="Deployment") == [
        ("warn", 'GC001: Deployment default/d cannot run on any node the cluster has: container "p" asks for '
                 "aliyun.com/gpu-mem=40, more than the largest card of any node that could take it: 15 GiB "
                 "(GPU0 of node a)" + ACCEPTED, "spec.template.spec")]


def pytorchjob(**replicas):
    """The PyTorchJob of tests/data/workloads with each named replica's container changed by the given function."""
    job = yaml.safe_load((Path(__file__).parents[1] / "data" / "workloads" / "pytorchjob.yaml").read_text())
    for name, change in replicas.items():
        change(job["spec"]["pytorchReplicaSpecs"][name]["template"]["spec"])
    return job


def test_every_pod_template_of_a_custom_workload_is_judged_at_its_own(engine, settings):
    # The Master asks for no GPU (nothing to judge there); the Worker, after it, asks for more than any card.
    def no_gpu(spec):
        del spec["containers"][0]["resources"]

    def forty(spec):
        spec["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = 40

    state = cluster(settings, gpu_node("a", "share", 1, 15))
    worker = ("warn", "GC001: PyTorchJob kubeflow/pytorch-simple spec.pytorchReplicaSpecs.Worker.template cannot run "
                      'on any node the cluster has: container "pytorch" asks for aliyun.com/gpu-mem=40, more than the '
                      "largest card of any node that could take it: 15 GiB (GPU0 of node a)" + ACCEPTED,
              "spec.pytorchReplicaSpecs.Worker.template.spec")
    assert gc001(engine, pytorchjob(Master=no_gpu, Worker=forty), state, kind="PyTorchJob") == [worker]
    both = gc001(engine, pytorchjob(Master=forty, Worker=forty), state, kind="PyTorchJob")
    assert [path for _, _, path in both] == ["spec.pytorchReplicaSpecs.Master.template.spec",
                                             "spec.pytorchReplicaSpecs.Worker.template.spec"]
    assert both[1] == worker


COSTLY = ("GC001: {} is too costly to evaluate: whether some node can hold its 1 GPU container(s) under its node "
          "constraints (400 required node affinity terms, 400 requirements in all) took more than "
          "capacity.max_work=1000 units of work; accepted: fewer affinity terms and GPU containers (real pods have a "
          "few of each, and take a few hundred units)")


def test_the_work_cap_is_the_configured_one():
    # 400 affinity terms no node matches, over four nodes: within the default cap, past a cap of 1,000.
    small = Engine(Settings(capacity={"max_work": 1000}))
    state = cluster(small.settings, *(gpu_node(f"n{i}", "share", 1, 15) for i in range(4)))
    assert gc001(small, costly_pod("t", 400), state) == [("warn", COSTLY.format("Pod default/costly-t"), "spec")]
    [(_, message, _)] = gc001(Engine(Settings()), costly_pod("t", 400), state)
    assert message.startswith("GC001: Pod default/costly-t cannot run on any node the cluster has: no node of the "
                              "cluster matches its node selectors or affinity")


def test_a_workload_past_the_cap_is_judged_no_further(settings):
    # The budget is the review's: past it at the Master's template, the Worker's is not judged.
    def costly(name):
        def change(spec):
            spec["affinity"] = costly_pod(name, 400)["spec"]["affinity"]
        return change

    small = Engine(Settings(capacity={"max_work": 1000}))
    state = cluster(small.settings, *(gpu_node(f"n{i}", "share", 1, 15) for i in range(4)))
    assert gc001(small, pytorchjob(Master=costly("m"), Worker=costly("w")), state, kind="PyTorchJob") == [(
        "warn", COSTLY.format("PyTorchJob kubeflow/pytorch-simple spec.pytorchReplicaSpecs.Master.template"),
        "spec.pytorchReplicaSpecs.Master.template.spec")]


@pytest.mark.parametrize("obj", [
    pytest.param(gpu_pod("p", "a", mem=40), id="pinned by spec.nodeName: GB004 judges its node"),
    pytest.param(gpu_pod("p", mem="40Gi"), id="a gpu-mem GS003 refuses is no card demand"),
    pytest.param(gpu_pod("p", mem=None, whole=1), id="whole GPUs only"),
    pytest.param(gpu_pod("p"), id="no GPU"),
])
def test_pods_the_rule_leaves_alone(engine, settings, obj):
    assert gc001(engine, obj, cluster(settings, gpu_node("a", "share", 1, 15))) == []


def test_only_at_create_and_only_with_a_cluster_state(engine, settings):
    state = cluster(settings, gpu_node("a", "share", 1, 15))
    assert gc001(engine, pod(mem=40), state, operation="UPDATE") == []
    assert gc001(engine, pod(mem=40), None) == []


def test_an_unusable_state_admits_and_says_so(engine):
    class Unsynced(ClusterSnapshot):
        def availability(self):
            return Availability(False, "not synced yet")

    [(severity, message, _)] = gc001(engine, pod(mem=40), Unsynced())
    assert severity == "warn"
    assert message == ("GC001: Pod default/p: whether any node can hold it because the cluster state is not usable "
                       "(not synced yet); admitted without the check (state.when_unavailable.capacity: open)")


def test_the_catalogue_lists_gc001_as_needing_the_cluster_state():
    [entry] = [e.as_dict() for e in rule_entries(Settings()) if e.id == "GC001"]
    assert {key: entry[key] for key in ("category", "severity", "enabled", "title", "stateful")} == {
        "category": "rule", "severity": "warn", "enabled": True, "title": "Some node of the cluster can hold the pod",
        "stateful": True}
    kubernetes = sorted(["Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob",
                         "ReplicationController", "PodTemplate"])
    assert entry["kinds"][:len(kubernetes)] == kubernetes
    assert {"PyTorchJob.kubeflow.org", "RayCluster.ray.io", "Job.batch.volcano.sh"} <= set(entry["kinds"])


def test_the_scoring_engine_imports_first_without_a_cycle():
    # scoring reads the rule registry, whose package imports GC001, which ranks with scoring:
    # GC001 must import it only when first used. Imported afresh here, then the loaded modules are put back.
    saved = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "policies"}
    try:
        for name in saved:
            del sys.modules[name]
        assert importlib.import_module("policies.scoring.scoring").Scorer is not None
    finally:
        for name in [name for name in sys.modules if name.split(".")[0] == "policies"]:
            del sys.modules[name]
        sys.modules.update(saved)
