"""The poller's sockets: accept, TLS handshake, read each request until it is complete, write
each answer, all without blocking; and room under pressure (slow, idle and unread connections).

What a complete request is and what becomes of it is not decided here: the transport hands
each one to its ``Admission`` (the worker, which asks the scheduler), and for a kept-alive
connection's next request asks it first whether the door refuses it (then the connection
stays registered: no system calls but the read and the answer, which is what keeps refusing
cheap under sustained overload). The transport never names a route.

Slow, idle and unread connections cost a socket and a buffer, never a thread; their limits
(``overload.*``: deadlines per stage, slow and open connections, unsent bytes) and who goes
first when there is no room are in docs/operations.md, "Overload and slow clients".
"""

from __future__ import annotations

import contextlib
import errno
import logging
import selectors
import socket
import ssl
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from webhook.http.errors import error_body
from webhook.server import door
from webhook.server.connection import Admission, ClientTimeout, Conn, ConnectionQueue, close_quietly, http_json, peer
from webhook.server.lingering import Lingering
from webhook.server.tallies import Counts
from webhook.server.writing import Writer
from webhook.settings import OverloadSettings

log = logging.getLogger("gpushare.worker")
STOP_KEEPALIVE_SECONDS = 1.0  # on SIGTERM, kept-alive connections get this long for one last request
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Transport:
    """See the module doc. Used by the poller thread only."""

    def __init__(self, admission: Admission, limits: OverloadSettings, max_body_bytes: int, keepalive: float,
                 tls: Callable[[socket.socket], socket.socket] | None, counts: Counts) -> None:
        self.admission = admission
        self.limits = limits
        self.max_body_bytes = max_body_bytes
        self.selector: selectors.BaseSelector = selectors.DefaultSelector()
        self.listeners: list[socket.socket] = []
        self.keepalive = keepalive
        self.stopping = False
        self.turn_started = 0.0  # when the poller's current turn began (after select)
        self.nr_conns = 0
        self.keepalived = ConnectionQueue()  # idle between requests, oldest first
        self.reading = ConnectionQueue()  # handshaking or part of a request here, oldest first
        self.unrequested = ConnectionQueue()  # handshake done, nothing sent yet, oldest first
        self._tls = tls
        self._counts = counts
        self._accepting = True  # listeners registered (see _pause_accepting)
        self._expired_at = 0.0
        self.lingering = Lingering(self.selector)
        self.writer = Writer(self, limits, counts)

    def listen(self, listeners: list[socket.socket]) -> None:
        self.listeners = listeners
        for listener in listeners:
            listener.setblocking(False)
            self.selector.register(listener, selectors.EVENT_READ, self._accept)

    def select(self, timeout: float) -> list[tuple[selectors.SelectorKey, int]]:
        """Wait for the sockets (at most 0.05 s while accepting is paused: room comes when
        connections age, too)."""
        try:
            events = self.selector.select(timeout if self._accepting else min(timeout, 0.05))
        except OSError as exc:
            if exc.errno != errno.EINTR:
                raise
            events = []
        self.turn_started = time.monotonic()
        return events

    @staticmethod
    def handle(events: list[tuple[selectors.SelectorKey, int]]) -> None:
        for key, _ in events:
            key.data(key.fileobj)

    def after_turn(self, now: float) -> None:
        if not self._accepting:
            self._resume_accepting()
        if now - self._expired_at >= 0.1:  # deadlines are looked at ten times a second
            self._expired_at = now
            self._expire(now)

    def connections(self) -> int:
        """Connections still held in the poller (a draining worker waits for them)."""
        return len(self.keepalived) + len(self.reading) + len(self.unrequested) + len(self.writer.writing)

    def stop(self) -> None:
        """SIGTERM: stop accepting; a kept-alive connection may send one more request for a moment."""
        self.stopping = True
        for listener in self.listeners:
            self._unregister_sock(listener)
        stop = time.monotonic() + STOP_KEEPALIVE_SECONDS
        for conn in self.keepalived:
            conn.timeout = min(conn.timeout, stop)

    def close_all(self) -> None:
        for conn in [*self.keepalived, *self.reading, *self.unrequested, *self.writer.writing]:
            close_quietly(conn.sock)
        for listener in self.listeners:
            close_quietly(listener)

    # -- accepting

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(64):  # a burst of new connections in one wake-up, bounded
            if not self._accepting:
                return
            try:
                client_sock, client_addr = listener.accept()
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                    raise
                return
            self._accepted(listener, client_sock, client_addr)

    def _accepted(self, listener: socket.socket, client_sock: socket.socket, client_addr: Any) -> None:
        client_sock.setblocking(False)
        sock: socket.socket = client_sock
        stage = "headers"
        if self._tls is not None:
            try:
                sock = self._tls(client_sock)
            except (OSError, ValueError):
                close_quietly(client_sock)
                return
            stage = "handshake"
        self.nr_conns += 1
        conn = Conn(sock, client_addr, listener.getsockname(), self.limits.client_timeout_seconds)
        conn.stage = stage
        now = self._start_reading(conn, self.limits.new_connection_seconds)
        self.selector.register(sock, selectors.EVENT_READ, partial(self._on_reading, conn))
        self._make_room(conn, now)

    def _start_reading(self, conn: Conn, seconds: float) -> float:
        """The connection is in a handshake or a request from now on, for at most ``seconds``;
        ``reading`` keeps when it began (for overload.slow_after_seconds). Returns now."""
        now = time.monotonic()
        conn.timeout = now + seconds
        self.reading.append(conn, now)
        return now

    def _make_room(self, newest: Conn, now: float) -> None:
        """Under pressure close the oldest idle connections, never the new one. Slow connections
        (a handshake or a request under way) have a budget of their own, smaller than
        max_connections (past it, the oldest that has been slow for slow_after_seconds is closed,
        or accepting pauses while all are younger); past max_connections the oldest connection
        that never sent anything goes first, then the oldest kept-alive one, then the oldest slow
        one. Only when every other connection is busy is the new one closed."""
        if not self._close_slow(now, newest):
            self._pause_accepting()
        while self.nr_conns > self.limits.max_connections:
            if len(self.unrequested):
                self.evict(self.unrequested.popleft(), "unrequested")
            elif len(self.keepalived):
                self.evict(self.keepalived.popleft(), "idle")
            elif len(self.reading) > 1 and self.reading.oldest() is not newest:
                self.evict(self.reading.popleft(), "slow")
            else:
                self.reading.discard(newest)
                self.evict(newest, "busy")
                return

    def _close_slow(self, now: float, newest: Conn | None = None) -> bool:
        """Past max_slow_connections, close the oldest connections in a handshake or a request
        that have been there slow_after_seconds; False while every one left is younger (a burst
        of new connections: they wait on this server, not on their clients)."""
        while len(self.reading) > self.limits.max_slow_connections:
            if self.reading.oldest() is newest:
                return True
            if now - self.reading.oldest_since() < self.limits.slow_after_seconds:
                return False
            self.evict(self.reading.popleft(), "slow")
        return True

    def _pause_accepting(self) -> None:
        """New connections wait in the listen backlog until there is room (_resume_accepting)."""
        if self._accepting:
            self._accepting = False
            for listener in self.listeners:
                self._unregister_sock(listener)

    def _resume_accepting(self) -> None:
        if self._accepting or self.stopping or not self._close_slow(time.monotonic()):
            return
        self._accepting = True
        for listener in self.listeners:
            self.selector.register(listener, selectors.EVENT_READ, self._accept)

    # -- closing

    def evict(self, conn: Conn, why: str) -> None:
        """Close a connection to make room (``why``: the ``evicted`` metric's kind)."""
        self.close(conn)
        self._counts.evicted(why)

    def unregister(self, conn: Conn) -> None:
        self._unregister_sock(conn.sock)

    def _unregister_sock(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.selector.unregister(sock)

    def close(self, conn: Conn) -> None:
        """Close a connection that is in no queue (its socket may still be registered)."""
        self.unregister(conn)
        self.nr_conns -= 1
        close_quietly(conn.sock)

    def linger(self, conn: Conn) -> None:
        """Close after the answer without a reset (``webhook.server.lingering``)."""
        self.unregister(conn)
        self.nr_conns -= 1
        self.lingering.add(conn.sock)

    def _drop(self, conn: Conn) -> None:
        self.reading.discard(conn)
        self.unrequested.discard(conn)
        self.close(conn)

    # -- reading

    def _on_keepalive_readable(self, conn: Conn, _fileobj: Any) -> None:
        """A kept-alive connection's next request begins. Usually it is all here in one read: then
        the door may refuse it (the connection stays registered, no poller change) or it goes on
        to the admission; otherwise the connection is read on, with the request's own deadline."""
        conn.stage = "headers"
        reading = self._read(conn)
        if reading is not None and reading.state == "complete" and self._refused_while_kept_alive(conn, reading):
            return
        self.keepalived.remove(conn)
        if reading is None:
            self.close(conn)
        elif reading.state == "incomplete":
            self._start_reading(conn, self.limits.client_timeout_seconds)
            self.selector.modify(conn.sock, selectors.EVENT_READ, partial(self._on_reading, conn))
            if conn.buf.find(b"\r\n\r\n") >= 0:
                conn.stage = "body"
        else:
            self.unregister(conn)
            self.admission.dispatch(conn, reading, judged=reading.state == "complete")  # the door judged it

    def _on_reading(self, conn: Conn, _fileobj: Any) -> None:
        """The TLS handshake, then the request's bytes, without blocking; a complete request goes
        to the admission."""
        if conn.stage == "handshake":
            try:
                conn.sock.do_handshake()  # type: ignore[attr-defined]
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return  # more of the handshake is due; the new-connection deadline bounds it
            except (OSError, ValueError) as exc:  # not TLS, or the client went away
                log.debug("TLS handshake with %s failed: %s", peer(conn.client), exc)
                self._drop(conn)
                return
            conn.stage = "headers"
        reading = self._read(conn)
        if reading is None:
            self._drop(conn)
        elif reading.state == "incomplete":
            if not conn.buf:
                if conn.fresh and conn in self.reading:
                    # Handshake done, nothing sent yet: idle, like a pre-dialled or kept-alive
                    # connection (closed after server.keepalive_seconds, or first under pressure).
                    self.reading.remove(conn)
                    conn.timeout = time.monotonic() + self.keepalive
                    self.unrequested.append(conn)
            elif conn in self.unrequested:  # its first bytes: now it is sending its first request
                self.unrequested.remove(conn)
                self._start_reading(conn, self.limits.new_connection_seconds)
            if conn.stage == "headers" and conn.buf.find(b"\r\n\r\n") >= 0:
                conn.stage = "body"
        else:
            self.reading.discard(conn)
            self.unrequested.discard(conn)
            self.unregister(conn)
            self.admission.dispatch(conn, reading, judged=False)

    def _read(self, conn: Conn) -> door.Reading | None:
        """Read what is here without blocking: the request's state (door.read_state), or None
        when the peer closed or failed. ``Expect: 100-continue`` is answered here: a 413 for a
        body over the limit comes before any ``100 Continue``."""
        buffered = self.limits.buffer_body_bytes
        limit = door.MAX_HEAD_BYTES + buffered
        reading = door.read_state(conn.buf, buffered, self.max_body_bytes) if conn.buf else None
        while reading is None or reading.state == "incomplete":
            if reading is not None and len(conn.buf) > limit:
                return door.Reading("thread", reading.head)
            try:
                chunk = conn.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                break
            except OSError:
                return None
            if not chunk:
                return None  # the peer closed (or never sent a request)
            conn.buf += chunk
            reading = door.read_state(conn.buf, buffered, self.max_body_bytes)
            if reading.state == "expect":
                if not door.send_now(conn.sock, CONTINUE):
                    return None
                door.without_expect(conn.buf)  # answered: the rest is an ordinary request
                reading = door.read_state(conn.buf, buffered, self.max_body_bytes)
        return reading or door.Reading("incomplete")

    def _refused_while_kept_alive(self, conn: Conn, reading: door.Reading) -> bool:
        """The door for a kept-alive connection's complete request: refused (and the connection
        handled) or not. A refused connection stays registered in the poller."""
        head = reading.head
        if head is None or not head.plain or reading.size != len(conn.buf):
            return False
        answer = self.admission.door_answer(head, self.turn_started)
        if answer is None:
            return False
        conn.buf.clear()
        self.keepalived.remove(conn)
        if not door.send_now(conn.sock, answer):
            self.close(conn)  # the answer could not be written at once: the client is not reading
            return True
        self.admission.refused(head)
        if head.close:
            self.linger(conn)
        else:
            conn.timeout = self.turn_started + (STOP_KEEPALIVE_SECONDS if self.stopping else self.keepalive)
            self.keepalived.append(conn)  # at the back, with a fresh timeout
        return True

    def refuse_now(self, conn: Conn, answer: bytes, head: door.RequestHead) -> bool:
        """Write the door's ``answer`` to a connection in no queue; whether it was written (if
        not, the client is not reading and the connection is closed)."""
        if not door.send_now(conn.sock, answer):
            self.close(conn)
            return False
        if head.close:
            self.linger(conn)
        else:
            self.keep_alive(conn)
        return True

    def keep_alive(self, conn: Conn) -> None:
        conn.timeout = time.monotonic() + (STOP_KEEPALIVE_SECONDS if self.stopping else self.keepalive)
        self.keepalived.append(conn)
        self.selector.register(conn.sock, selectors.EVENT_READ, partial(self._on_keepalive_readable, conn))

    def resume(self, conn: Conn, keep: bool) -> None:
        """After an answer: the connection is kept alive (its next request may be here already,
        read ahead by the parser), or closed."""
        if not keep or conn.must_close:
            self.linger(conn)
            return
        if conn.buf:  # pipelined: the next request is (partly) here already
            conn.stage = "headers"
            self._start_reading(conn, self.limits.client_timeout_seconds)
            self.selector.register(conn.sock, selectors.EVENT_READ, partial(self._on_reading, conn))
            self._on_reading(conn, None)
        else:
            self.keep_alive(conn)

    def _expire(self, now: float) -> None:
        """Close connections whose time ran out: a 408 to one that sent part of a request; a
        stalled handshake, a new connection that sent nothing, an expired keep-alive: just
        closed. A request is judged late by the time this turn began, when the poller last
        looked at its socket: bytes that arrived in time have been read."""
        while self.keepalived.expired(now):
            self.close(self.keepalived.popleft())
        started = self.turn_started
        for conn in [c for c in (*self.reading, *self.unrequested) if c.timeout <= started]:
            self.reading.discard(conn)
            self.unrequested.discard(conn)
            setting, seconds = (("new_connection_seconds", self.limits.new_connection_seconds) if conn.fresh
                                else ("client_timeout_seconds", self.limits.client_timeout_seconds))
            exc = ClientTimeout(conn.stage, seconds, setting)
            self._counts.client_timeout(conn.stage)
            if conn.buf:
                log.info("closing a slow client connection from %s: %s", peer(conn.client), exc.description)
                door.send_now(conn.sock, http_json(408, error_body(408, exc.description or ""), close=True))
            self.close(conn)
        self.writer.expire(now)
        self.lingering.expire(now)
