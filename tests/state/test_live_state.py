"""The live source against a local API server that speaks list/watch honestly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from certs.issue import ensure_serving_certs
from policies.admission.engine import Engine
from policies.placement.assume import PlacementLedger
from tests.support.cluster_objects import binding, gpu_pod, node, plain_pod, with_mode
from tests.support.fake_apiserver import FakeApiServer, running
from tests.support.helpers import wait_until
from webhook.settings import Settings
from webhook.state.live import LiveClusterState, StateSourceError, core_api
from webhook.state.snapshot import load_snapshot

NODE = "cn-beijing.192.168.1.10"
FAST = {"list_page_size": 2, "backoff_initial_seconds": 0.02, "backoff_max_seconds": 0.2,
        "stale_after_seconds": 0.3}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with running() as server:
        yield server


def live_for(api: FakeApiServer, tmp_path: Path, settings: Settings | None = None) -> LiveClusterState:
    settings = settings or Settings(state=FAST)
    client, _ = core_api(api.kubeconfig(tmp_path / "kubeconfig"))
    return LiveClusterState(client, settings.names, settings.state)


@pytest.fixture
def live(api, tmp_path) -> Iterator[LiveClusterState]:
    state = live_for(api, tmp_path)
    yield state
    state.stop()


def seed(api: FakeApiServer) -> None:
    api.add(node(mode="core_mem"), node("cn-beijing.192.168.1.11", mode="cgpu"),
            gpu_pod("mem-a", mem=2, node_name=NODE), gpu_pod("core-x", mem=2, core=30),
            plain_pod("web", node_name=NODE))


def test_paged_list_fills_the_state_and_keeps_non_gpu_pods_by_key(api, live):
    seed(api)
    live.start()
    assert live.wait_synced(10)
    assert live.counts() == (2, 2)
    assert live.has_pod("default", "web") and live.get_pod("default", "web") is None
    assert [p.key for p in live.pods_on_node(NODE)] == ["default/mem-a"]
    assert live.get_node(NODE).labels["ack.node.gpu.schedule"] == "core_mem"
    # 3 pods in pages of 2: two list requests, the second with a continue token
    assert api.count(path="/api/v1/pods", watch=False) == 2
    assert "continue" in [r for r in api.requests if r.path == "/api/v1/pods"][1].query
    assert all(r.query.get("limit") == "2" for r in api.requests if r.path == "/api/v1/pods"
               and r.query.get("watch") != "true")


def test_decisions_change_as_watch_events_arrive(api, live):
    seed(api)
    engine = Engine(Settings(state=FAST))
    live.start()
    assert live.wait_synced(10)

    def core_binding_allowed() -> bool:
        subject = engine.subject("Binding", binding("core-x", NODE), namespace="default", state=live)
        return engine.validate(subject).allowed

    assert not core_binding_allowed()  # GB001: mem-a runs there
    api.delete(gpu_pod("mem-a"))
    wait_until(core_binding_allowed, timeout=10, what="the deletion to reach the state")
    api.add(gpu_pod("mem-b", mem=1, node_name=NODE))
    wait_until(lambda: not core_binding_allowed(), timeout=10, what="the new pod to reach the state")


def test_expired_watch_lists_again_and_drops_what_vanished(api, live):
    seed(api)
    live.start()
    assert live.wait_synced(10)
    lists = api.count(path="/api/v1/pods", watch=False)
    api.set_unavailable()  # cuts the watches; nothing gets through
    wait_until(lambda: not live.pods_reflector.connected, timeout=10)
    # While the client was away the pod went and history was compacted: only a list can tell.
    api.delete(gpu_pod("mem-a"))
    api.compact()
    api.set_unavailable(False)
    wait_until(lambda: live.get_pod("default", "mem-a") is None, timeout=10, what="relist dropping mem-a")
    assert api.count(path="/api/v1/pods", watch=False) > lists
    assert live.has_pod("default", "core-x")


def test_error_event_410_on_an_open_watch_relists(api, live):
    seed(api)
    live.start()
    assert live.wait_synced(10)
    wait_until(lambda: api.open_watches() == len(live.reflectors), timeout=10)
    lists = live.pods_reflector.lists
    api.expire_watches()
    wait_until(lambda: live.pods_reflector.lists > lists, timeout=10, what="a relist after ERROR 410")
    api.add(gpu_pod("after", node_name=NODE))
    wait_until(lambda: live.get_pod("default", "after") is not None, timeout=10)


def test_compaction_neither_ends_open_watches_nor_makes_them_miss_events(api, live):
    seed(api)
    live.start()
    assert live.wait_synced(10)
    wait_until(lambda: api.open_watches() == len(live.reflectors), timeout=10)
    lists = live.pods_reflector.lists, live.nodes_reflector.lists
    api.add(gpu_pod("before", mem=1, node_name=NODE))
    api.compact()  # possibly before the watch delivered "before": it still must
    api.add(gpu_pod("after", mem=1, node_name=NODE))
    api.delete(gpu_pod("mem-a"))
    wait_until(lambda: live.get_pod("default", "mem-a") is None and live.get_pod("default", "after") is not None,
               timeout=10, what="the events after the compaction")
    assert live.get_pod("default", "before") is not None
    assert (live.pods_reflector.lists, live.nodes_reflector.lists) == lists  # nothing expired: no relist


def test_http_410_on_watch_start_relists(tmp_path):
    with running(FakeApiServer(gone_as_http=True)) as api:
        live = live_for(api, tmp_path)
        try:
            seed(api)
            live.start()
            assert live.wait_synced(10)
            api.set_unavailable()
            wait_until(lambda: not live.pods_reflector.connected, timeout=10)
            api.add(node("joined-meanwhile", mode="share"))
            api.compact()
            api.set_unavailable(False)
            wait_until(lambda: live.pods_reflector.lists >= 2 and live.nodes_reflector.lists >= 2, timeout=10,
                       what="relists after HTTP 410")
        finally:
            live.stop()


def test_dropped_watch_reconnects_from_its_resource_version_without_listing(api, live):
    seed(api)
    live.start()
    assert live.wait_synced(10)
    wait_until(lambda: api.open_watches() == len(live.reflectors), timeout=10)
    lists, watches = api.count(path="/api/v1/pods", watch=False), api.count(path="/api/v1/pods", watch=True)
    api.drop_watches()
    api.add(gpu_pod("while-away", node_name=NODE))  # lands in history; the resumed watch replays it
    wait_until(lambda: live.get_pod("default", "while-away") is not None, timeout=10)
    assert api.count(path="/api/v1/pods", watch=True) > watches
    assert api.count(path="/api/v1/pods", watch=False) == lists
    resumed = [r for r in api.requests if r.path == "/api/v1/pods" and r.query.get("watch") == "true"][-1]
    assert int(resumed.query["resourceVersion"]) > 1000 and resumed.query["allowWatchBookmarks"] == "true"


def test_bookmarks_move_the_resource_version_so_compaction_needs_no_relist(api, live):
    seed(api)
    live.start()
    assert live.wait_synced(10)
    wait_until(lambda: api.open_watches() == len(live.reflectors), timeout=10)
    api.add(node("unrelated-node", mode="share"))  # moves the global resourceVersion past the pods'
    before = live.pods_reflector.resource_version
    api.bookmark()
    wait_until(lambda: live.pods_reflector.resource_version != before, timeout=10, what="a bookmark")
    assert int(live.pods_reflector.resource_version) == api.resource_version
    lists = live.pods_reflector.lists
    api.compact()
    api.drop_watches()
    api.add(gpu_pod("later", node_name=NODE))
    wait_until(lambda: live.get_pod("default", "later") is not None, timeout=10)
    assert live.pods_reflector.lists == lists  # resumed from the bookmark: no 410, no relist


def test_stale_state_fails_open_for_pods_and_closed_for_node_mode_changes(api, live):
    seed(api)
    engine = Engine(Settings(state=FAST))
    live.start()
    assert live.wait_synced(10)
    assert live.availability().usable
    api.set_unavailable()
    wait_until(lambda: not live.availability().usable, timeout=10, what="the state to go stale")
    assert "watch has been disconnected for" in live.availability().reason
    bind = engine.validate(engine.subject("Binding", binding("core-x", NODE), namespace="default", state=live))
    assert bind.allowed and "admitted without the check (state.when_unavailable.placement: open)" \
        in bind.warnings[0].message
    old = node(mode="core_mem")
    change = engine.validate(engine.subject("Node", with_mode(old, "cgpu"), operation="UPDATE", old=old, state=live))
    assert not change.allowed
    assert "API error 503" in change.violations[0].message and "node_mode_change: closed" in \
        change.violations[0].message
    api.set_unavailable(False)
    wait_until(lambda: live.availability().usable, timeout=10, what="the state to recover")


def test_not_synced_yet_is_a_reason(api, live):
    api.set_unavailable()
    live.start()
    wait_until(lambda: "503" in live.availability().reason, timeout=10)
    assert live.availability().reason.startswith("not synced yet: the first list of nodes and pods")
    assert not live.synced()


def test_snapshot_parity_live_and_file_judge_alike(api, tmp_path, settings):
    objects = [node(mode="core_mem"), node("cn-beijing.192.168.1.11", mode="cgpu", cards=1, card_gib=8),
               gpu_pod("mem-a", mem=2, node_name=NODE), gpu_pod("core-x", mem=2, core=30),
               gpu_pod("big", mem=9), gpu_pod("mem-b", mem=1), plain_pod("web")]
    objects += [gpu_pod(f"crowd-{i}", mem=1, node_name="cn-beijing.192.168.1.11") for i in range(3)]
    snapshot_file = tmp_path / "snapshot.json"
    import json
    snapshot_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    api.add(*objects)
    live = live_for(api, tmp_path)
    live.start()
    try:
        assert live.wait_synced(10)
        engine = Engine(settings)
        from_file = load_snapshot(snapshot_file, settings.names)
        reviews = [("Binding", binding(p, n)) for p in ("mem-a", "core-x", "big", "mem-b", "web", "ghost")
                   for n in (NODE, "cn-beijing.192.168.1.11", "nowhere")]
        reviews.append(("Pod", gpu_pod("direct", core=40, node_name=NODE)))
        for kind, obj in reviews:
            verdicts = [engine.validate(engine.subject(kind, obj, namespace="default", state=state))
                        for state in (live, from_file)]
            assert verdicts[0].findings == verdicts[1].findings, obj
        old = node(mode="core_mem")
        for state in (live, from_file):
            verdict = engine.validate(engine.subject("Node", with_mode(old, "share"), operation="UPDATE", old=old,
                                                     state=state))
            assert "default/mem-a" in verdict.violations[0].message
    finally:
        live.stop()


def test_tls_and_token_from_the_kubeconfig(tmp_path):
    certs = tmp_path / "api-certs"
    ensure_serving_certs(certs, ["localhost", "127.0.0.1"])
    api = FakeApiServer(tls=(certs / "tls.crt", certs / "tls.key"), token="s3cret").start()
    try:
        seed(api)
        client, host = core_api(api.kubeconfig(tmp_path / "kubeconfig", ca_file=certs / "ca.crt"))
        assert host.startswith("https://127.0.0.1:")
        live = LiveClusterState(client, Settings().names, Settings(state=FAST).state)
        live.start()
        assert live.wait_synced(10) and live.counts() == (2, 2)
        live.stop()
        # the wrong token is refused, and the state says so
        api.token = "rotated"  # the kubeconfig still has the old token
        client, _ = core_api(tmp_path / "kubeconfig")
        bad = LiveClusterState(client, Settings().names, Settings(state=FAST).state)
        bad.start()
        wait_until(lambda: "401" in bad.availability().reason, timeout=10)
        bad.stop()
    finally:
        api.stop()


def test_bad_kubeconfig_is_a_clear_error(tmp_path):
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    with pytest.raises(StateSourceError, match="kubeconfig: not a usable cluster configuration"):
        core_api(broken)


def test_ledger_view_over_live_state_counts_admitted_bindings(api, live):
    seed(api)
    api.add(gpu_pod("mem-new", mem=1))
    engine = Engine(Settings(state=FAST))
    live.start()
    assert live.wait_synced(10)
    api.delete(gpu_pod("mem-a"))
    wait_until(lambda: live.get_pod("default", "mem-a") is None, timeout=10)
    ledger = PlacementLedger()
    view = ledger.view(live)
    assert engine.admit(engine.subject("Binding", binding("mem-new", NODE), namespace="default", state=view),
                        ledger).allowed
    assert not engine.validate(engine.subject("Binding", binding("core-x", NODE), namespace="default",
                                              state=view)).allowed
    # the watch shows the binding: the assumption gives way to the real record
    api.update(gpu_pod("mem-new", mem=1, node_name=NODE))
    wait_until(lambda: live.get_pod("default", "mem-new").node_name == NODE, timeout=10)
    assert not engine.validate(engine.subject("Binding", binding("core-x", NODE), namespace="default",
                                              state=view)).allowed
    assert ledger.counts()[0] == 0


def test_in_cluster_config_when_running_in_a_pod(tmp_path, monkeypatch):
    """The service-account path: KUBERNETES_SERVICE_HOST/PORT, the mounted token and CA."""
    from kubernetes.config import incluster_config

    from webhook.state import kube_client

    certs = tmp_path / "api-certs"
    ensure_serving_certs(certs, ["localhost", "127.0.0.1"])
    token = tmp_path / "token"
    token.write_text("pod-token")
    with running(FakeApiServer(tls=(certs / "tls.crt", certs / "tls.key"), token="pod-token")) as api:
        seed(api)
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
        monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
        monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(certs / "ca.crt"))
        monkeypatch.setattr(kube_client, "SERVICE_ACCOUNT_TOKEN", token)
        assert kube_client.in_cluster()
        client, host = core_api(None)
        assert host == f"https://127.0.0.1:{api.port}"
        live = LiveClusterState(client, Settings().names, Settings(state=FAST).state)
        live.start()
        try:
            assert live.wait_synced(10) and live.counts() == (2, 2)
        finally:
            live.stop()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert not kube_client.in_cluster()
