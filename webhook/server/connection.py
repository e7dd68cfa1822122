"""One client connection as the poller keeps it, the queues it waits in, what the transport
hands its complete requests to (``Admission``), and the answers the transport writes itself."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from typing import Any, Protocol

from werkzeug.exceptions import RequestTimeout

from webhook.http.routing import Work
from webhook.server import door

STAGES = {"handshake": "TLS handshake", "headers": "request headers", "body": "request body"}
_REASONS = {400: "Bad Request", 408: "Request Timeout", 413: "Content Too Large", 414: "URI Too Long",
            417: "Expectation Failed", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
            501: "Not Implemented", 503: "Service Unavailable"}


class ClientTimeout(RequestTimeout):
    """The client did not send its request in time (HTTP 408)."""

    def __init__(self, stage: str, seconds: float, setting: str = "client_timeout_seconds") -> None:
        super().__init__(f"the {STAGES.get(stage, stage)} did not arrive within {seconds:g} s "
                         f"(overload.{setting}); send the whole request at once")
        self.stage = stage


def http_json(status: int, payload: Any, *, close: bool) -> bytes:
    """A complete HTTP/1.1 response with a JSON body, as bytes."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: {'close' if close else 'keep-alive'}\r\n\r\n")
    return head.encode("ascii") + body


class Conn:
    """One client connection: its socket, what the poller has read of the next request, the
    request while it waits or is evaluated, an answer not yet taken, and its deadlines."""

    __slots__ = (
        "buf",
        "client",
        "client_timeout",
        "data",
        "deadline",
        "fresh",
        "head",
        "keep",
        "must_close",
        "pending",
        "queued_at",
        "req",
        "server",
        "size",
        "sock",
        "stage",
        "timeout",
        "want_read",
        "work",
        "writer",
    )

    def __init__(self, sock: socket.socket, client: Any, server: Any, client_timeout: float) -> None:
        self.sock = sock
        self.client = client
        self.server = server
        self.buf = bytearray()  # what the poller has read of the next request
        self.stage = "handshake"
        self.fresh = True  # no request yet (its deadline: overload.new_connection_seconds)
        self.timeout = 0.0  # poller deadline: handshake + first request, a request, keep-alive, an answer
        self.deadline = 0.0  # a reading thread's deadline for what the poller did not read
        self.queued_at = 0.0
        self.data = b""  # the complete request (and any read ahead), as read
        self.size: int | None = None  # bytes of the first request in ``data``, when its framing says
        self.head: door.RequestHead | None = None  # the request's head, as the poller read it
        self.req: Any = None  # the request parsed by a reading thread, its body in memory
        self.work = Work.PROBE
        self.client_timeout = client_timeout
        self.writer: Any = sock  # where gunicorn's response writes: a capture while evaluating
        self.pending: memoryview | None = None  # what the poller has still to write of an answer
        self.want_read = False  # the TLS write needs to read first (a TLS 1.3 key update)
        self.keep = False  # whether the connection stays open once ``pending`` is written
        self.must_close = False  # what follows the request cannot be read (a body cut at the limit)

    def timed_out(self) -> ClientTimeout:
        return ClientTimeout(self.stage, self.client_timeout)


class ConnectionQueue:
    """Idle or reading connections, oldest first, with O(1) removal (``deque.remove`` compares
    against every entry: about 30 µs per request at 900 open connections, in the poller)."""

    def __init__(self) -> None:
        self._conns: dict[Conn, float] = {}  # insertion-ordered, with when each was appended

    def append(self, conn: Conn, at: float = 0.0) -> None:
        self._conns[conn] = at

    def remove(self, conn: Conn) -> None:
        del self._conns[conn]

    def discard(self, conn: Conn) -> None:
        self._conns.pop(conn, None)

    def popleft(self) -> Conn:
        conn = next(iter(self._conns))
        del self._conns[conn]
        return conn

    def oldest(self) -> Conn | None:
        return next(iter(self._conns), None)

    def oldest_since(self) -> float:
        """When the oldest connection was appended (its ``at``); the queue must not be empty."""
        return next(iter(self._conns.values()))

    def expired(self, now: float) -> bool:
        """Whether the oldest connection's ``timeout`` has passed (False when empty)."""
        oldest = self.oldest()
        return oldest is not None and oldest.timeout <= now

    def __contains__(self, conn: Conn) -> bool:
        return conn in self._conns

    def __iter__(self) -> Iterator[Conn]:
        return iter(list(self._conns))

    def __len__(self) -> int:
        return len(self._conns)


class Admission(Protocol):
    """What the transport hands complete requests to (the worker)."""

    def door_answer(self, head: door.RequestHead, now: float) -> bytes | None:
        """The prepared refusal of a complete plain request, or None to let it in."""

    def refused(self, head: door.RequestHead) -> None:
        """The door's refusal of ``head`` was written."""

    def dispatch(self, conn: Conn, reading: door.Reading, *, judged: bool) -> None:
        """A request is all here (or a thread must read on, or it is refused unread); the
        connection is in no queue and not registered. ``judged``: the door has seen it."""


def close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


def peer(addr: Any) -> str:
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
