"""Open-loop HTTPS load: requests are sent on a fixed schedule whether or not earlier ones were
answered (as the API server does when pods keep coming), from asyncio client processes with
a pool of keep-alive connections. Latency is measured from each request's scheduled time,
so time spent waiting for a free connection counts too (no coordinated omission).

Also a closed-loop mode (every connection sends its next request as soon as the previous is
answered) to find the saturation rate with the same client.

Clients with the same semantics: ``bench/openloop.c`` (built here with the system C compiler
and OpenSSL; one thread per connection), ``bench/netpoll.c`` (the same in one thread waiting on
every connection with epoll, as the API server's Go runtime does) and an asyncio one in this file. On a
two-core machine the Python client tops out below twice the server's rate, so the C one is
used when it can be built.
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ANSWER_TIMEOUT = 10.0  # a typical webhook timeout: a request not answered by then is lost
START_DELAY = 0.1  # the C clients start their clock this long after they say "ready"


@dataclass
class Outcome:
    latencies: list[float] = field(default_factory=list)  # seconds, answered requests only
    statuses: dict[int, int] = field(default_factory=dict)
    unanswered: int = 0
    scheduled: int = 0

    def merge(self, other: Outcome) -> None:
        self.latencies.extend(other.latencies)
        for status, count in other.statuses.items():
            self.statuses[status] = self.statuses.get(status, 0) + count
        self.unanswered += other.unanswered
        self.scheduled += other.scheduled

    @property
    def answered(self) -> int:
        return len(self.latencies)

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def request_bytes(path: str, body: bytes) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def exchange(self, payload: bytes) -> int:
        self.writer.write(payload)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        close = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            lowered = name.strip().lower()
            if lowered == b"content-length":
                length = int(value)
            elif lowered == b"connection" and value.strip().lower() == b"close":
                close = True
        await self.reader.readexactly(length)
        if close:
            raise ConnectionResetError("server closed the connection")
        return status


async def _connect(host: str, port: int, context: ssl.SSLContext) -> _Connection:
    reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname="localhost")
    return _Connection(reader, writer)


async def _open_loop(host: str, port: int, ca: str, payload: bytes, rate: float, seconds: float,
                     max_connections: int, warm: int) -> Outcome:
    context = ssl.create_default_context(cafile=ca)
    idle: list[_Connection] = [await _connect(host, port, context) for _ in range(warm)]
    opened = len(idle)
    available = asyncio.Condition()
    outcome = Outcome()

    async def one(scheduled: float) -> None:
        nonlocal opened
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(ANSWER_TIMEOUT - (time.monotonic() - scheduled)):
                async with available:
                    while not idle and opened >= max_connections:
                        await available.wait()
                    if idle:
                        conn = idle.pop()
                    else:
                        opened += 1
                if conn is None:
                    conn = await _connect(host, port, context)
                status = await conn.exchange(payload)
            outcome.latencies.append(time.monotonic() - scheduled)
            outcome.statuses[status] = outcome.statuses.get(status, 0) + 1
            async with available:
                idle.append(conn)
                available.notify()
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
            outcome.unanswered += 1
            if conn is not None:
                conn.writer.close()
            async with available:
                opened -= 1
                available.notify()

    start = time.monotonic() + 0.2
    total = int(rate * seconds)
    tasks = []
    for i in range(total):
        scheduled = start + i / rate
        delay = scheduled - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # the schedule itself: open-loop pacing, not synchronisation
        tasks.append(asyncio.create_task(one(scheduled)))
    outcome.scheduled = total
    await asyncio.gather(*tasks)
    for conn in idle:
        conn.writer.close()
    return outcome


async def _closed_loop(host: str, port: int, ca: str, payload: bytes, connections: int,
                       seconds: float) -> Outcome:
    context = ssl.create_default_context(cafile=ca)
    outcome = Outcome()
    deadline = time.monotonic() + seconds

    async def client() -> None:
        conn = await _connect(host, port, context)
        while time.monotonic() < deadline:
            sent = time.monotonic()
            status = await conn.exchange(payload)
            outcome.latencies.append(time.monotonic() - sent)
            outcome.statuses[status] = outcome.statuses.get(status, 0) + 1
            outcome.scheduled += 1
        conn.writer.close()

    await asyncio.gather(*(client() for _ in range(connections)))
    return outcome


def _process(queue: multiprocessing.Queue, mode: str, args: tuple, cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    runner = _open_loop if mode == "open" else _closed_loop
    try:  # uvloop roughly doubles what one client process can send; the server is never run on it
        import uvloop

        outcome = uvloop.run(runner(*args))
    except ImportError:
        outcome = asyncio.run(runner(*args))
    queue.put(outcome)


def run(mode: str, processes: int, host: str, port: int, ca: str, payload: bytes, *, rate: float = 0,
        seconds: float, connections: int, cpu: int | None = None) -> Outcome:
    """Open loop: ``rate`` requests/s in total for ``seconds``, at most ``connections`` connections.
    Closed loop: ``connections`` connections sending back to back for ``seconds``."""
    queue: multiprocessing.Queue = multiprocessing.Queue()
    per_conn = max(1, connections // processes)
    procs = []
    for _ in range(processes):
        if mode == "open":
            args = (host, port, ca, payload, rate / processes, seconds, per_conn, min(per_conn, 16))
        else:
            args = (host, port, ca, payload, per_conn, seconds)
        procs.append(multiprocessing.Process(target=_process, args=(queue, mode, args, cpu)))
    for proc in procs:
        proc.start()
    total = Outcome()
    for _ in procs:
        total.merge(queue.get(timeout=seconds + ANSWER_TIMEOUT + 60))
    for proc in procs:
        proc.join()
    return total


@dataclass
class Summary:
    """What a load run measured, from either client."""

    scheduled: int
    answered: int
    unanswered: int
    statuses: dict[int, int]
    p50: float
    p99: float
    max: float
    tool: str
    dials: int = 0  # connections the client opened during the run (C client, netpoll)


def summarize(outcome: Outcome) -> Summary:
    return Summary(outcome.scheduled, outcome.answered, outcome.unanswered, dict(outcome.statuses),
                   outcome.percentile(0.5), outcome.percentile(0.99), max(outcome.latencies, default=float("nan")),
                   "python")


def native_client(kind: str = "threads") -> Path | None:
    """The C client compiled (cached by its content), or None without a C compiler and OpenSSL
    headers: ``threads`` is bench/openloop.c (a blocking thread per connection), ``netpoll`` is
    bench/netpoll.c (one thread waiting on every connection with epoll, as Go's runtime does for
    kube-apiserver's webhook calls)."""
    source = Path(__file__).with_name({"threads": "openloop.c", "netpoll": "netpoll.c"}[kind])
    digest = hashlib.sha256(source.read_bytes() + source.with_name("loadclient.h").read_bytes()).hexdigest()[:12]
    binary = Path(tempfile.gettempdir()) / f"gpushare-{source.stem}-{digest}"
    if binary.exists():
        return binary
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    partial = binary.with_suffix(f".{os.getpid()}")
    built = subprocess.run([compiler, "-O2", "-pthread", "-o", str(partial), str(source), "-lssl", "-lcrypto"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        print(f"(could not build {source.name}, using the Python client: {built.stderr.strip()[:200]})")
        return None
    partial.rename(binary)
    return binary


def run_native(binary: Path, mode: str, host: str, port: int, ca: str, payload: bytes, *, rate: float = 0,
               seconds: float, connections: int, warm: int, cpu: int | None = None,
               on_ready: Callable[[], None] | None = None, max_idle: int = 0) -> Summary:
    """One run of the C client; same arguments as ``run``, plus how many connections to open first.
    ``on_ready`` is called once those are open, just before the load starts. ``max_idle`` (netpoll
    only): keep at most this many answered connections open and dial for the rest, as the API
    server's Go client does (0: keep them all)."""
    with tempfile.NamedTemporaryFile(suffix=".http") as request:
        request.write(payload)
        request.flush()
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        command = [*pin, str(binary), mode, host, str(port), ca, request.name, f"{rate:.3f}", f"{seconds:g}",
                   str(connections), f"{ANSWER_TIMEOUT:g}", str(warm), *([str(max_idle)] if max_idle else [])]
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as client:
            assert client.stdout is not None
            lines = []
            for line in client.stdout:
                if line.strip() == "ready":
                    if on_ready is not None:
                        on_ready()
                else:
                    lines.append(line)
            client.wait(timeout=seconds + ANSWER_TIMEOUT + 120)
            if client.returncode != 0:
                raise subprocess.CalledProcessError(client.returncode, command, "".join(lines),
                                                    client.stderr.read() if client.stderr else "")
        out = "".join(lines)
    fields = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    counts = fields["scheduled"]
    statuses = {int(code): int(n) for code, n in (line.split()[1:] for line in out.splitlines()
                                                   if line.startswith("status "))}
    p50, p99, worst = (float(x) for x in fields.get("latency", ["nan", "nan", "nan"]))
    return Summary(int(counts[0]), int(counts[2]), int(counts[4]), statuses, p50, p99, worst,
                   f"C client, {binary.name.split('-')[1]}", int(fields.get("dials", ["0"])[0]))
