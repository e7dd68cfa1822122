"""The GPU quota series on /metrics: per namespace and quota limit, what inspect --quotas shows, bounded by
metrics.max_quota_series, and following the quotas as they change; served by the real server."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from policies.model.settings import Names
from tests.support.helpers import DATA, gpushare_server, wait_until
from webhook.http.allocation_metrics import AllocationExporter
from webhook.settings import MetricsSettings
from webhook.state.snapshot import load_snapshot, snapshot_from_objects

CLUSTER = DATA / "quota" / "cluster.yaml"
NAMES = Names()
SAMPLE = re.compile(r'^(gpushare_(?:namespace_gpu_quota_\w+|gpu_quota_series_dropped))(\{[^}]*\})? (\S+)$')


def series(text: str) -> dict[tuple[str, str, str], float]:
    """(family, namespace, quota) -> value."""
    found = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match[2] or ""))
        found[(match[1], labels.get("namespace", ""), labels.get("quota", ""))] = float(match[3])
    return found


def exported(state, **settings) -> dict[tuple[str, str, str], float]:
    exporter = AllocationExporter(state, NAMES, MetricsSettings(**settings))
    exporter.refresh()
    return series(exporter.exposition().decode())


def test_each_namespace_s_quota_is_exported_as_inspect_shows_it():
    found = exported(load_snapshot(CLUSTER, NAMES))
    team_a = ("team-a", "ResourceQuota team-a/gpu")
    assert [found[(f"gpushare_namespace_gpu_quota_{f}", *team_a)] for f in ("used", "hard", "left")] == [24, 40, 16]
    node = "ElasticQuotaTree kube-system/elasticquotatree quota node"
    assert found[("gpushare_namespace_gpu_quota_left", "team-b", f"{node} team-b")] == 10
    assert found[("gpushare_namespace_gpu_quota_used", "team-free", f"{node} root")] == 30
    assert found[("gpushare_namespace_gpu_quota_left", "team-c", "ClusterQueue research")] == 4
    assert found[("gpushare_gpu_quota_series_dropped", "", "")] == 0
    assert len([k for k in found if k[0] == "gpushare_namespace_gpu_quota_used"]) == 5


def test_the_series_are_bounded():
    found = exported(load_snapshot(CLUSTER, NAMES), max_quota_series=2)
    assert len([k for k in found if k[0] == "gpushare_namespace_gpu_quota_used"]) == 2
    assert found[("gpushare_gpu_quota_series_dropped", "", "")] == 3


def test_a_quota_change_is_exported_at_the_next_refresh():
    items = yaml.safe_load(CLUSTER.read_text())["items"]
    state = snapshot_from_objects(items, NAMES)
    exporter = AllocationExporter(state, NAMES, MetricsSettings())
    exporter.refresh()
    quota = copy.deepcopy(next(o for o in items if o["kind"] == "ResourceQuota"))
    quota["spec"]["hard"]["requests.aliyun.com/gpu-mem"] = "100"
    state.upsert_quota("ResourceQuota", quota)
    assert exporter.refresh() is True
    found = series(exporter.exposition().decode())
    assert found[("gpushare_namespace_gpu_quota_left", "team-a", "ResourceQuota team-a/gpu")] == 76


def test_a_cluster_without_quota_exports_no_quota_series():
    demo = AllocationExporter(snapshot_from_objects([], NAMES), NAMES, MetricsSettings())
    demo.refresh()
    assert b"gpushare_namespace_gpu_quota" not in demo.exposition()


@pytest.mark.processes
def test_the_server_serves_them(tmp_path):
    with gpushare_server(tmp_path, "--snapshot", str(CLUSTER)) as server, server.session() as session:
        def scraped() -> dict:
            return series(session.get(server.url + "/metrics", timeout=10).text)

        wait_until(lambda: ("gpushare_namespace_gpu_quota_left", "team-a", "ResourceQuota team-a/gpu") in scraped(),
                   timeout=20, what="the quota series on /metrics")
        assert scraped()[("gpushare_namespace_gpu_quota_left", "team-a", "ResourceQuota team-a/gpu")] == 16
