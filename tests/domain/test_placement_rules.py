"""GB001-GB005 on pods/binding CREATE and on Pods created with spec.nodeName; the assume-cache."""

from __future__ import annotations

import threading

import pytest

from policies.admission.engine import Engine
from policies.model.cluster import Availability
from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.placement.assume import PlacementLedger
from tests.support.cluster_objects import binding, gpu_pod, node, plain_pod, relabel, state_of
from webhook.settings import Settings

NODE = "cn-beijing.192.168.1.10"


def bind(engine, state, pod_name, node_name=NODE):
    obj = binding(pod_name, node_name)
    return engine.validate(engine.subject("Binding", obj, namespace="default", state=state))


def rules(verdict):
    return sorted({f.rule for f in verdict.findings})


def test_gb001_mixing_on_one_node_is_denied_naming_pods(engine, settings):
    state = state_of(settings, [node(mode="core_mem")],
                     [gpu_pod("mem-a", mem=2, node_name=NODE), gpu_pod("mem-b", mem=2, node_name=NODE),
                      gpu_pod("core-x", mem=2, core=30)])
    verdict = bind(engine, state, "core-x")
    assert rules(verdict) == ["GB001"]
    message = verdict.violations[0].message
    assert message.startswith('GB001: Binding default/core-x (container "cuda" aliyun.com/gpu-mem=2 '
                              'aliyun.com/gpu-core.percentage=30): node '
                              'cn-beijing.192.168.1.10 already runs mem-only pods (default/mem-a, default/mem-b)')
    assert message.endswith("bind it to a node that runs only pods of its own type, or none")
    assert verdict.violations[0].path_text == "target.name"


def test_gb002_core_mem_pod_needs_a_core_mem_node(engine, settings):
    state = state_of(settings, [node(mode="cgpu")], [gpu_pod("core-x", mem=2, core=30)])
    verdict = bind(engine, state, "core-x")
    assert rules(verdict) == ["GB002"]
    assert "core+mem pods need core_mem" in verdict.violations[0].message


def test_gb002_shared_pod_on_exclusive_node_and_exclusive_pod_on_topology_node(engine, settings):
    whole = gpu_pod("whole", mem=None, extra_limits={"nvidia.com/gpu": "1"})
    state = state_of(settings, [node(mode="default"), node("topo-1", mode="topology")], [gpu_pod("mem-a"), whole])
    message = bind(engine, state, "mem-a").violations[0].message
    assert "has ack.node.gpu.schedule=default; shared-GPU pods need one of cgpu, core_mem, mps, share" in message
    verdict = bind(engine, state, "whole", "topo-1")
    assert rules(verdict) == ["GB002"] and "takes only topology workloads" in verdict.violations[0].message


def test_gb003_twenty_pods_per_card_on_cgpu(engine, settings):
    pods = [gpu_pod(f"small-{i}", mem=1, node_name=NODE, card=0) for i in range(20)]
    state = state_of(settings, [node(mode="cgpu", cards=1, card_gib=80)], [*pods, gpu_pod("one-more", mem=1)])
    verdict = bind(engine, state, "one-more")
    assert rules(verdict) == ["GB003"]
    assert "already runs 20 pods, the cGPU limit is 20" in verdict.violations[0].message
    # share mode has no such limit
    share = state_of(settings, [node(mode="share", cards=1, card_gib=80)], [*pods, gpu_pod("one-more", mem=1)])
    assert bind(engine, share, "one-more").allowed


def test_gb004_memory_must_fit_one_card(engine, settings):
    state = state_of(settings, [node(mode="cgpu", cards=4, card_gib=15)], [gpu_pod("big", mem=16)])
    verdict = bind(engine, state, "big")
    assert rules(verdict) == ["GB004"]
    assert "GPU0 has 15/15 GiB free, needs 16" in verdict.violations[0].message
    assert 'card that fits container "cuda" aliyun.com/gpu-mem=16' in verdict.violations[0].message


def test_gb005_static_cpu_node(engine, settings):
    static = relabel(node(mode="cgpu"), **{"gpushare.io__cpu-manager-policy": "static"})
    state = state_of(settings, [static], [gpu_pod("mem-a")])
    assert rules(bind(engine, state, "mem-a")) == ["GB005"]


