"""Benchmark: what a 503 refusal costs the real server, against the plain stack's floor.

    python bench/refusal_floor.py [--seconds 5] [--connections 32,900] [--rounds 2]

Under sustained overload the server refuses about as many reviews as it answers, so the CPU
one refusal takes decides its goodput (bench/overload.py): with a review at about 400 µs, each
10 µs per refusal costs about 2.5 % of the saturation rate at twice saturation. This measures
that cost two ways, with the same C client (bench/netpoll.c, closed loop: every connection
sends its next 4 KB review as soon as the last is answered; server on CPU 0, client on CPU 1):

- the plain door: Python's ``selectors`` and ``ssl`` and nothing of this project, one process
  that reads each request with one ``recv`` and writes a prepared 503 with one ``send``, the
  least any Python server on the standard library's TLS does to refuse a request;
- the real ``gpushare serve`` with ``overload.max_waiting_requests`` = 1, so that nearly every
  review finds one already waiting and is refused at the door; the few it evaluates are
  charged at the CPU per review of a saturation run of the same server (32 connections, the
  default settings), and the rest of its CPU is divided among the refusals.

Prints, per connection count, the refusals per second and the server CPU per refusal. The
connection count matters: every connection keeps its own TLS state and kernel socket, and
with hundreds of them each read and write works on memory that is no longer in the cache.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import openloop  # noqa: E402
from bench.admission import realistic_review_body  # noqa: E402
from tests.support.processes import cpu_seconds, free_port, https_server, serve_on_loopback  # noqa: E402

ANSWER_BODY = (b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":503,"reason":"ServiceUnavailable",'
               b'"message":"overloaded: this review was refused without evaluation"}')
ANSWER = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(ANSWER_BODY)) + ANSWER_BODY


def plain_door(port: int, certs: Path) -> None:
    """The floor: accept, handshake, then one ``recv`` and one ``send`` per request (no parsing:
    the client sends one whole request and waits for its answer)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    context.num_tickets = 0  # as the real server (no resumption by the API server's client)
    poller = selectors.DefaultSelector()
    listener = socket.create_server(("127.0.0.1", port), backlog=1024)
    listener.setblocking(False)

    def readable(conn: ssl.SSLSocket) -> None:
        try:
            if conn.recv(65536):
                conn.send(ANSWER)
                return
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:
            pass
        poller.unregister(conn)  # the client closed or failed
        conn.close()

    def handshake(conn: ssl.SSLSocket) -> None:
        try:
            conn.do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:
            poller.unregister(conn)
            conn.close()
            return
        poller.modify(conn, selectors.EVENT_READ, readable)

    def accept(_: socket.socket) -> None:
        while True:
            try:
                sock, _addr = listener.accept()
            except BlockingIOError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
            conn = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            poller.register(conn, selectors.EVENT_READ, handshake)

    poller.register(listener, selectors.EVENT_READ, accept)
    print("ready", flush=True)
    while True:
        for key, _ in poller.select():
            key.data(key.fileobj)


def measure(binary: Path, port: int, ca: Path, payload: bytes, pid: int, connections: int,
            seconds: float) -> tuple[float, int, int]:
    """One closed-loop run: server CPU seconds from when the connections are open, 200s, 503s."""
    mark: dict[str, float] = {}
    summary = openloop.run_native(binary, "closed", "127.0.0.1", port, str(ca), payload, seconds=seconds,
                                  connections=connections, warm=connections, cpu=1,
                                  on_ready=lambda: mark.update(cpu=cpu_seconds(pid)))
    return cpu_seconds(pid) - mark["cpu"], summary.statuses.get(200, 0), summary.statuses.get(503, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", default="32,900")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--plain-door", nargs=2, metavar=("PORT", "CERTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_door:
        plain_door(int(args.plain_door[0]), Path(args.plain_door[1]))
        return
    binary = openloop.native_client("netpoll")
    if binary is None:
        raise SystemExit("this benchmark needs the C client (cc and OpenSSL headers)")
    counts = [int(c) for c in args.connections.split(",")]
    payload = openloop.request_bytes("/validate?timeout=5s", realistic_review_body())
    with tempfile.TemporaryDirectory() as tmp:
        port, ca, command = serve_on_loopback(tmp, pin=True)
        certs = ca.parent
        # The real server's CPU per evaluated review, at saturation with its default settings.
        with https_server(command, ca, port, Path(tmp, "saturation.log")) as server:
            measure(binary, port, ca, payload, server.pid, 8, 1)
            cpu, reviews, _ = measure(binary, port, ca, payload, server.pid, 32, args.seconds)
        per_review = cpu / max(reviews, 1)
        print(f"real server at saturation (32 connections, {args.seconds:g} s): {reviews / args.seconds:.0f} "
              f"reviews/s, {per_review * 1e6:.0f} µs CPU per review")
        rows: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
        door_port = free_port()
        door = subprocess.Popen(["taskset", "-c", "0", sys.executable, __file__, "--plain-door", str(door_port),
                                 str(certs)], stdout=subprocess.PIPE, text=True)
        refusing = {**os.environ, "GPUSHARE_OVERLOAD__MAX_WAITING_REQUESTS": "1"}
        try:
            assert door.stdout is not None
            if door.stdout.readline().strip() != "ready":
                raise SystemExit("the plain door did not start")
            with https_server(command, ca, port, Path(tmp, "refusing.log"), env=refusing) as server:
                for _ in range(args.rounds):
                    for count in counts:
                        cpu, _, refused = measure(binary, door_port, ca, payload, door.pid, count, args.seconds)
                        rows.setdefault(("plain door", count), []).append((refused / args.seconds, 0.0, cpu / refused))
                        cpu, reviews, refused = measure(binary, port, ca, payload, server.pid, count, args.seconds)
                        per_refusal = (cpu - reviews * per_review) / max(refused, 1)
                        rows.setdefault(("gpushare serve", count), []).append(
                            (refused / args.seconds, reviews / args.seconds, per_refusal))
        finally:
            door.terminate()
            door.wait(timeout=20)
    rounds = f"{args.rounds} round{'s' if args.rounds != 1 else ''}"
    print(f"\nclosed loop, {args.seconds:g} s per run, {rounds} (server on CPU 0, client on CPU 1):")
    print(f"  {'server':<16}{'connections':>12}{'refusals/s':>20}{'reviews/s':>14}{'µs CPU per refusal':>24}")
    for (name, count), runs in rows.items():
        rates = ", ".join(f"{rate:,.0f}" for rate, _, _ in runs)
        reviews = ", ".join(f"{rate:,.0f}" for _, rate, _ in runs)
        costs = ", ".join(f"{cost * 1e6:.1f}" for _, _, cost in runs)
        print(f"  {name:<16}{count:>12}{rates:>20}{reviews:>14}{costs:>24}")


if __name__ == "__main__":
    main()
