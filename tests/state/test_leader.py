"""Leader election among replicas, over the real `gpushare serve --kubeconfig` and the fake API
server's Leases (create, replace with resourceVersion, 409 conflicts) and pod labels: exactly one
replica leads and is the one the bindings Service selects; SIGKILL hands leadership and routing
over; a follower answers bindings with the placement fail mode; concurrent bindings sent to the
leader never mix job types on a node. Timings are shortened through the settings."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import UTC, datetime

import pytest

from policies.placement.leadership import NOT_LEADER
from tests.support.cluster_objects import binding, gpu_pod, node
from tests.support.fake_apiserver import FakeApiServer
from tests.support.fake_apiserver_writes import WritableApiServer
from tests.support.helpers import admission_review, gpushare_server, wait_until
from tests.support.processes import children
from webhook.settings import ConfigFileError, LeaderSettings, load_settings
from webhook.state.kube_client import api_client
from webhook.state.leader import elector

pytestmark = pytest.mark.processes

NS = "gpushare-system"
NODE = "cn-beijing.192.168.1.10"
LABEL = "gpushare.io/binding-leader"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/gpushare-webhook-bindings"
BIND = {"kind": "Binding", "resource": "pods", "sub_resource": "binding"}
FAST = {"GPUSHARE_LEADER__NAMESPACE": NS, "GPUSHARE_LEADER__LEASE_DURATION_SECONDS": "2",
        "GPUSHARE_LEADER__RENEW_DEADLINE_SECONDS": "1.5", "GPUSHARE_LEADER__RETRY_PERIOD_SECONDS": "0.25",
        "GPUSHARE_AUDIT__INTERVAL_SECONDS": "0"}


def replica_pod(name: str, labels: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": {
        "app.kubernetes.io/name": "gpushare-webhook", **(labels or {})}}, "spec": {"containers": [{"name": "w"}]}}


def review_binding(pod: str, **kwargs) -> dict:
    return admission_review(binding(pod, NODE), **BIND, **kwargs)


def labelled(api: FakeApiServer) -> list[str]:
    """The pods the bindings Service selects."""
    return sorted(name for name in ("replica-a", "replica-b")
                  if ((api.get(f"/api/v1/namespaces/{NS}/pods/{name}") or {}).get("metadata", {}).get("labels")
                      or {}).get(LABEL) == "true")


def holder(api: FakeApiServer) -> str:
    return ((api.get(LEASE) or {}).get("spec") or {}).get("holderIdentity") or ""


def kill(server) -> None:
    """SIGKILL the whole replica (gunicorn's master and its worker), as a container's death does."""
    for pid in [*children(server.process.pid), server.process.pid]:
        os.kill(pid, signal.SIGKILL)
    server.process.wait(timeout=10)


def metrics_text(server) -> str:
    return server.session().get(server.url + "/metrics", timeout=5).text


def leader_gauge(server) -> str:
    return next(line.split()[-1] for line in metrics_text(server).splitlines()
                if line.startswith("gpushare_binding_leader "))


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.stop()


def start_replicas(api: FakeApiServer, tmp_path, stack: ExitStack, env: dict[str, str] | None = None) -> dict:
    kubeconfig = str(api.kubeconfig(tmp_path / "kc"))
    servers = {}
    for name in ("replica-a", "replica-b"):
        workdir = tmp_path / name
        workdir.mkdir()
        servers[name] = stack.enter_context(gpushare_server(
            workdir, "--kubeconfig", kubeconfig, ready_path="/readyz",
            env={**FAST, "GPUSHARE_LEADER__POD_NAME": name, **(env or {})}))
    return servers


def test_one_replica_leads_a_follower_fails_open_and_sigkill_hands_over(api, tmp_path):
    api.add(replica_pod("replica-a"), replica_pod("replica-b"), node(mode="core_mem"),
            gpu_pod("mem-a", node_name=NODE), gpu_pod("core-x", core=30))
    with ExitStack() as stack:
        servers = start_replicas(api, tmp_path, stack)
        first = wait_until(lambda: len(labelled(api)) == 1 and labelled(api)[0], timeout=20,
                           what="one replica to lead and be labelled")
        follower = next(name for name in servers if name != first)
        assert holder(api).startswith(first + "_")
        assert leader_gauge(servers[first]) == "1.0" and leader_gauge(servers[follower]) == "0.0"
        # The GPU allocation series come from the leader alone, so sums over replicas never double.
        assert "gpushare_node_gpu_mode{" in metrics_text(servers[first])
        assert "gpushare_node_gpu_mode" not in metrics_text(servers[follower])
        # The leader judges: core-x would mix job types with mem-a.
        judged = servers[first].post_json("/validate", review_binding("core-x", dry_run=True)).json()["response"]
        assert judged["allowed"] is False and judged["status"]["message"].startswith("GB001: Binding default/core-x")
        # The follower answers as state.when_unavailable.placement says (open), and says why.
        # The warning fits the API server's 256 characters; the audit annotation names the leader.
        unjudged = wait_until(lambda: (r := servers[follower].post_json("/validate", review_binding("core-x")).json()[
            "response"]) and first in r["auditAnnotations"].get("warning.GB001", "") and r, timeout=20,
            what="the follower to read the lease")
        assert unjudged["allowed"] is True
        assert NOT_LEADER in unjudged["warnings"][0] and len(unjudged["warnings"][0]) <= 256
        assert "state.when_unavailable.placement: open" in unjudged["warnings"][0]
        # A binding of a pod without GPUs is nothing to judge, on any replica: no warning.
        api.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": "default"},
                 "spec": {"containers": [{"name": "c"}]}})
        plain = wait_until(lambda: (r := servers[follower].post_json(
            "/validate", review_binding("plain")).json()["response"]) and "warnings" not in r and r,
            timeout=20, what="the plain pod to reach the follower's state")
        assert plain["allowed"] is True

        kill(servers[first])
        wait_until(lambda: labelled(api) == [follower] and holder(api).startswith(follower + "_"), timeout=15,
                   what="the follower to take the lease and the route")
        assert leader_gauge(servers[follower]) == "1.0"
        now_judged = servers[follower].post_json("/validate", review_binding("core-x")).json()["response"]
        assert now_judged["allowed"] is False and "GB001" in now_judged["status"]["message"]
        lease = api.get(LEASE)["spec"]
        assert lease["leaseTransitions"] == 1 and lease["leaseDurationSeconds"] == 2


def test_concurrent_bindings_sent_to_the_leader_never_mix_job_types(api, tmp_path):
    pods = [gpu_pod(f"job-{i:02d}", mem=1, core=(5 if i % 2 else None)) for i in range(50)]
    api.add(replica_pod("replica-a"), replica_pod("replica-b"), node(mode="core_mem", cards=8, card_gib=80), *pods)
    with ExitStack() as stack:
        servers = start_replicas(api, tmp_path, stack)
        leader = servers[wait_until(lambda: len(labelled(api)) == 1 and labelled(api), timeout=20,
                                    what="a leader")[0]]
        sessions = [leader.session() for _ in range(50)]

        def send(i: int) -> tuple[int, dict]:
            return i, leader.post_json("/validate", review_binding(f"job-{i:02d}"), sessions[i]).json()["response"]

        with ThreadPoolExecutor(max_workers=50) as pool:
            results = list(pool.map(send, range(50)))
        for session in sessions:
            session.close()
        admitted = {"core+mem" if i % 2 else "mem-only" for i, r in results if r["allowed"]}
        assert len(admitted) == 1, admitted
        denied = [r for _, r in results if not r["allowed"]]
        assert len(denied) == 25 and all(r["status"]["message"].startswith("GB001: ") for r in denied)
        assert all("warnings" not in r for _, r in results if r["allowed"])  # judged, not waved through


def test_a_restarted_container_drops_the_label_and_a_held_lease_is_respected_fail_closed(api, tmp_path):
    # Another replica holds the Lease and keeps it (a long duration); this pod still carries the
    # label from when its previous container led.
    now = datetime.now(UTC).isoformat()
    api.add(replica_pod("replica-a", {LABEL: "true"}), node(mode="core_mem"), gpu_pod("core-x", core=30),
            {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "gpushare-webhook-bindings", "namespace": NS},
             "spec": {"holderIdentity": "replica-z_1", "leaseDurationSeconds": 3600, "acquireTime": now,
                      "renewTime": now, "leaseTransitions": 4}})
    env = {**FAST, "GPUSHARE_LEADER__POD_NAME": "replica-a", "GPUSHARE_STATE__WHEN_UNAVAILABLE__PLACEMENT": "closed"}
    with gpushare_server(tmp_path, "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), ready_path="/readyz",
                         env=env) as server:
        wait_until(lambda: labelled(api) == [], timeout=20, what="the stale label to be removed")
        denied = wait_until(lambda: (r := server.post_json("/validate", review_binding("core-x")).json()[
            "response"]) and "replica-z_1" in r["status"]["message"] and r, timeout=20,
            what="the replica to read who holds the lease")
        assert denied["allowed"] is False
        message = denied["status"]["message"]
        assert NOT_LEADER in message and "replica-z_1" in message
        assert "state.when_unavailable.placement: closed" in message and "retry when the binding reaches" in message
        assert holder(api) == "replica-z_1" and leader_gauge(server) == "0.0"


def test_two_candidates_racing_for_the_lease_one_gets_409(tmp_path):
    """The replace carries the resourceVersion read: a write in between makes it a 409, not a second leader."""
    with ExitStack() as stack:
        api = WritableApiServer().start()
        stack.callback(api.stop)
        settings = LeaderSettings(lease_duration_seconds=2, renew_deadline_seconds=1.5, retry_period_seconds=0.25)
        client = api_client(api.kubeconfig(tmp_path / "kc"))
        first = elector(client, settings, NS, lambda: True)
        second = elector(client, settings, NS, lambda: True)
        assert first._try_acquire_or_renew()  # creates the Lease
        assert not second._try_acquire_or_renew()  # held, renewed just now
        stale = api.get(LEASE)
        stale["spec"]["holderIdentity"] = ""  # released: anyone may take it
        api.update(stale)

        def first_takes_it_meanwhile(server) -> None:
            assert first._try_acquire_or_renew()

        api.before("PUT", first_takes_it_meanwhile)
        assert not second._try_acquire_or_renew()  # its PUT names the version before first's write
        assert holder(api) == first.identity
        assert [w.method for w in api.writes].count("PUT") == 2


def test_timings_follow_client_go_rules(tmp_path):
    assert (LeaderSettings().lease_duration_seconds, LeaderSettings().renew_deadline_seconds,
            LeaderSettings().retry_period_seconds) == (15, 10.0, 2.0)
    config = tmp_path / "c.yaml"
    config.write_text("leader:\n  lease_duration_seconds: 10\n  renew_deadline_seconds: 10\n")
    with pytest.raises(ConfigFileError, match=r"greater than leader\.renew_deadline_seconds"):
        load_settings(config)
    config.write_text("leader:\n  renew_deadline_seconds: 2\n  retry_period_seconds: 2\n")
    with pytest.raises(ConfigFileError, match=r"1\.2 x leader\.retry_period_seconds"):
        load_settings(config)
