"""The probe port (server.probe_port): the real `gpushare serve` with a process of its own that
answers the kubelet's probes from the workers' heartbeats, never behind a review."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import requests

from tests.support.helpers import gpushare_executable, gpushare_server, wait_until
from tests.support.processes import free_port

pytestmark = [pytest.mark.both_workers, pytest.mark.processes]


def _get(port: int, path: str, method: str = "GET", timeout: float = 2.0) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _responders(port: int) -> list[int]:
    """Pids of probe responders listening on ``port`` (from their command lines)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"webhook.probes.responder" in argv and str(port).encode() in argv:
                found.append(int(entry.name))
    return found


def test_probes_are_answered_apart_from_a_stuck_worker_and_say_so(tmp_path, worker_kind):
    probe = free_port()
    env = {"GPUSHARE_SERVER__PROBE_PORT": str(probe), "GPUSHARE_SERVER__PROBE_STALL_SECONDS": "3"}
    with gpushare_server(tmp_path, env=env, worker=worker_kind) as server:
        status, health = wait_until(lambda: (answer := _get(probe, "/healthz"))[0] == 200 and answer,
                                    what="the probe port's /healthz")
        (worker,) = health["workers"]
        assert health["status"] == "ok" and worker["ready"] is True and worker["last_turn_seconds_ago"] < 3
        status, ready = _get(probe, "/readyz")
        assert status == 200 and ready["ready"] is True and [w["pid"] for w in ready["workers"]] == [worker["pid"]]
        assert _get(probe, "/healthz", method="POST") == (405, {"reason": "the probe port answers GET and HEAD only"})
        assert _get(probe, "/metrics") == (404, {"reason": "the probe port serves /healthz and /readyz only"})
        idle = [socket.create_connection(("127.0.0.1", probe)) for _ in range(300)]  # past its 256
        try:  # a flood of connections that send nothing closes the oldest, never keeps a probe out
            assert _get(probe, "/healthz")[0] == 200
        finally:
            for sock in idle:
                sock.close()

        os.kill(worker["pid"], signal.SIGSTOP)  # a worker that no longer turns its loop
        try:
            with pytest.raises(requests.exceptions.Timeout):  # the admission port cannot answer now
                server.session().get(server.url + "/healthz", timeout=1.0)
            status, stalled = wait_until(lambda: (answer := _get(probe, "/healthz"))[0] == 503 and answer,
                                         timeout=15, what="/healthz failing on a stuck worker")
            assert stalled["status"] == "stalled" and stalled["reason"] == (
                f"worker {worker['pid']} has not turned its loop for more than 3 s (server.probe_stall_seconds)")
            assert _get(probe, "/readyz")[0] == 503
        finally:
            os.kill(worker["pid"], signal.SIGCONT)
        wait_until(lambda: _get(probe, "/healthz")[0] == 200, timeout=15, what="/healthz back once it turns again")
        assert _responders(probe)
    wait_until(lambda: not _responders(probe), timeout=15, what="the responder ending with the server")


def test_a_busy_probe_port_or_one_shared_with_another_listener_is_refused_before_anything_is_written(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        port = free_port()
        for probe, words in ((busy, f"cannot listen on 127.0.0.1:{busy}: the port is in use"),
                             (port, f"server.probe_port {port} is server.port too; give each listener a port "
                                    "of its own")):
            done = subprocess.run([gpushare_executable(), "serve", "--host", "127.0.0.1", "--port", str(port),
                                   "--cert-dir", str(tmp_path / "certs")], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=60, env={**os.environ, "GPUSHARE_SERVER__PROBE_PORT": str(probe)})
            assert done.returncode == 2 and words in done.stderr, done.stderr
            assert not (tmp_path / "certs").exists()


def test_the_responder_imports_the_standard_library_only():
    """What keeps the process that answers the kubelet small (about 21 MiB resident, measured by
    bench/probe_memory.py): nothing of the server's dependencies, nothing of the webhook beside it."""
    import subprocess
    import sys

    probe = ("import sys; before = set(sys.modules); import webhook.probes.responder; "
             "print(' '.join(sorted(set(sys.modules) - before)))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            timeout=60).stdout.split()
    ours = {"webhook", "webhook.probes", "webhook.probes.responder"}
    assert ours <= set(loaded)
    others = [m for m in loaded if m not in ours and m.split(".")[0] not in sys.stdlib_module_names]
    assert others == [], others
