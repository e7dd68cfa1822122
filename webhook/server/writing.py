"""Writing answers from the poller without blocking: what the client does not take at once waits
here (never in a thread or a slot) until it does, or until ``overload.client_timeout_seconds``
pass; past ``overload.max_unsent_bytes`` of unsent answers in all, the connection whose answer
waited longest is closed, so clients that never read cannot grow the server's memory."""

from __future__ import annotations

import logging
import selectors
import ssl
import time
from functools import partial
from typing import Any, Protocol

from webhook.server.connection import Conn, ConnectionQueue, peer
from webhook.server.tallies import Counts
from webhook.settings import OverloadSettings

log = logging.getLogger("gpushare.worker")


class Connections(Protocol):
    """What the writer needs of the transport (``webhook.server.transport``)."""

    selector: selectors.BaseSelector

    def close(self, conn: Conn) -> None: ...

    def evict(self, conn: Conn, why: str) -> None: ...

    def unregister(self, conn: Conn) -> None: ...

    def resume(self, conn: Conn, keep: bool) -> None: ...


class Writer:
    """The answers of one transport that their clients have not taken yet."""

    def __init__(self, transport: Connections, limits: OverloadSettings, counts: Counts) -> None:
        self._transport = transport
        self._limits = limits
        self._counts = counts
        self.writing = ConnectionQueue()  # an answer not yet taken by the client, oldest first
        self._unsent = 0  # bytes of those answers

    def answer(self, conn: Conn, answer: bytes, keep: bool) -> None:
        """Write an answer to a connection in no queue, then keep it alive or close it."""
        transport = self._transport
        if not answer:  # nothing to send: the client went away or sent no request
            transport.close(conn)
            return
        conn.pending, conn.keep = memoryview(answer), keep
        try:
            done = self._send(conn)
        except OSError as exc:
            self._gone(conn, exc)
            return
        if done:
            transport.resume(conn, keep)
            return
        now = time.monotonic()
        conn.timeout = now + conn.client_timeout
        self.writing.append(conn, now)
        self._unsent += len(conn.pending or b"")
        transport.selector.register(conn.sock, self._events(conn), partial(self._on_writable, conn))
        self._evict_unread()

    @staticmethod
    def _send(conn: Conn) -> bool:
        """Send what is pending without blocking; True once it is all sent (OSError: the client is gone)."""
        pending = conn.pending
        assert pending is not None
        sent = 0
        try:
            while sent < len(pending):
                # TLS: after a want-write the same bytes must be offered again, so nothing is
                # counted as sent until send returns.
                sent += conn.sock.send(pending[sent:])
        except ssl.SSLWantReadError:
            conn.want_read = True
        except (ssl.SSLWantWriteError, BlockingIOError):
            conn.want_read = False
        conn.pending = pending[sent:] if sent < len(pending) else None
        return conn.pending is None

    @staticmethod
    def _events(conn: Conn) -> int:
        return selectors.EVENT_READ if conn.want_read else selectors.EVENT_WRITE

    def _on_writable(self, conn: Conn, _fileobj: Any) -> None:
        before = len(conn.pending or b"")
        gone: OSError | None = None
        try:
            done = self._send(conn)
        except OSError as exc:
            done, gone = True, exc
        self._unsent -= before - len(conn.pending or b"")
        if not done:
            self._transport.selector.modify(conn.sock, self._events(conn), partial(self._on_writable, conn))
            return
        self._transport.unregister(conn)
        self.writing.remove(conn)
        if gone is not None:
            self._unsent -= len(conn.pending or b"")
            conn.pending = None
            self._gone(conn, gone)
        else:
            self._transport.resume(conn, conn.keep)

    def _gone(self, conn: Conn, exc: OSError) -> None:
        """The client closed or reset the connection before taking its answer: one line, no traceback."""
        log.info("client %s went away before taking its answer: %s", peer(conn.client),
                 exc.strerror or type(exc).__name__)
        self._transport.close(conn)

    def _drop(self, conn: Conn) -> None:
        """Forget the unsent answer of a connection taken out of ``writing``."""
        self._unsent -= len(conn.pending or b"")
        conn.pending = None

    def _evict_unread(self) -> None:
        """Past overload.max_unsent_bytes, close the connections whose answers waited longest: a
        client that does not read loses its own connection."""
        while self._unsent > self._limits.max_unsent_bytes and len(self.writing) > 1:
            conn = self.writing.popleft()
            self._drop(conn)
            self._transport.evict(conn, "unread")

    def expire(self, now: float) -> None:
        """Close the connections that did not take their answers in time."""
        while self.writing.expired(now):
            conn = self.writing.popleft()
            self._drop(conn)
            self._transport.close(conn)
            self._counts.client_timeout("answer")
            log.info("closing a client connection from %s: it did not take its answer within %g s "
                     "(overload.client_timeout_seconds)", peer(conn.client), conn.client_timeout)
