"""Keep-alive HTTPS load for benchmarks: wrk when installed (C, cheap on the client side),
else Python processes with one persistent connection per thread."""

from __future__ import annotations

import http.client
import multiprocessing
import os
import re
import shutil
import ssl
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.go_json import api_server_json


@dataclass
class LoadResult:
    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    tool: str

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


_WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("BENCH_BODY"), "rb")
wrk.body = f:read("*all")
f:close()
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %d %d %d %d %d\\n", summary.requests,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status +
    summary.errors.timeout, summary.duration, latency:percentile(50), latency:percentile(99), latency.max))
end
"""


def _wrk(url: str, body: bytes, connections: int, seconds: float, cpu: str | None) -> LoadResult:
    with tempfile.TemporaryDirectory() as tmp:
        script, body_file = Path(tmp, "post.lua"), Path(tmp, "body.json")
        script.write_text(_WRK_SCRIPT)
        body_file.write_bytes(body)
        threads = min(connections, 2)
        pin = ["taskset", "-c", cpu] if cpu else []
        out = subprocess.run([*pin, "wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds:.0f}s",
                              "-s", str(script), "--timeout", "10s", url],
                             capture_output=True, text=True, env={**os.environ, "BENCH_BODY": str(body_file)},
                             timeout=seconds + 60, check=True).stdout
    match = re.search(r"RESULT (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)", out)
    if match is None:
        raise RuntimeError(f"wrk printed no result:\n{out}")
    reqs, errors, micros, p50, p99, peak = (int(g) for g in match.groups())
    return LoadResult(reqs, errors, micros / 1e6, p50 / 1000, p99 / 1000, peak / 1000, "wrk")


def _client_worker(host: str, port: int, path: str, ca: str, body: bytes, threads: int, seconds: float,
                   queue: multiprocessing.Queue) -> None:
    context = ssl.create_default_context(cafile=ca)
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def run() -> None:
        nonlocal errors
        conn = http.client.HTTPSConnection(host, port, context=context, timeout=10)
        mine: list[float] = []
        while time.monotonic() < deadline:
            start = time.perf_counter()
            try:
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                reply = conn.getresponse()
                reply.read()
                ok = reply.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPSConnection(host, port, context=context, timeout=10)
            if ok:
                mine.append(time.perf_counter() - start)
            else:
                with lock:
                    errors += 1
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    queue.put((latencies, errors))


def _python(url: str, ca: str, body: bytes, connections: int, seconds: float) -> LoadResult:
    match = re.match(r"https://([^:/]+):(\d+)(/.*)", url)
    assert match, url
    host, port, path = match[1], int(match[2]), match[3]
    processes = min(connections, os.cpu_count() or 1)
    per = [connections // processes + (1 if i < connections % processes else 0) for i in range(processes)]
    queue: multiprocessing.Queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_client_worker, args=(host, port, path, ca, body, n, seconds, queue))
             for n in per]
    start = time.monotonic()
    for p in procs:
        p.start()
    results = [queue.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    elapsed = time.monotonic() - start
    latencies = sorted(x for lat, _ in results for x in lat)
    errors = sum(e for _, e in results)
    if not latencies:
        return LoadResult(0, errors, elapsed, 0, 0, 0, "python")
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return LoadResult(len(latencies), errors, elapsed, statistics.median(latencies) * 1000, p99 * 1000,
                      latencies[-1] * 1000, "python")


def drive(url: str, ca: str, payload: dict[str, Any] | bytes, connections: int, seconds: float, tool: str = "auto",
          cpu: str | None = None) -> LoadResult:
    """POST ``payload`` (a body, or a value to encode as the API server does) to ``url`` over
    keep-alive TLS from ``connections`` connections."""
    body = payload if isinstance(payload, bytes) else api_server_json(payload)
    if tool == "wrk" or (tool == "auto" and shutil.which("wrk")):
        # wrk verifies nothing; the CA is checked once by the caller's health probe.
        return _wrk(url, body, connections, seconds, cpu)
    return _python(url, ca, body, connections, seconds)
