"""Raw HTTP/1.1 over TLS against the real server: what an HTTP library will not do (trickle,
pipeline, stop reading), and a review that costs seconds to evaluate."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from tests.support.helpers import (
    RunningServer,
    admission_review,
    costly_pod,
    gpushare_server,
    load_json,
    many_nodes_snapshot,
    wait_until,
)
from webhook.settings import OverloadSettings


def review_bytes() -> bytes:
    return json.dumps(admission_review(load_json("pod-realistic.json"))).encode()


def request(body: bytes, path: str = "/validate", extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def tls(server, stack: ExitStack | None = None, timeout: float = 15) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=server.ca)
    port = int(server.url.rsplit(":", 1)[1])
    sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=timeout),
                               server_hostname="localhost")
    if stack is not None:
        stack.enter_context(sock)
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed the connection (recv sees EOF or a reset)."""
    try:
        return sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True


# A review that costs seconds to evaluate (GC001 reads every node once per affinity term) and
# is over overload.inline_max_bytes, so a thread evaluates it in the only evaluation slot.
COSTLY_NODES, COSTLY_TERMS = 2000, 4000
# GC001 stops a pod like that at capacity.max_work ("too costly to evaluate"); these servers lift
# the cap so that it costs its full price.
UNCAPPED = {"GPUSHARE_CAPACITY__MAX_WORK": str(10**12)}
# The costly review (about 360 KB) kept in the small reviews' lane: the tests of one_slot_server are
# about that lane's one slot (tests/test_lanes.py has the large reviews' lane).
ONE_LANE = {"GPUSHARE_OVERLOAD__LARGE_BODY_BYTES": str(4 * 1024 * 1024)}


# A costly review small enough for the poller to evaluate itself (under overload.inline_max_bytes).
SMALL_COSTLY_TERMS = 700


def small_costly_review(tag: str) -> bytes:
    body = json.dumps(admission_review(costly_pod(tag, SMALL_COSTLY_TERMS))).encode()
    assert len(body) <= OverloadSettings().inline_max_bytes
    return body


@contextmanager
def one_slot_server(tmp_path, env: dict[str, str] | None = None, nodes: int = COSTLY_NODES,
                    worker: str = "webhook") -> Iterator[RunningServer]:
    snapshot = many_nodes_snapshot(tmp_path / "cluster.json", nodes)
    env = {"GPUSHARE_OVERLOAD__APP_CONCURRENCY": "1", **ONE_LANE, **UNCAPPED, **(env or {})}
    with gpushare_server(tmp_path, "--snapshot", str(snapshot), worker=worker, env=env) as server:
        yield server


def start_costly(server, stack: ExitStack, tag: str) -> ssl.SSLSocket:
    """Send the costly review; return once it holds the evaluation slot. (Its answer may take a
    while on a busy host: the socket waits up to two minutes.)"""
    sock = tls(server, stack, timeout=120)
    body = json.dumps(admission_review(costly_pod(tag, COSTLY_TERMS))).encode()
    sock.sendall(request(body, path="/validate?timeout=30s"))
    wait_until(lambda: metric(server, "gpushare_in_flight_requests") >= 1, interval=0.01,
               what="the costly review evaluating")
    return sock


def metric(server, name: str) -> float:
    text = server.session().get(server.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))
