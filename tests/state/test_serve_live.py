"""The real `gpushare serve --kubeconfig` against the fake API server: readiness, live
decisions, the assume-cache under 50 concurrent bindings, and dry runs that record nothing."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from tests.support.cluster_objects import binding, gpu_pod, node, with_mode
from tests.support.fake_apiserver import FakeApiServer
from tests.support.helpers import admission_review, gpushare_executable, gpushare_server, wait_until

pytestmark = pytest.mark.processes

NODE = "cn-beijing.192.168.1.10"
BIND = {"kind": "Binding", "resource": "pods", "sub_resource": "binding"}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.stop()


_open: list = []


def stack_session(server):
    """A session closed before the server stops (an open keep-alive connection delays its graceful exit)."""
    session = server.session()
    _open.append(session)
    return session


@contextmanager
def live_server(tmp_path, *args: str, **kwargs) -> Iterator:
    """gpushare serve; the sessions of ``stack_session`` are closed before it stops."""
    with gpushare_server(tmp_path, *args, **kwargs) as server:
        try:
            yield server
        finally:
            while _open:
                _open.pop().close()


def review_binding(pod: str, node_name: str = NODE, **kwargs) -> dict:
    return admission_review(binding(pod, node_name), **BIND, **kwargs)


def test_readyz_flips_only_after_the_first_sync_and_the_source_is_logged(api, tmp_path):
    api.set_unavailable()  # the API server answers 503 until told otherwise
    api.add(node(mode="core_mem"), gpu_pod("mem-a", node_name=NODE))
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    fast_retries = {"GPUSHARE_STATE__BACKOFF_INITIAL_SECONDS": "0.05", "GPUSHARE_STATE__BACKOFF_MAX_SECONDS": "0.2"}
    with live_server(tmp_path, "--kubeconfig", str(kubeconfig), env=fast_retries) as server:
        session = stack_session(server)
        assert session.get(server.url + "/readyz", timeout=5).status_code == 503
        wait_until(lambda: api.count(path="/api/v1/pods") >= 2, timeout=20, what="the server retrying its list")
        not_ready = session.get(server.url + "/readyz", timeout=5)
        assert not_ready.status_code == 503 and not_ready.json() == {"ready": False,
                                                                     "state": f"live:{kubeconfig}"}
        # Before the sync a binding is admitted with a warning (placement fails open)...
        early = server.post_json("/validate", review_binding("mem-a"), session).json()["response"]
        assert early["allowed"] is True and "not synced yet" in early["warnings"][0]
        api.set_unavailable(False)
        wait_until(lambda: session.get(server.url + "/readyz", timeout=5).status_code == 200, timeout=20,
                   what="/readyz after the sync")
        assert f"cluster state: cluster from kubeconfig {kubeconfig} (API server" in server.log()


def test_decisions_follow_watch_events(api, tmp_path):
    api.add(node(mode="core_mem"), gpu_pod("mem-a", node_name=NODE), gpu_pod("core-x", core=30))
    with live_server(tmp_path, "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")),
                         ready_path="/readyz") as server:
        session = stack_session(server)

        def core_x() -> dict:
            return server.post_json("/validate", review_binding("core-x", dry_run=True), session).json()["response"]

        denied = core_x()
        assert denied["allowed"] is False and denied["status"]["message"].startswith("GB001: Binding default/core-x")
        api.delete(gpu_pod("mem-a"))
        wait_until(lambda: core_x()["allowed"], timeout=20, what="the deletion to change the verdict")
        # a node mode change is judged against the pods the watch shows
        old = node(mode="core_mem")
        api.update(gpu_pod("core-y", core=10, node_name=NODE))
        change = admission_review(with_mode(old, "cgpu"), operation="UPDATE", old=old, resource="nodes",
                                  namespace="")

        def mode_change() -> dict:
            return server.post_json("/validate", change, session).json()["response"]

        wait_until(lambda: not mode_change()["allowed"], timeout=20, what="core-y to block the mode change")
        assert "while 1 GPU pod(s) run on it (default/core-y)" in mode_change()["status"]["message"]


def test_fifty_concurrent_bindings_never_admit_both_job_types(api, tmp_path):
    pods = [gpu_pod(f"job-{i:02d}", mem=1, core=(5 if i % 2 else None)) for i in range(50)]
    api.add(node(mode="core_mem", cards=8, card_gib=80), *pods)
    with live_server(tmp_path, "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")),
                         ready_path="/readyz") as server:
        reviews = [review_binding(f"job-{i:02d}") for i in range(50)]
        sessions = [stack_session(server) for _ in range(50)]

        def send(i: int) -> tuple[int, dict]:
            return i, server.post_json("/validate", reviews[i], sessions[i]).json()["response"]

        with ThreadPoolExecutor(max_workers=50) as pool:
            results = list(pool.map(send, range(50)))
        admitted = {"core+mem" if i % 2 else "mem-only" for i, r in results if r["allowed"]}
        denied = [r for _, r in results if not r["allowed"]]
        assert len(admitted) == 1, admitted
        assert len(denied) == 25
        assert all(r["status"]["message"].startswith("GB001: ") for r in denied)
        # the watch never showed these bindings: the assume-cache still holds them
        other = "job-01" if admitted == {"mem-only"} else "job-00"
        again = server.post_json("/validate", review_binding(other, dry_run=True)).json()["response"]
        assert again["allowed"] is False


def test_dry_run_bindings_record_nothing(api, tmp_path):
    api.add(node(mode="core_mem"), gpu_pod("mem-a", mem=1), gpu_pod("core-x", core=30))
    with live_server(tmp_path, "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")),
                         ready_path="/readyz") as server:
        session = stack_session(server)
        assert server.post_json("/validate", review_binding("mem-a", dry_run=True), session).json()["response"][
            "allowed"]
        core = server.post_json("/validate", review_binding("core-x"), session).json()["response"]
        assert core["allowed"] is True  # the dry-run mem-a binding left no trace
        mem = server.post_json("/validate", review_binding("mem-a"), session).json()["response"]
        assert mem["allowed"] is False and "already runs core+mem pods (default/core-x)" in mem["status"]["message"]


def test_a_pod_created_a_moment_ago_is_found_by_its_binding(api, tmp_path):
    api.add(node(mode="core_mem"), gpu_pod("mem-a", node_name=NODE))
    with live_server(tmp_path, "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")),
                         ready_path="/readyz") as server:
        session = stack_session(server)
        fresh = gpu_pod("core-fresh", core=20)
        assert server.post_json("/validate", admission_review(fresh), session).json()["response"]["allowed"]
        # the API server never stored it (no watch event): the binding still finds it
        reply = server.post_json("/validate", review_binding("core-fresh"), session).json()["response"]
        assert reply["allowed"] is False and reply["status"]["message"].startswith("GB001: Binding default/core-fresh")


def test_bad_kubeconfig_or_both_sources_exit_2(tmp_path):
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    base = [gpushare_executable(), "serve", "--cert-dir", str(tmp_path / "c"), "--port", "0"]
    result = subprocess.run([*base, "--kubeconfig", str(broken)], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "GPUSHARE_NAMES__SCHEDULER_NAME": "none"})
    assert result.returncode == 2
    assert "kubeconfig: not a usable cluster configuration" in result.stderr and "Traceback" not in result.stderr
    both = subprocess.run([*base, "--kubeconfig", str(broken), "--snapshot", str(broken)], capture_output=True,
                          text=True, timeout=60)
    assert both.returncode == 2 and "not both" in both.stderr