def test_pod_created_with_node_name_is_placed_from_its_own_spec(engine, settings):
    state = state_of(settings, [node(mode="core_mem")], [gpu_pod("mem-a", node_name=NODE)])
    pod = gpu_pod("core-direct", mem=2, core=20, node_name=NODE)
    verdict = engine.validate(engine.subject("Pod", pod, namespace="default", state=state))
    assert rules(verdict) == ["GB001"] and verdict.violations[0].path_text == "spec.nodeName"
    assert verdict.violations[0].message.startswith("GB001: Pod default/core-direct")


def test_non_gpu_pods_and_unknown_pods(engine, settings):
    state = state_of(settings, [node(mode="cgpu")], [plain_pod("web")])
    assert bind(engine, state, "web").findings == []  # known, no GPU: nothing to check
    verdict = bind(engine, state, "ghost")
    assert verdict.allowed and len(verdict.findings) == 1
    assert verdict.warnings[0].message == (
        "GB001, GB002, GB003, GB004, GB005: Binding default/ghost to node cn-beijing.192.168.1.10: GPU placement not "
        "checked because the cluster state is not usable (pod default/ghost is not in the cluster state yet); "
        "admitted without the check (state.when_unavailable.placement: open)")
    closed = Engine(Settings(state={"when_unavailable": {"placement": "closed"}}))
    assert not bind(closed, state, "ghost").allowed


def test_placement_fails_open_by_default_when_the_state_is_stale(engine, settings):
    class Stale(ClusterSnapshot):
        def availability(self):
            return Availability(False, "API server unreachable for 45s (stale after 30s)")

    verdict = bind(engine, Stale(), "mem-a")
    assert verdict.allowed and {f.severity for f in verdict.findings} == {"warn"}
    assert "API server unreachable for 45s" in verdict.findings[0].message


def test_a_pod_without_gpus_is_bound_unchecked_even_when_the_state_is_stale(engine, settings):
    # the stale state still knows the pod and that it asks for no GPU: there is nothing to place
    class Stale(ClusterSnapshot):
        def availability(self):
            return Availability(False, "API server unreachable for 45s (stale after 30s)")

    stale = Stale()
    stale.upsert_node(node_from_manifest(node(mode="cgpu"), settings.names))
    stale.record_pod(pod_from_manifest(plain_pod("web"), settings.names))
    assert bind(engine, stale, "web").findings == []
    [unchecked] = bind(engine, stale, "ghost").findings  # a pod the state does not know: not checked, and said so
    assert unchecked.message.startswith("GB001, GB002, GB003, GB004, GB005: Binding default/ghost to node "
                                        "cn-beijing.192.168.1.10: GPU placement not checked because the cluster "
                                        "state is not usable (API server unreachable for 45s (stale after 30s))")


def test_without_any_state_placement_rules_are_skipped(engine):
    assert engine.validate(engine.subject("Binding", binding("p", NODE), namespace="default")).findings == []


def test_ledger_counts_admitted_bindings_until_the_watch_shows_them(engine, settings):
    now = [0.0]
    ledger = PlacementLedger(assume_ttl=60, clock=lambda: now[0])
    base = state_of(settings, [node(mode="core_mem")], [gpu_pod("mem-a"), gpu_pod("core-x", core=30)])
    view = ledger.view(base)

    def admit(name, dry_run=False):
        subject = engine.subject("Binding", binding(name, NODE), namespace="default", state=view)
        return engine.validate(subject) if dry_run else engine.admit(subject, ledger)

    assert admit("mem-a").allowed
    assert rules(admit("core-x", dry_run=True)) == ["GB001"]  # the dry run sees the assumption...
    assert admit("mem-a", dry_run=True).allowed
    assert ledger.counts()[0] == 1
    # ...and the watch showing mem-a on the node replaces the assumption
    base.record_pod(pod_from_manifest(gpu_pod("mem-a", node_name=NODE), settings.names))
    assert rules(admit("core-x")) == ["GB001"]
    assert ledger.counts()[0] == 0
    # the watch shows mem-a finished: the node takes core+mem pods again
    base.record_pod(pod_from_manifest(gpu_pod("mem-a", node_name=NODE, phase="Succeeded"), settings.names))
    assert admit("core-x").allowed


