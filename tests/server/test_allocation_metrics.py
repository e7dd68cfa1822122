"""GPU allocation series: what they say, how many there are, and that a scrape only copies a cache
the state's change log keeps current."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from policies.placement.allocation import cluster_usage
from webhook.http.allocation_metrics import AllocationExporter
from webhook.routes.app import create_app
from webhook.serving import build_services
from webhook.settings import MetricsSettings, Settings
from webhook.state.snapshot import load_demo_snapshot


def samples(text: bytes) -> dict[tuple[str, frozenset], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text.decode()) for s in family.samples}


def exporter(state, per_card: str = "none") -> AllocationExporter:
    names = Settings().names
    found = AllocationExporter(state, names, MetricsSettings(per_card=per_card))
    assert found.refresh()
    return found


def test_series_agree_with_inspect_per_node_and_in_the_cluster():
    state = load_demo_snapshot(Settings().names)
    usage = cluster_usage(state, Settings().names)
    found = samples(exporter(state).exposition())
    for node in usage.nodes:
        at = frozenset({("node", node.name)})
        assert found[("gpushare_node_gpu_memory_assigned_gib", at)] == node.used_mem
        assert found[("gpushare_node_gpu_memory_total_gib", at)] == node.total_mem
        assert found[("gpushare_node_gpu_cards", at)] == len(node.cards)
        assert found[("gpushare_node_gpu_pods", at)] == len(node.pods)
        mode = frozenset({("node", node.name), ("mode", node.mode), ("placement", node.placement)})
        assert found[("gpushare_node_gpu_mode", mode)] == 1
    assert found[("gpushare_cluster_gpu_memory_assigned_gib", frozenset())] == usage.used_mem == 5
    assert found[("gpushare_cluster_gpu_memory_total_gib", frozenset())] == usage.total_mem == 137
    # Compute is assigned per card only on core_mem nodes (the demo's cn-beijing node).
    core = {labels: v for (name, labels), v in found.items() if name == "gpushare_node_gpu_core_assigned_percent"}
    assert core == {frozenset({("node", "cn-beijing.192.168.1.10")}): 30}
    assert not any(name.startswith("gpushare_gpu_") and name != "gpushare_gpu_allocation_series"
                   and not name.startswith("gpushare_gpu_allocation_") for name, _ in found)


def test_per_card_series_only_on_request_and_the_count_is_what_docs_say():
    state = load_demo_snapshot(Settings().names)
    per_node = exporter(state)
    every = exporter(state, "all")
    in_use = exporter(state, "in_use")
    nodes, cards = 3, 7  # the demo: 4 + 2 + 1 cards on three nodes sharing GPU memory; one core_mem node
    # per node: mode, cards, assigned, total, pods, over-committed (+ core on core_mem) + 2 cluster series
    assert per_node.series == nodes * 6 + 1 + 2
    # per card: assigned, total, pods (+ core on core_mem cards: 4 on cn-beijing)
    assert every.series == per_node.series + cards * 3 + 4
    assert in_use.series == per_node.series + 2 * 3 + 1  # two cards hold a pod, one of them core_mem
    found = samples(every.exposition())
    t4 = frozenset({("node", "cn-zhangjiakou.192.168.66.139"), ("card", "0"), ("model", "Tesla-T4"),
                    ("mode", "share")})
    assert found[("gpushare_gpu_memory_assigned_gib", t4)] == 3
    assert found[("gpushare_gpu_memory_total_gib", t4)] == 15 and found[("gpushare_gpu_pods", t4)] == 1
    assert found[("gpushare_gpu_allocation_series", frozenset())] == every.series


def node(name: str, cards: int, mem: int, mode: str = "cgpu") -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {"ack.node.gpu.schedule": mode}},
            "status": {"allocatable": {"aliyun.com/gpu-count": str(cards), "aliyun.com/gpu-mem": str(mem)}}}


def pod(name: str, on: str, gib: int, card: int) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "annotations": {
        "scheduler.framework.gpushare.allocation": f'{{"0":{{"{card}":{gib}}}}}'}},
        "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"limits": {"aliyun.com/gpu-mem": gib}}}]},
        "status": {"phase": "Running"}}


def test_a_scrape_copies_the_cache_and_a_refresh_recomputes_only_what_changed():
    from policies.model.cluster_snapshot import ClusterSnapshot

    names = Settings().names
    state = ClusterSnapshot()
    for i in range(3):
        state.upsert_node(node_from_manifest(node(f"n{i}", 2, 30), names))
    found = exporter(state)
    before = found.exposition()
    state.upsert_pod(pod_from_manifest(pod("p", "n1", 20, 0), names))
    state.upsert_pod(pod_from_manifest(pod("q", "n1", 20, 0), names))  # 40 GiB on a 15 GiB card
    # The state changed, but a scrape renders nothing: it copies what the last refresh rendered.
    assert found.exposition().split(b"# HELP gpushare_gpu_allocation_series")[0] == \
        before.split(b"# HELP gpushare_gpu_allocation_series")[0]
    assert state.changes_since(0) is not None
    assert found.refresh() and not found.refresh()  # nothing new the second time
    after = samples(found.exposition())
    n1 = frozenset({("node", "n1")})
    assert after[("gpushare_node_gpu_memory_assigned_gib", n1)] == 40
    assert after[("gpushare_node_gpu_overcommitted_cards", n1)] == 1
    assert after[("gpushare_node_gpu_overcommitted_cards", frozenset({("node", "n0")}))] == 0
    state.remove_node("n2")
    assert found.refresh()
    assert ("gpushare_node_gpu_cards", frozenset({("node", "n2")})) not in samples(found.exposition())


def test_a_replica_that_does_not_export_shows_no_allocation_series():
    off = build_services(Settings(metrics={"export_allocation": False}), None)
    assert off.allocation is None
    text = create_app(off).test_client().get("/metrics").data
    assert b"gpushare_node_gpu_memory_total_gib" not in text and b"gpushare_cluster_gpu_memory" not in text
    on = build_services(Settings(), None)
    assert on.allocation is not None and on.allocation.refresh()
    text = create_app(on).test_client().get("/metrics").data
    assert samples(text)[("gpushare_cluster_gpu_memory_total_gib", frozenset())] == 137
