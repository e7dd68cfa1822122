"""Benchmark: the real `gpushare serve` under hostile clients, on loopback only, bounded.

    python bench/attack.py [--seconds 30] [--attacks none,slow-headers,slow-body,slow-handshake,idle-tls,nested-yaml]

For each attack, run for ``seconds`` (bounded in connections and rate):
- slow-headers: 200 TLS connections trickling request headers, a byte per second each;
- slow-body: 200 TLS connections sending complete headers, then the body a byte per second;
- slow-handshake: 200 TCP connections trickling a TLS ClientHello, a byte per second;
- idle-tls: 1,000 TLS connections that finish the handshake and send nothing;
- nested-yaml: two concurrent 40 KB bodies of nested flow sequences per second to /dry-run.
Closed connections are reopened (at most 100 a second), as an attacker would.
Meanwhile two legitimate clients each send the realistic 4 KB Pod review to /validate every
0.2 s: one on a kept-alive connection, one on a new connection per review. Prints, per attack,
answered (200) / sent and p50/p99/max latency of the legitimate clients, and the server's
peak RSS. Target: >= 99 % answered, p99 < 1 s, RSS < 300 MB under every attack.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import multiprocessing
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.admission import realistic_review_body  # noqa: E402
from bench.overload import PeakRss  # noqa: E402
from bench.processes import free_port, https_server  # noqa: E402
from certs.issue import ensure_serving_certs  # noqa: E402

HOST = "127.0.0.1"
ATTACKS = ("none", "slow-headers", "slow-body", "slow-handshake", "idle-tls", "nested-yaml")
COUNTS = {"slow-headers": 200, "slow-body": 200, "slow-handshake": 200, "idle-tls": 1000}
REOPEN_PER_SECOND = 100


def nested_yaml(size: int = 40 * 1024) -> bytes:
    depth = (size - 4) // 2
    return b"x: " + b"[" * depth + b"]" * depth + b"\n"


class _Pacer:
    """At most REOPEN_PER_SECOND connections opened per second across all slots."""

    def __init__(self) -> None:
        self.next = time.monotonic()

    async def turn(self) -> None:
        now = time.monotonic()
        self.next = max(self.next, now) + 1 / REOPEN_PER_SECOND
        await asyncio.sleep(self.next - now)  # the attack's own rate limit


async def _hold(kind: str, port: int, ca: str, stop: float, opened: list[int], pacer: _Pacer) -> None:
    """One hostile connection slot: open, misbehave until closed, reopen (paced)."""
    context = ssl.create_default_context(cafile=ca)
    while time.monotonic() < stop:
        await pacer.turn()
        writer = None
        try:
            if kind == "slow-handshake":
                reader, writer = await asyncio.open_connection(HOST, port)
                drip = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(200)
            else:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(HOST, port, ssl=context, server_hostname="localhost"), 10)
                if kind == "slow-headers":
                    drip = b"POST /validate HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 4000
                elif kind == "slow-body":
                    writer.write(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 4096\r\n\r\n")
                    drip = b"{" + b" " * 4000
                else:  # idle-tls
                    drip = b""
            opened[0] += 1
            for i in range(10_000):
                if time.monotonic() >= stop:
                    break
                if drip and i < len(drip):
                    writer.write(drip[i:i + 1])
                    await writer.drain()
                try:  # a byte a second; a closed connection ends the wait early
                    if await asyncio.wait_for(reader.read(4096), 1.0) == b"":
                        break
                except TimeoutError:
                    pass
        except (OSError, ssl.SSLError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            if writer is not None:
                writer.close()


async def _attack(kind: str, port: int, ca: str, seconds: float) -> int:
    stop = time.monotonic() + seconds
    opened = [0]
    if kind == "nested-yaml":
        body = nested_yaml()
        head = (f"POST /dry-run HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/yaml\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        context = ssl.create_default_context(cafile=ca)

        async def one() -> None:
            try:
                reader, writer = await asyncio.open_connection(HOST, port, ssl=context, server_hostname="localhost")
                writer.write(head + body)
                await asyncio.wait_for(reader.read(), 30)
                writer.close()
            except (OSError, ssl.SSLError, TimeoutError):
                pass

        tasks = []
        while time.monotonic() < stop:
            tasks += [asyncio.create_task(one()), asyncio.create_task(one())]
            opened[0] += 2
            await asyncio.sleep(1.0)  # the attack's own rate: two bodies a second
        await asyncio.gather(*tasks)
        return opened[0]
    pacer = _Pacer()
    await asyncio.gather(*(_hold(kind, port, ca, stop, opened, pacer) for _ in range(COUNTS[kind])))
    return opened[0]


def _attacker(kind: str, port: int, ca: str, seconds: float, out: multiprocessing.Queue) -> None:
    out.put(asyncio.run(_attack(kind, port, ca, seconds)))


class Legit:
    """A legitimate client sending one review every 0.2 s, on a kept-alive or a new connection each time."""

    def __init__(self, port: int, ca: str, body: bytes, kept_alive: bool, seconds: float) -> None:
        self.port, self.body, self.kept_alive, self.seconds = port, body, kept_alive, seconds
        self.context = ssl.create_default_context(cafile=ca)
        self.latencies: list[float] = []
        self.sent = 0
        self.failures: dict[str, int] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = None
        start = time.monotonic()
        i = 0
        while True:
            due = start + i * 0.2
            if due >= start + self.seconds:
                break
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the client's own schedule
            i += 1
            self.sent += 1
            began = time.monotonic()
            try:
                if conn is None or not self.kept_alive:
                    conn = http.client.HTTPSConnection(HOST, self.port, context=self.context, timeout=10)
                conn.request("POST", "/validate?timeout=5s", self.body, {"Content-Type": "application/json"})
                reply = conn.getresponse()
                reply.read()
                if reply.status == 200:
                    self.latencies.append(time.monotonic() - began)
                else:
                    self.failures[str(reply.status)] = self.failures.get(str(reply.status), 0) + 1
                if not self.kept_alive or reply.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                self.failures[type(exc).__name__] = self.failures.get(type(exc).__name__, 0) + 1
                if conn is not None:
                    conn.close()
                conn = None


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    args = parser.parse_args()
    body = realistic_review_body()
    gpushare = Path(sys.executable).parent / "gpushare"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp, "certs")
        ensure_serving_certs(certs, ["localhost", "127.0.0.1"])
        ca = certs / "ca.crt"
        port = free_port()
        command = [str(gpushare), "serve", "--host", HOST, "--port", str(port), "--cert-dir", str(certs)]
        with https_server(command, ca, port, Path(tmp, "server.log")) as server:
            for kind in args.attacks.split(","):
                out: multiprocessing.Queue = multiprocessing.Queue()
                attacker = None
                build_up = 0.0
                if kind != "none":
                    attacker = multiprocessing.Process(target=_attacker, args=(kind, port, str(ca), args.seconds, out))
                    attacker.start()
                    build_up = min(3.0, args.seconds / 10)
                    time.sleep(build_up)  # let the attack build up before measuring
                clients = [Legit(port, str(ca), body, kept, args.seconds - build_up) for kept in (True, False)]
                with PeakRss(server.pid) as rss:
                    for client in clients:
                        client.thread.start()
                    for client in clients:
                        client.thread.join()
                    opened = 0
                    if attacker is not None:
                        opened = out.get(timeout=args.seconds + 120)
                        attacker.join()
                lat = [x for c in clients for x in c.latencies]
                sent = sum(c.sent for c in clients)
                failures: dict[str, int] = {}
                for c in clients:
                    for k, v in c.failures.items():
                        failures[k] = failures.get(k, 0) + v
                row = (f"| {kind} | {len(lat)}/{sent} ({100 * len(lat) / max(sent, 1):.1f} %) | "
                       f"{_pct(lat, 0.5) * 1000:.0f} ms | {_pct(lat, 0.99) * 1000:.0f} ms | "
                       f"{max(lat, default=float('nan')) * 1000:.0f} ms | {rss.peak:.0f} MiB | {opened} |"
                       + (f" failures: {failures}" if failures else ""))
                rows.append((kind, len(lat) / max(sent, 1), _pct(lat, 0.99), rss.peak))
                print(row if len(rows) > 1 else "| attack | legitimate answered | p50 | p99 | max | server peak RSS "
                      "| hostile connections opened |\n|---|---|---|---|---|---|---|\n" + row, flush=True)
            alive = server.poll() is None
    met = all(share >= 0.99 and p99 < 1.0 and peak < 300 for _, share, p99, peak in rows)
    print(f"\nserver still running at the end: {alive}")
    print(f"target (>= 99 % answered, p99 < 1 s, RSS < 300 MB under every attack): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