def test_ledger_assumptions_expire(engine, settings):
    now = [0.0]
    ledger = PlacementLedger(assume_ttl=5, clock=lambda: now[0])
    base = state_of(settings, [node(mode="core_mem")], [gpu_pod("mem-a"), gpu_pod("core-x", core=30)])
    view = ledger.view(base)
    assert engine.admit(engine.subject("Binding", binding("mem-a", NODE), namespace="default", state=view),
                        ledger).allowed
    assert not engine.validate(engine.subject("Binding", binding("core-x", NODE), namespace="default",
                                              state=view)).allowed
    now[0] = 5.0
    assert engine.validate(engine.subject("Binding", binding("core-x", NODE), namespace="default",
                                          state=view)).allowed


def test_binding_finds_a_pod_admitted_a_moment_ago(engine, settings):
    ledger = PlacementLedger()
    base = state_of(settings, [node(mode="core_mem")], [gpu_pod("mem-a", node_name=NODE)])
    view = ledger.view(base)
    fresh = gpu_pod("core-new", core=25)
    assert engine.admit(engine.subject("Pod", fresh, namespace="default", state=view), ledger).allowed
    verdict = engine.admit(engine.subject("Binding", binding("core-new", NODE), namespace="default", state=view),
                           ledger)
    assert rules(verdict) == ["GB001"]


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_bindings_never_admit_both_types(engine, settings, round_):
    pods = [gpu_pod(f"p{i}", core=(5 if i % 2 else None)) for i in range(50)]
    ledger = PlacementLedger()
    view = ledger.view(state_of(settings, [node(mode="core_mem", cards=8, card_gib=80)], pods))
    admitted: list[str] = []
    barrier = threading.Barrier(50)

    def one(i):
        subject = engine.subject("Binding", binding(f"p{i}", NODE), namespace="default", state=view)
        barrier.wait()
        if engine.admit(subject, ledger).allowed:
            admitted.append("core" if i % 2 else "mem")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(admitted)) == 1 and len(admitted) == 25


def test_only_the_node_mode_and_the_cpu_policy_are_beyond_eviction():
    # GB002 and GB005 hold whatever runs on the node; GB001, GB003 and GB004 can clear when pods go
    from policies.placement.placement import UNRESOLVABLE_RULES
    from policies.rules.rule_index import rule_ids

    assert {"GB002", "GB005"} == UNRESOLVABLE_RULES and rule_ids("placement") >= UNRESOLVABLE_RULES


def _gc001(engine, state, pod):
    verdict = engine.validate(engine.subject("Pod", pod, namespace="default", state=state, operation="CREATE"))
    return [f.message for f in verdict.findings if f.rule == "GC001"]


def test_gc001_verdicts_follow_the_cluster_and_are_shared_by_pods_asking_alike(engine, settings):
    # Pods of one workload ask the same thing; the verdict must still follow every change of the
    # nodes and the pods on them, whichever pod asks.
    state = state_of(settings, [node(card_gib=15)], [])
    first = gpu_pod("big-1", mem=20)
    (never,) = _gc001(engine, state, first)
    assert "cannot run on any node the cluster has" in never and "15 GiB" in never
    (again,) = _gc001(engine, state, gpu_pod("big-2", mem=20))
    assert again == never.replace("Pod default/big-1", "Pod default/big-2")
    state.upsert_node(node_from_manifest(node("cn-beijing.192.168.1.11", cards=1, card_gib=31,
                                              provider_id="cn-beijing.i-2ze0demo2"), settings.names))
    assert _gc001(engine, state, gpu_pod("big-3", mem=20)) == []
    # The 31 GiB card fills up: the same demand now fits no card right now.
    state.record_pod(pod_from_manifest(gpu_pod("holder", mem=20, node_name="cn-beijing.192.168.1.11", card=0),
                                       settings.names))
    (not_now,) = _gc001(engine, state, gpu_pod("big-4", mem=20))
    assert "fits no card of the nodes that could take it right now" in not_now
    state.remove_pod("default", "holder")
    assert _gc001(engine, state, gpu_pod("big-5", mem=20)) == []
