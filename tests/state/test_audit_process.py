"""The periodic audit's child process (webhook/state/forked.py), forked from this threaded test
process as the serving worker forks it: the answer comes back, the state's lock is free in the
child however busy the writers are, inherited connections do not outlive the parent's close, a
child that hangs is stopped at the deadline, and a failure comes back as words."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from policies.model.cluster_snapshot import ClusterSnapshot
from tests.support.cluster_objects import gpu_pod, node
from webhook.settings import Settings
from webhook.state import forked

pytestmark = pytest.mark.processes


def deadline(seconds: float = 30) -> float:
    return time.monotonic() + seconds


def test_the_answer_comes_back_with_the_childs_cpu_time():
    def work(channel: forked.Channel) -> None:
        total = sum(i * i for i in range(2_000_000))  # some CPU of its own
        channel.send({"pid": os.getpid(), "total": total})

    child = forked.start(work)
    answer = child.receive(deadline())
    ended = child.wait(deadline())
    assert answer == {"pid": child.pid, "total": sum(i * i for i in range(2_000_000))}
    assert answer["pid"] != os.getpid()
    assert ended.status == 0 and ended.cpu_seconds > 0


def test_the_state_is_consistent_in_the_child_while_writers_keep_writing():
    names = Settings().names
    state = ClusterSnapshot()
    state.upsert_node(node_from_manifest(node("n1", mode="cgpu", cards=2, card_gib=15), names))
    stop = threading.Event()

    def writer() -> None:  # a watch thread applying events as fast as it can
        i = 0
        while not stop.is_set():
            state.record_pod(pod_from_manifest(gpu_pod(f"p{i % 50}", mem=1, node_name="n1"), names))
            i += 1

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(20):
            def work(channel: forked.Channel) -> None:
                # Takes the state's lock: it would hang if a writer had held it at the fork.
                on_node = state.pods_on_node("n1")
                channel.send({"on_node": len(on_node), "all": len(state.pods())})

            child = forked.start(work, held=[state.writes_held()])
            answer = child.receive(deadline())
            assert child.wait(deadline()).status == 0
            assert answer["on_node"] == answer["all"] <= 50
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_a_connection_the_parent_closes_is_closed_although_the_child_still_runs():
    ours, peer = socket.socketpair()
    child = forked.start(lambda channel: channel.receive())  # waits until told to end
    try:
        ours.close()
        peer.settimeout(10)
        assert peer.recv(1) == b""  # end of stream now: the child did not keep a copy of the socket open
        assert os.waitpid(child.pid, os.WNOHANG) == (0, 0)  # and it is still running
    finally:
        child.send({"end": True})
        assert child.wait(deadline()).status == 0
        peer.close()


def test_a_child_that_hangs_is_stopped_at_the_deadline():
    child = forked.start(lambda channel: threading.Event().wait())  # never answers
    with pytest.raises(forked.ChildFailed, match="did not answer in time; stopped"):
        child.receive(time.monotonic() + 0.5)
    assert child.wait(deadline()).status == -9  # SIGKILL


def test_an_error_in_the_child_comes_back_in_words_and_exit_handlers_do_not_run(tmp_path):
    marker = tmp_path / "atexit-ran"

    def work(channel: forked.Channel) -> None:
        import atexit

        atexit.register(marker.write_text, "yes")  # as the worker's Lease release is registered
        raise ValueError("the state is not what it seemed")

    child = forked.start(work)
    assert child.receive(deadline()) == {"error": "ValueError: the state is not what it seemed"}
    assert child.wait(deadline()).status == 1
    assert not marker.exists()
