"""The live state reads the GPU quotas (list + watch against the fake API server) and GQ005 follows them as
they change; a cluster without the ElasticQuotaTree or Kueue CRDs keeps its ResourceQuotas and its usable state."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from policies.admission.engine import Engine
from tests.support.fake_apiserver import FakeApiServer, running
from tests.support.helpers import DATA, wait_until
from tests.support.quota_crds import QUOTA_CRDS
from webhook.settings import Settings
from webhook.state.live import LiveClusterState, core_api

FAST = {"list_page_size": 2, "backoff_initial_seconds": 0.02, "backoff_max_seconds": 0.2,
        "stale_after_seconds": 5}
SETTINGS = Settings(state=FAST)
ENGINE = Engine(SETTINGS)
CLUSTER = yaml.safe_load((DATA / "quota" / "cluster.yaml").read_text())["items"]
DEPLOYMENT, JOB, PYTORCHJOB, KUEUE_JOB = [d for d in yaml.safe_load_all((DATA / "quota" / "workloads.yaml").read_text())
                                          if d]


def _object(kind: str, name: str) -> dict:
    return copy.deepcopy(next(o for o in CLUSTER if o["kind"] == kind and o["metadata"]["name"] == name))


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with running() as server:
        yield server


def live_for(api: FakeApiServer, tmp_path: Path) -> LiveClusterState:
    client, _ = core_api(api.kubeconfig(tmp_path / "kubeconfig"))
    state = LiveClusterState(client, SETTINGS.names, SETTINGS.state, quotas=True)
    state.start()
    return state


def quota_warnings(state: LiveClusterState, obj: dict) -> list[str]:
    verdict = ENGINE.validate(ENGINE.subject(obj["kind"], obj, state=state))
    return [f.message for f in verdict.findings if f.rule == "GQ005"]


def test_the_quotas_are_listed_and_followed_as_they_change(api, tmp_path):
    api.install_crd(*QUOTA_CRDS)
    api.add(*CLUSTER)
    state = live_for(api, tmp_path)
    try:
        wait_until(lambda: state.synced() and all(r.synced.is_set() for r in state.quota_reflectors), timeout=20,
                   what="nodes, pods and the quotas to be listed")
        kinds = sorted(kind for kind, _ in state.quota_objects())
        assert kinds == ["ClusterQueue", "ClusterQueue", "ElasticQuotaTree", "LocalQueue", "LocalQueue",
                         "ResourceQuota"]
        [warning] = quota_warnings(state, DEPLOYMENT)
        assert "16 left" in warning and "2 of 4 pods will not be created" in warning
        assert "2 of 3 pods will wait" in quota_warnings(state, PYTORCHJOB)[0]
        assert "2 of 2 pods will wait" in quota_warnings(state, KUEUE_JOB)[0]

        # The quota is raised: the Deployment fits.
        raised = _object("ResourceQuota", "gpu")
        raised["spec"]["hard"]["requests.aliyun.com/gpu-mem"] = "80"
        api.update(raised)
        wait_until(lambda: quota_warnings(state, DEPLOYMENT) == [], timeout=10, what="the raised quota to be seen")
        # A pod finishes: the tree's team-b node has room for the PyTorchJob.
        finished = _object("Pod", "bert-0")
        finished["status"]["phase"] = "Succeeded"
        api.update(finished)
        wait_until(lambda: quota_warnings(state, PYTORCHJOB) == [], timeout=10, what="the finished pod to free quota")
        # The ClusterQueue goes away: nothing is said about Kueue.
        api.delete(_object("ClusterQueue", "research"))
        wait_until(lambda: quota_warnings(state, KUEUE_JOB) == [], timeout=10, what="the deleted ClusterQueue")
        # A new quota is created: the Job is warned again.
        api.add({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "tight", "namespace": "team-a"},
                 "spec": {"hard": {"requests.aliyun.com/gpu-mem": "30"}}})
        wait_until(lambda: len(quota_warnings(state, JOB)) == 1, timeout=10, what="the new quota")
        assert "ResourceQuota team-a/tight" in quota_warnings(state, JOB)[0]
    finally:
        state.stop()


def test_without_the_quota_crds_resource_quotas_still_count_and_the_state_stays_usable(api, tmp_path):
    api.add(*[o for o in CLUSTER if o["kind"] in ("Node", "Pod", "ResourceQuota")])
    state = live_for(api, tmp_path)
    try:
        wait_until(lambda: state.synced() and state.quota_reflectors[0].synced.is_set(), timeout=20,
                   what="nodes, pods and ResourceQuotas to be listed")
        assert state.availability().usable
        assert [kind for kind, _ in state.quota_objects()] == ["ResourceQuota"]
        assert not any(r.synced.is_set() for r in state.quota_reflectors[1:])  # 404: not installed
        assert "2 of 4 pods will not be created" in quota_warnings(state, DEPLOYMENT)[0]
        assert quota_warnings(state, PYTORCHJOB) == []
    finally:
        state.stop()
