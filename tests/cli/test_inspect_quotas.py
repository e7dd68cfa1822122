"""`gpushare inspect --quotas`: each GPU quota with the namespaces it covers and its used / quota / left, from
a snapshot and from a live cluster (the fake API server, with and without the quota CRDs installed)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.support.fake_apiserver import running
from tests.support.helpers import DATA, gpushare_executable
from tests.support.quota_crds import QUOTA_CRDS

pytestmark = pytest.mark.processes

CLUSTER = DATA / "quota" / "cluster.yaml"
TABLE = """\
NAMESPACES        QUOTA                                                            LIMIT                               USED  QUOTA  LEFT  UNIT
team-c            ClusterQueue research                                            nominalQuota["aliyun.com/gpu-mem"]  60    64     4     GiB
team-b,team-free  ElasticQuotaTree kube-system/elasticquotatree quota node root    max["aliyun.com/gpu-mem"]           30    640    610   GiB
team-b            ElasticQuotaTree kube-system/elasticquotatree quota node team-b  max["aliyun.com/gpu-mem"]           30    40     10    GiB
team-a            ResourceQuota team-a/gpu                                         requests.aliyun.com/gpu-mem         24    40     16    GiB
"""  # noqa: E501  (the table as printed)


def inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([gpushare_executable(), "inspect", "--quotas", *args], capture_output=True, text=True,
                          timeout=60)


def test_the_table_from_a_snapshot():
    done = inspect("--snapshot", str(CLUSTER))
    assert done.returncode == 0, done.stderr
    assert done.stdout == TABLE


def test_json_names_each_quota_and_what_it_covers():
    done = inspect("--snapshot", str(CLUSTER), "-o", "json")
    quotas = json.loads(done.stdout)["quotas"]
    assert quotas[-1] == {"namespaces": ["team-a"], "quota": "ResourceQuota team-a/gpu", "mechanism": "ResourceQuota",
                          "limit": "requests.aliyun.com/gpu-mem", "resource": "aliyun.com/gpu-mem", "used": 24,
                          "hard": 40, "left": 16, "unit": "GiB"}
    assert [q["left"] for q in quotas] == [4, 610, 10, 16]


def test_a_cluster_without_gpu_quota_says_so():
    done = inspect("--demo")
    assert (done.returncode, done.stdout) == (0, "No GPU quota (no ResourceQuota, ElasticQuotaTree or ClusterQueue "
                                                 "limits GPU memory or compute).\n")


def _objects():
    return yaml.safe_load(CLUSTER.read_text())["items"]


def test_a_live_cluster_shows_what_the_snapshot_shows(tmp_path):
    with running() as api:
        api.install_crd(*QUOTA_CRDS)
        api.add(*_objects())
        done = inspect("--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")))
        assert done.returncode == 0, done.stderr
        assert done.stdout == TABLE


def test_a_live_cluster_without_the_quota_crds_shows_its_resource_quotas(tmp_path):
    with running() as api:
        api.add(*[o for o in _objects() if o["kind"] in ("Node", "Pod", "ResourceQuota")])
        done = inspect("--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")))
        assert done.returncode == 0, done.stderr
        assert [" ".join(line.split()) for line in done.stdout.splitlines()[1:]] == [
            "team-a ResourceQuota team-a/gpu requests.aliyun.com/gpu-mem 24 40 16 GiB"]
