"""The opt-in kubelet /configz source of the CPU manager policy, through the real
`gpushare serve --kubeconfig` against the fake API server's node proxy: off by default (nothing
calls the proxy), static kubelets denied by GN002 and GB005 when on, a kubelet that cannot be
reached left unknown (GN002's warning) and said once in the log, the label winning, and a
kubelet restart or the refresh interval reading again."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cluster_objects import binding, gpu_pod, node, with_mode
from tests.support.fake_apiserver import FakeApiServer
from tests.support.helpers import DATA, admission_review, gpushare_server, wait_until

pytestmark = pytest.mark.processes

STATIC, NONE, UNREACHABLE, LABELLED = "gpu-static", "gpu-none", "gpu-unreachable", "gpu-labelled"
CONFIGZ = {"static": (DATA / "kubelet" / "configz-static.json").read_bytes(),
           "none": (DATA / "kubelet" / "configz-none.json").read_bytes()}
ON = {"GPUSHARE_STATE__KUBELET_CONFIGZ__ENABLED": "true"}
BIND = {"kind": "Binding", "resource": "pods", "sub_resource": "binding"}


def stock_node(name: str, mode: str | None = "cgpu", **kwargs: Any) -> dict[str, Any]:
    """A GPU node as a stock ACK node shows it: no CPU manager policy label."""
    obj = node(name, mode=mode, **kwargs)
    del obj["metadata"]["labels"]["gpushare.io/cpu-manager-policy"]
    return obj


def proxy_path(name: str) -> str:
    return f"/api/v1/nodes/{name}/proxy/configz"


def proxy_calls(api: FakeApiServer) -> int:
    return sum(1 for r in list(api.requests) if "/proxy/" in r.path)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    server.add(stock_node(STATIC), stock_node(NONE), stock_node(UNREACHABLE),
               node(LABELLED, labels={"gpushare.io/cpu-manager-policy": "none"}),
               gpu_pod("share-a"), gpu_pod("share-b"))
    server.set_kubelet_configz(STATIC, CONFIGZ["static"])
    server.set_kubelet_configz(NONE, CONFIGZ["none"])
    server.set_kubelet_configz(LABELLED, CONFIGZ["static"])  # the label says none, and the label wins
    # UNREACHABLE has no kubelet answering: the proxy says 503, as kube-apiserver does.
    yield server
    server.stop()


@contextmanager
def serving(api: FakeApiServer, tmp_path, env: dict[str, str]) -> Iterator[Any]:
    with gpushare_server(tmp_path, "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), env=env,
                         ready_path="/readyz") as server:
        session = server.session()
        try:
            yield server, session
        finally:
            session.close()


def validate(server, session, review: dict[str, Any]) -> dict[str, Any]:
    reply = server.post_json("/validate", review, session)
    assert reply.status_code == 200, reply.text
    return reply.json()["response"]


def mode_change(name: str, old_mode: str = "cgpu", new_mode: str = "share") -> dict[str, Any]:
    """Relabelling a node as an operator would: the reviewed objects carry no policy label."""
    old = stock_node(name, mode=old_mode)
    return admission_review(with_mode(copy.deepcopy(old), new_mode), operation="UPDATE", old=old,
                            resource="nodes", namespace="")


def configz_nodes(server, session) -> dict[str, float]:
    text = session.get(server.url + "/metrics", timeout=10).text
    return {s.labels["policy"]: s.value for family in text_string_to_metric_families(text)
            if family.name == "gpushare_kubelet_configz_nodes" for s in family.samples}


def state_events(server, session) -> float:
    text = session.get(server.url + "/metrics", timeout=10).text
    return next(s.value for family in text_string_to_metric_families(text) if family.name == "gpushare_state_events"
                for s in family.samples)


def test_off_by_default_nothing_calls_the_node_proxy(api, tmp_path):
    with serving(api, tmp_path, {}) as (server, session):
        # The state is synced (/readyz), and node events arrive through the watch: NONE goes exclusive.
        api.update(stock_node(NONE, mode="default"))
        wait_until(lambda: not validate(server, session, admission_review(binding("share-b", NONE), **BIND,
                                                                          dry_run=True))["allowed"],
                   what="the node event to reach the state")
        response = validate(server, session, mode_change(STATIC))
        assert response["allowed"] is True
        # The warning fits the API server's limit; its whole text is in the audit annotation.
        assert any(w.startswith("GN002") and "CPU manager policy is unknown" in w for w in response["warnings"])
        assert "reading it from the kubelet's /configz is off (state.kubelet_configz.enabled)" in \
            response["auditAnnotations"]["warning.GN002"]
        bound = validate(server, session, admission_review(binding("share-a", STATIC), **BIND))
        assert bound["allowed"] is True
        metrics = session.get(server.url + "/metrics", timeout=10).text
        assert "gpushare_kubelet_configz" not in metrics  # no reader was built
        assert "kubelet /configz" not in server.log()
    assert proxy_calls(api) == 0


def test_on_a_static_kubelet_is_denied_by_gn002_and_gb005(api, tmp_path):
    with serving(api, tmp_path, ON) as (server, session):
        wait_until(lambda: configz_nodes(server, session) == {"static": 1, "none": 1, "other": 0, "unread": 1},
                   what="every GPU node read once")
        assert api.count(path=proxy_path(LABELLED)) == 0  # the label wins: never read

        denied = validate(server, session, mode_change(STATIC))
        assert denied["allowed"] is False
        message = denied["status"]["message"]
        assert message.startswith(f"GN002: Node {STATIC}: ack.node.gpu.schedule=share on a node whose CPU manager "
                                  f"policy is static (its kubelet's /configz says cpuManagerPolicy: static)")
        assert "shared GPU scheduling needs policy none, or use ack.node.gpu.schedule=default" in message
        assert validate(server, session, mode_change(NONE))["allowed"] is True

        placed = validate(server, session, admission_review(binding("share-a", STATIC), **BIND))
        assert placed["allowed"] is False
        assert placed["status"]["message"].startswith("GB005: ")
        assert f"node {STATIC} runs the static CPU manager policy" in placed["status"]["message"]
        assert validate(server, session, admission_review(binding("share-b", NONE), **BIND))["allowed"] is True
        # The labelled node: its label says none, its kubelet would say static; the label wins.
        assert validate(server, session, admission_review(binding("share-b", LABELLED), **BIND, dry_run=True))[
            "allowed"] is True


def test_an_unreachable_kubelet_stays_unknown_warns_and_is_logged_once(api, tmp_path):
    with serving(api, tmp_path, ON) as (server, session):
        wait_until(lambda: configz_nodes(server, session).get("unread") == 1 and api.count(
            path=proxy_path(UNREACHABLE)) == 1, what="the failed read")
        for _ in range(3):  # the rule asks the state; nothing reads the kubelet per request
            response = validate(server, session, mode_change(UNREACHABLE))
            assert response["allowed"] is True
            assert any(w.startswith("GN002") and "CPU manager policy is unknown" in w for w in response["warnings"])
            assert "its kubelet's /configz has not been read or could not be" in \
                response["auditAnnotations"]["warning.GN002"]
            assert validate(server, session, admission_review(binding("share-a", UNREACHABLE), **BIND,
                                                              dry_run=True))["allowed"] is True
        assert api.count(path=proxy_path(UNREACHABLE)) == 1
        log = server.log()
        line = (f"node {UNREACHABLE}: kubelet /configz could not be read: API error 503: error trying to reach "
                f"service: dial tcp 192.168.1.10:10250: connect: connection refused")
        assert log.count(line) == 1, log
        assert "its CPU manager policy stays unknown" in log
        text = session.get(server.url + "/metrics", timeout=10).text
        assert 'gpushare_kubelet_configz_reads_total{result="failed"} 1.0' in text


def test_a_kubelet_restart_reads_again(api, tmp_path):
    with serving(api, tmp_path, ON) as (server, session):
        wait_until(lambda: configz_nodes(server, session).get("none") == 1, what="the first read")
        assert validate(server, session, admission_review(binding("share-a", NONE), **BIND, dry_run=True))[
            "allowed"] is True
        # The operator switches the kubelet to static and restarts it; the node reboots (new boot ID).
        api.set_kubelet_configz(NONE, CONFIGZ["static"])
        restarted = stock_node(NONE)
        restarted["status"]["nodeInfo"]["bootID"] = "0d3c4a57-5d41-4f8e-9c51-7a1a1c3b2e10"
        api.update(restarted)
        wait_until(lambda: api.count(path=proxy_path(NONE)) == 2, what="the second read")
        wait_until(lambda: not validate(server, session, admission_review(binding("share-a", NONE), **BIND,
                                                                          dry_run=True))["allowed"],
                   what="GB005 after the restart")
        assert "its kubelet restarted" in server.log()
        # An update that shows no restart (a label added) reads nothing.
        events = state_events(server, session)
        labelled = copy.deepcopy(restarted)
        labelled["metadata"]["labels"]["team"] = "vision"
        api.update(labelled)
        wait_until(lambda: state_events(server, session) > events, what="the label event")
        assert api.count(path=proxy_path(NONE)) == 2


def test_the_refresh_interval_reads_again(api, tmp_path):
    env = {**ON, "GPUSHARE_STATE__KUBELET_CONFIGZ__REFRESH_SECONDS": "0.2"}
    with serving(api, tmp_path, env) as (server, session):
        wait_until(lambda: api.count(path=proxy_path(NONE)) >= 3, what="periodic reads")
        assert configz_nodes(server, session)["none"] == 1
        # A kubelet switched to static is found by the refresh alone (no restart was visible).
        api.set_kubelet_configz(NONE, CONFIGZ["static"])
        wait_until(lambda: configz_nodes(server, session)["static"] == 2, what="the refresh finding static")


# --- the reader on its own: parsing, and a missing permission said once --------------------------

def test_the_policy_is_read_from_the_documented_shape():
    from webhook.state.kubelet_config import ConfigzError, policy_from_configz

    assert policy_from_configz(CONFIGZ["static"]) == "static"
    assert policy_from_configz(CONFIGZ["none"]) == "none"
    assert policy_from_configz(b'{"kubeletconfig": {"port": 10250}}') == "none"  # the kubelet's default
    for body in (b"<html>", b'{"port": 10250}', b'{"kubeletconfig": {"cpuManagerPolicy": 1}}', b"[]"):
        with pytest.raises(ConfigzError):
            policy_from_configz(body)


def test_a_missing_nodes_proxy_grant_is_said_once_for_all_nodes(caplog):
    from policies.model.cluster_manifests import node_from_manifest
    from policies.model.settings import KubeletConfigzSettings, Names
    from webhook.state.kubelet_config import ConfigzError, KubeletConfigReader, kubelet_signature
    from webhook.state.status import ConfigzStatus

    def forbidden(name: str) -> bytes:
        raise ConfigzError(f'API error 403: nodes "{name}" is forbidden: User "system:serviceaccount:gpushare-system:'
                           f'gpushare-webhook" cannot get resource "nodes/proxy"', 403)

    names, status, seen = Names(), ConfigzStatus(), []
    reader = KubeletConfigReader(forbidden, names, KubeletConfigzSettings(enabled=True, concurrency=2),
                                 lambda name, policy: seen.append((name, policy)), status)
    reader.start()
    try:
        for n in range(5):
            obj = stock_node(f"gpu-{n}")
            reader.observe(node_from_manifest(obj, names), kubelet_signature(obj))
        wait_until(lambda: status.reads_failed == 5, what="five failed reads")
        wait_until(lambda: len(seen) == 5, what="five answers")
    finally:
        reader.stop()
    assert sorted(seen) == [(f"gpu-{n}", "") for n in range(5)]
    assert status.by_outcome() == {"static": 0, "none": 0, "other": 0, "unread": 5}
    said = [r.getMessage() for r in caplog.records if "nodes/proxy" in r.getMessage() and r.levelname == "ERROR"]
    assert len(said) == 1 and "grant it (docs/install.md) or turn state.kubelet_configz.enabled off" in said[0]
