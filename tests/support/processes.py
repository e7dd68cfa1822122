"""Processes for benchmarks and tests: start a server and wait (with a deadline) until it answers
over TLS, read their CPU and memory, and compile the project's bytecode before starting many."""

from __future__ import annotations

import compileall
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def host_speed() -> float:
    """ns per iteration of an empty Python loop: how busy the host is (about 15 here when idle)."""
    started = time.perf_counter()
    for _ in range(1_000_000):
        pass
    return (time.perf_counter() - started) * 1000


ROOT = Path(__file__).resolve().parents[2]


def compile_bytecode() -> bool:
    """The project's modules compiled to bytecode, as `pip install` leaves them (False: one did
    not compile, and the error is printed): with PYTHONDONTWRITEBYTECODE set (common in
    containers, and in the project's image) an editable install would otherwise compile every
    module again in each process it starts."""
    return all([compileall.compile_dir(ROOT / package, quiet=1)  # a list: every package, whatever fails
                for package in ("policies", "webhook", "certs")])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_on_loopback(tmp: str | Path, *, pin: bool) -> tuple[int, Path, list[str]]:
    """A free port, the CA file and the ``gpushare serve`` command of a benchmark server, with
    fresh certificates under ``tmp``; pinned to CPU 0 when the load client gets CPU 1."""
    from certs.issue import ensure_serving_certs

    certs = Path(tmp, "certs")
    ensure_serving_certs(certs, ["localhost", "127.0.0.1"])
    port = free_port()
    gpushare = Path(sys.executable).parent / "gpushare"
    command = [*(["taskset", "-c", "0"] if pin else []), str(gpushare), "serve", "--host", "127.0.0.1",
               "--port", str(port), "--cert-dir", str(certs)]
    return port, certs / "ca.crt", command


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
def https_server(command: list[str], ca_file: Path, port: int, log: Path, timeout: float = 60, *,
                 ready_path: str = "/healthz", cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` (a server on ``port`` over TLS), output to ``log``, until it answers
    ``ready_path`` with 200 and a certificate that ``ca_file`` verifies; stop it afterwards.

    The one way benchmarks and tests start a server: it polls with a deadline (never a fixed
    sleep), fails at once with the server's output if it exits, and always reaps it."""
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                   env={**os.environ, **env} if env is not None else None)
    try:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}:\n{log.read_text(errors='replace')}")
            if ca_file.exists():
                try:
                    context = ssl.create_default_context(cafile=str(ca_file))
                    url = f"https://localhost:{port}{ready_path}"
                    with urllib.request.urlopen(url, context=context, timeout=2) as answer:
                        if answer.status == 200:
                            break
                except OSError as exc:  # not listening yet, or not ready (HTTPError is an OSError)
                    last_error = exc
            if time.monotonic() > deadline:
                raise TimeoutError(f"{command[0]} did not answer {ready_path} within {timeout}s "
                                   f"(last error: {last_error!r})")
            time.sleep(0.02)  # poll pacing under a deadline, not synchronisation
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def answer_status(sock: ssl.SSLSocket) -> int:
    """Read one HTTP answer from a raw TLS socket (head, then its Content-Length of body); its status."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next((int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length")), 0)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    return int(lines[0].split()[1])
