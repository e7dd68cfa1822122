"""Start a server process for a benchmark and wait (with a deadline) until it answers over TLS."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children(pid: int) -> list[int]:
    """The direct children of a process (a gunicorn master's workers)."""
    listing = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in listing.read_text().split()] if listing.exists() else []


def _family(pid: int) -> list[int]:
    return [pid, *children(pid)]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its direct children (the gunicorn workers)."""
    ticks = 0
    for p in _family(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """Resident memory of a process and its children, from /proc."""
    total = 0
    for p in _family(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


@contextmanager
def https_server(command: list[str], ca_file: Path, port: int, log: Path,
                 timeout: float = 60) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command[0]} exited: {log.read_text(errors='replace')}")
            try:
                if ca_file.exists():
                    context = ssl.create_default_context(cafile=str(ca_file))
                    with urllib.request.urlopen(f"https://localhost:{port}/healthz", context=context, timeout=2):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{command[0]} did not answer within {timeout}s")
            time.sleep(0.05)  # poll pacing under a deadline
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
