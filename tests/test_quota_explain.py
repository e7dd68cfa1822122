"""`gpushare explain` and /explain say when a Pending pod waits on its ElasticQuotaTree rather than on nodes."""

from __future__ import annotations

import json

from .check_helpers import run_gpushare
from .helpers import DATA, gpushare_server

CLUSTER = DATA / "quota" / "cluster.yaml"
HELD = ('ElasticQuotaTree kube-system/elasticquotatree quota node team-b has max["aliyun.com/gpu-mem"] 40 GiB, '
        "30 used, 10 left; the pod needs 16 GiB: it waits until the quota node's usage falls below its max")


def test_a_pod_held_by_its_quota_node_is_said_to_wait_on_it():
    done = run_gpushare("explain", "team-b/queued", "--snapshot", CLUSTER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (f'Pod team-b/queued ("main" 16 GiB) waits on its quota: {HELD}; '
                                           "1 node(s) could take it now")


def test_a_pod_its_quota_node_has_room_for_is_not():
    done = run_gpushare("explain", "team-b/waiting", "--snapshot", CLUSTER, "-o", "json")
    explanation = json.loads(done.stdout)
    assert explanation["quota"] == []
    assert explanation["summary"].endswith("it is waiting for its scheduler, not for room")


def test_the_explain_endpoint_says_it_too(tmp_path):
    with gpushare_server(tmp_path, "--snapshot", str(CLUSTER)) as server, server.session() as session:
        reply = session.get(server.url + "/explain", params={"namespace": "team-b", "name": "queued"}, timeout=10)
        assert reply.status_code == 200, reply.text
        assert reply.json()["quota"] == [HELD]
