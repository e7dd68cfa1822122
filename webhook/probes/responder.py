"""The probe port (``server.probe_port``): ``/healthz`` and ``/readyz`` answered by a process of
their own, from the heartbeats the workers write (``webhook.server.heartbeat``).

Why a process: a worker's threads share one interpreter lock, so a probe answered by a worker
waits whenever its reviews compute, however the worker orders its work; under a flood of costly
reviews the kubelet's 3-second probes failed and healthy replicas were restarted. This process
runs no review; it answers from what the workers said last. A worker beats at each turn of its
loop (at least once a second) and says whether it is ready; ``/healthz`` fails when a worker
has not turned for ``server.probe_stall_seconds`` (it is stuck: the kubelet should restart
it), ``/readyz`` also when a worker is not ready. Webhooks built on controller-runtime serve
their probes on a port of their own the same way (the manager's ``HealthProbeBindAddress``,
``:8081`` in kubebuilder's scaffold).

Standard library only, so it starts in a few tens of milliseconds; plain HTTP, as kubelet
probes need no TLS; it exits when the server that started it goes away.

    python -m webhook.probes.responder --host H --port P --heartbeats DIR --stall-seconds S
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import struct
import time
from pathlib import Path

BEAT = struct.Struct("<dB")  # CLOCK_MONOTONIC seconds (the same clock in every process), ready
MAX_CONNECTIONS = 256  # open at once; past it the oldest is closed
READ_SECONDS = 2.0  # a request's head must arrive in this long
MAX_HEAD = 8192
PATHS = ("/healthz", "/readyz")


def read_beats(directory: Path) -> list[tuple[int, float, bool]]:
    """(pid, seconds since its last beat, ready) of every live worker that has beaten."""
    beats = []
    now = time.monotonic()
    for entry in os.scandir(directory):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            os.kill(pid, 0)
            with open(entry.path, "rb") as file:
                at, ready = BEAT.unpack(file.read(BEAT.size))
        except (OSError, struct.error):
            continue  # gone (its file is removed when it exits), or not written yet
        beats.append((pid, now - at, bool(ready)))
    return beats


def verdict(path: str, beats: list[tuple[int, float, bool]], stall_seconds: float) -> tuple[int, dict[str, object]]:
    """The status and JSON body of ``/healthz`` or ``/readyz`` for the workers' last beats."""
    stalled = [pid for pid, age, _ in beats if age > stall_seconds]
    workers = [{"pid": pid, "last_turn_seconds_ago": round(age, 3), "ready": ready} for pid, age, ready in beats]
    if not beats:
        return 503, {"status": "starting", "reason": "no worker is serving yet"}
    if stalled:
        return 503, {"status": "stalled", "reason": f"worker {stalled[0]} has not turned its loop for more than "
                     f"{stall_seconds:g} s (server.probe_stall_seconds)", "workers": workers}
    if path == "/healthz":
        return 200, {"status": "ok", "workers": workers}
    ready = all(r for _, _, r in beats)
    return (200 if ready else 503), {"ready": ready, "workers": workers}


class Responder:
    def __init__(self, directory: Path, stall_seconds: float) -> None:
        self.directory = directory
        self.stall_seconds = stall_seconds
        self.open: dict[asyncio.StreamWriter, None] = {}  # oldest first

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.open) >= MAX_CONNECTIONS:  # the oldest goes, not the newest: a probe takes
            next(iter(self.open)).close()  # milliseconds, so a flood of idle ones cannot keep it out
        self.open[writer] = None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_SECONDS)
            writer.write(self.answer(head))
            await asyncio.wait_for(writer.drain(), READ_SECONDS)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass
        finally:
            self.open.pop(writer, None)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def answer(self, head: bytes) -> bytes:
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        method, path = (parts[0], parts[1].split(b"?", 1)[0].decode("latin-1")) if len(parts) == 3 else (b"", "")
        body: dict[str, object]
        if method not in (b"GET", b"HEAD"):
            status, body = 405, {"reason": "the probe port answers GET and HEAD only"}
        elif path not in PATHS:
            status, body = 404, {"reason": f"the probe port serves {' and '.join(PATHS)} only"}
        else:
            status, body = verdict(path, read_beats(self.directory), self.stall_seconds)
        data = json.dumps(body).encode()
        reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}[status]
        return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                f"Connection: close\r\n\r\n").encode() + (b"" if method == b"HEAD" else data)


async def serve(host: str, port: int, directory: Path, stall_seconds: float) -> None:
    responder = Responder(directory, stall_seconds)
    server = await asyncio.start_server(responder.handle, host, port, limit=MAX_HEAD, reuse_address=True)
    parent = os.getppid()
    async with server:
        while os.getppid() == parent:  # the server that started this one is gone: so is this
            await asyncio.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--heartbeats", type=Path, required=True)
    parser.add_argument("--stall-seconds", type=float, required=True)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.heartbeats, args.stall_seconds))


if __name__ == "__main__":
    main()
