"""The probe port's two halves in the server: the responder process the arbiter starts and stops
(gunicorn's server hooks), and the beat each worker writes at each turn of its loop.

``webhook.probes.responder`` says why probes are answered apart from the workers."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webhook.probes.responder import BEAT
from webhook.settings import ServerSettings


class Heartbeat:
    """One worker's beat: a few bytes at offset 0 of a file named by its pid."""

    def __init__(self, directory: Path, ready: Callable[[], bool]) -> None:
        self.path = directory / str(os.getpid())
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self._ready = ready

    def beat(self) -> None:
        try:
            ready = bool(self._ready())
        except Exception:
            ready = False
        os.pwrite(self._fd, BEAT.pack(time.monotonic(), ready), 0)


class Heartbeating:
    """A gunicorn worker that also beats for the probe port, at each of the arbiter's own
    heartbeats (``notify``: each turn of the worker's loop, at least once a second)."""

    heartbeat: Heartbeat | None = None

    def notify(self) -> None:
        super().notify()  # type: ignore[misc]
        if self.heartbeat is not None:
            self.heartbeat.beat()


def readiness(wsgi: Any) -> Callable[[], bool]:
    """What ``/readyz`` answers (the app's services, in Flask's ``app.extensions``), through the
    scheduling middleware if any."""
    app = getattr(wsgi, "app", wsgi)
    services = getattr(app, "extensions", {}).get("gpushare")
    return services.ready if services is not None else (lambda: True)


def probe_hooks(server: ServerSettings) -> dict[str, Any]:
    """gunicorn server hooks that run the probe port, when ``server.probe_port`` is set."""
    if server.probe_port is None:
        return {}
    port = server.probe_port
    made: list[Path] = []  # the beats' directory, made when the arbiter starts
    responder: list[subprocess.Popen[bytes]] = []

    def on_starting(_arbiter: Any) -> None:
        made.append(Path(tempfile.mkdtemp(prefix="gpushare-heartbeats-")))
        directory = made[0]
        responder.append(subprocess.Popen(
            [sys.executable, "-m", "webhook.probes.responder", "--host", server.host, "--port", str(port),
             "--heartbeats", str(directory), "--stall-seconds", str(server.probe_stall_seconds)]))

    def post_worker_init(worker: Any) -> None:
        worker.heartbeat = Heartbeat(made[0], readiness(worker.wsgi))
        worker.heartbeat.beat()

    def child_exit(_arbiter: Any, worker: Any) -> None:
        with contextlib.suppress(OSError, IndexError):
            os.unlink(made[0] / str(worker.pid))

    def on_exit(_arbiter: Any) -> None:
        for process in responder:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
        for directory in made:  # never anything else: nothing is removed before the arbiter made it
            shutil.rmtree(directory, ignore_errors=True)

    return {"on_starting": on_starting, "post_worker_init": post_worker_init, "child_exit": child_exit,
            "on_exit": on_exit}
