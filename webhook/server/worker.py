"""The gunicorn worker: an event loop of our own on gunicorn's public base ``Worker``.

gunicorn runs it as ``worker_class``; it uses only the documented extension points (the base
``gunicorn.workers.base.Worker``: ``init_process``, ``run``, ``notify``, ``handle_exit``,
``handle_error``, ``load_wsgi``; the ``ssl_context``, ``pre_request`` and ``post_request``
server hooks) and gunicorn's HTTP library (``gunicorn.http.RequestParser``,
``gunicorn.http.wsgi.create``), never another worker's internals. What it does:

- **Connections are read and written in the poller.** One thread (the poller) accepts, does
  the TLS handshake without blocking, reads each request until it is complete, and writes each
  answer without blocking. An idle or trickling client (slowloris, in the handshake, the
  headers or the body) costs a socket and a buffer, never a thread; so does a client that does
  not read its answer (closed after ``overload.client_timeout_seconds``, or sooner once the
  unsent answers pass ``overload.max_unsent_bytes``). A new connection must finish its
  handshake within ``overload.new_connection_seconds`` and its first request within as long of
  its first byte; on a kept-alive connection a request must be complete within
  ``overload.client_timeout_seconds`` of its first byte. Late: a JSON 408 (if anything was
  sent) and the connection is closed; bytes that arrived in time are read before that is judged.
- **Room under pressure.** Past ``overload.max_slow_connections`` connections in the middle of
  a handshake or a request, the oldest of them is closed once it has been there
  ``overload.slow_after_seconds``; while all are younger (a burst of new connections, which
  wait on this server rather than on their clients) the poller stops accepting for that long at
  most, and the burst waits in the listen backlog. Past ``overload.max_connections`` in all, the
  oldest idle one is closed (connected and silent, then kept-alive); new connections are never
  refused. A connection that connected and sends nothing is idle, like a kept-alive one.
- **Scheduling is asked, not decided here** (``webhook.server.scheduling``): each complete
  request is a review, a tool call, a probe or a scrape, as its route declared. Probes are
  answered by the poller; reviews are evaluated by the poller itself while none is with a thread
  (no thread hand-off: with the GIL only one thread runs Python at a time anyway) or in one of
  the evaluation slots, each on an evaluation thread of its own; tools in slots of their own;
  scrapes on helper threads, with no slot. Slots are for evaluation only: an answer is built in
  memory, the slot is free, and the poller writes the answer.
- **Refusal by deadline and at the door.** The scheduler refuses a review that could not be
  answered before the API server's deadline (``webhook.server.deadline``) or finds
  ``overload.max_waiting_requests`` waiting: the poller answers a complete plain request with a
  prepared 503, no thread, no HTTP parser. No Retry-After header: client-go would retry inside
  the timeout and multiply the load. A body announced over ``server.max_body_bytes`` is refused
  with a 413 before it is read (with ``Expect: 100-continue``, before ``100 Continue``).
- **JSON protocol errors.** A malformed request line or header gets the same JSON error shape
  as the app's errors instead of gunicorn's HTML page.
- Metrics: queue wait, in-flight and waiting requests, the review-time estimate, open
  connections, client timeouts, evicted connections.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import json
import logging
import os
import queue
import selectors
import socket
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn.http import errors as http_errors
from gunicorn.http import wsgi
from gunicorn.http.body import ChunkedReader, LengthReader
from gunicorn.workers.base import Worker
from werkzeug.exceptions import RequestTimeout

from webhook.server import door
from webhook.server.deadline import timeout_parameter
from webhook.server.http_errors import error_body
from webhook.server.metrics import Metrics, endpoint_label
from webhook.server.scheduling import Route, Scheduler, Work, work_of
from webhook.server.telemetry import Telemetry
from webhook.settings import OverloadSettings

log = logging.getLogger("gpushare.worker")
LINGER_SECONDS = 2.0
STOP_KEEPALIVE_SECONDS = 1.0  # on SIGTERM, kept-alive connections get this long for one last request
STAGES = {"handshake": "TLS handshake", "headers": "request headers", "body": "request body"}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# gunicorn's request parsing errors and the status each deserves.
# (ExpectationFailed and UnsupportedTransferCoding are newer than some supported releases.)
_CLIENT_ERRORS: tuple[tuple[type[Exception], int], ...] = tuple(
    (cls, status) for cls, status in (
        (getattr(http_errors, "LimitRequestLine", None), 414),
        (getattr(http_errors, "LimitRequestHeaders", None), 431),
        (getattr(http_errors, "UnsupportedTransferCoding", None), 501),
        (getattr(http_errors, "ExpectationFailed", None), 417),
        (http_errors.ParseException, 400),
    ) if isinstance(cls, type))
_REASONS = {400: "Bad Request", 408: "Request Timeout", 413: "Content Too Large", 414: "URI Too Long",
            417: "Expectation Failed", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
            501: "Not Implemented", 503: "Service Unavailable"}
_SLOTTED = (Work.REVIEW, Work.TOOL)


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
        "waited",
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
        self.waited = 0.0
        self.data = b""  # the complete request (and any read ahead), as read
        self.size: int | None = None  # bytes of the first request in ``data``, when its framing says
        self.head: door.RequestHead | None = None  # the request's head, as the poller read it
        self.req: Any = None  # the request parsed by a reading thread, its body in memory
        self.work = Work.PROBE
        self.client_timeout = client_timeout
        self.writer: Any = sock  # where gunicorn's response writes: a _Capture while evaluating
        self.pending: memoryview | None = None  # what the poller has still to write of an answer
        self.want_read = False  # the TLS write needs to read first (a TLS 1.3 key update)
        self.keep = False  # whether the connection stays open once ``pending`` is written
        self.must_close = False  # what follows the request cannot be read (a body cut at the limit)

    def timed_out(self) -> ClientTimeout:
        return ClientTimeout(self.stage, self.client_timeout)


class _DeadlineSocket:
    """What the HTTP parser reads through in a thread (only when the poller left it something to
    read: a large body): every recv gets only the time left before the deadline."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    def recv(self, size: int) -> bytes:
        remaining = self._conn.deadline - time.monotonic()
        if remaining <= 0:
            raise self._conn.timed_out()
        self._conn.sock.settimeout(remaining)
        try:
            return self._conn.sock.recv(size)
        except TimeoutError:
            raise self._conn.timed_out() from None


class _Capture:
    """What gunicorn's response writes to: the bytes, which the poller then writes without
    blocking (a client that does not read can never block a thread or hold a slot)."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.parts.append(bytes(data))

    def send(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def settimeout(self, _seconds: float | None) -> None:
        pass  # nothing here blocks

    def value(self) -> bytes:
        return b"".join(self.parts)


class _AllRead:
    """The parser's socket for a request read in full by the poller: a read past it means the
    request was not what the poller thought; it ends the connection."""

    def recv(self, size: int) -> bytes:
        raise http_errors.NoMoreData(b"")


@dataclass(slots=True)
class _Outcome:
    """What a thread hands back to the poller: a request it read (``answer`` None, ``conn.req``
    set), or an answer (empty when there is nothing to send: the client went away)."""

    conn: Conn
    answer: bytes | None
    keep: bool = False
    seconds: float = 0.0
    slot: bool = False  # the work held an evaluation slot


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

    def __contains__(self, conn: Conn) -> bool:
        return conn in self._conns

    def __iter__(self) -> Iterator[Conn]:
        return iter(list(self._conns))

    def __len__(self) -> int:
        return len(self._conns)


class WebhookWorker(Worker):  # type: ignore[misc]
    """See the module doc."""

    limits = OverloadSettings()
    max_body_bytes = 4 * 1024 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.poller: selectors.BaseSelector | None = None
        self.nr_conns = 0
        self.keepalived = ConnectionQueue()  # idle between requests, oldest first
        self.reading = ConnectionQueue()  # handshaking or part of a request here, oldest first
        self.unrequested = ConnectionQueue()  # handshake done, nothing sent yet, oldest first
        self.writing = ConnectionQueue()  # an answer not yet taken by the client, oldest first
        self._unsent = 0  # bytes of those answers
        self._metrics: Metrics | None = None
        self._telemetry: Telemetry | None = None
        self.scheduler: Scheduler[Conn] = Scheduler(self.limits)
        # Work for threads: evaluations holding a slot (one thread per slot, so none ever waits
        # for one), and the rest (reading a large body, scrapes). What they hand back.
        self._evaluations: queue.SimpleQueue[Conn | None] = queue.SimpleQueue()
        self._helpers: queue.SimpleQueue[tuple[bool, Conn] | None] = queue.SimpleQueue()
        self._done: deque[_Outcome] = deque()
        self._threads: list[threading.Thread] = []
        self._in_threads = 0
        self._door_answers: dict[tuple[str, str | None, bool], bytes] = {}
        self._refusals: dict[str, int] = {}  # door refusals by path, not yet in /metrics
        self._turn_started = 0.0  # when the poller's current turn began (after select)
        self._accepting = True  # listeners registered in the poller (see _pause_accepting)
        self._shed_since_log = 0
        self._shed_logged_at = 0.0
        self._lingering: deque[tuple[float, socket.socket]] = deque()
        self._ssl_context: Callable[[], ssl.SSLContext] | None = None
        self._notified_at = 0.0
        self._scanned_at = 0.0
        self._keepalive: float = 0.0  # gunicorn's cfg values read in run()
        self._pre_request: Callable[..., None] = lambda *_: None
        self._post_request: Callable[..., None] = lambda *_: None

    # -- gunicorn's base Worker

    def load_wsgi(self) -> None:
        super().load_wsgi()
        extensions = getattr(self.wsgi, "extensions", {})
        self._metrics = extensions.get("gpushare.metrics")
        self._telemetry = extensions.get("gpushare.telemetry")
        if self._metrics is not None:
            scheduler = self.scheduler
            self._metrics.open_connections.set_function(lambda: self.nr_conns)
            self._metrics.waiting.set_function(scheduler.waiting)
            self._metrics.in_flight.set_function(lambda: scheduler.evaluating)
            self._metrics.review_estimate.set_function(lambda: scheduler.estimate.seconds(time.monotonic()))

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.alive = False  # the signal wakes the poller through the base Worker's pipe

    def run(self) -> None:
        # gunicorn's Config resolves every attribute through its settings table: read the ones
        # used per request once (they do not change while the worker runs).
        self._keepalive = self.cfg.keepalive
        self._pre_request, self._post_request = self.cfg.pre_request, self.cfg.post_request
        # Threads evaluating hold the GIL for this long before the poller may take it back (each of
        # its socket calls gives it up): shorter than Python's 5 ms keeps probes and handshakes quick
        # while threads evaluate. With only the poller running it changes nothing.
        sys.setswitchinterval(self.limits.switch_interval_seconds)
        _return_large_buffers()
        self.poller = selectors.DefaultSelector()
        self.poller.register(self.PIPE[0], selectors.EVENT_READ, self._wake)
        for listener in self.sockets:
            listener.setblocking(False)
            self.poller.register(listener, selectors.EVENT_READ, self._accept)
        evaluators = self.limits.app_concurrency + self.limits.auxiliary_concurrency
        helpers = max(1, self.cfg.threads - evaluators)
        for i, target in enumerate([self._evaluator] * evaluators + [self._helper] * helpers):
            thread = threading.Thread(target=target, name=f"request-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        while self.alive:
            self._loop(1.0)
            if self.ppid != os.getppid():
                log.info("parent changed, shutting down")
                break
        self._drain()

    def _loop(self, timeout: float) -> None:
        now = time.monotonic()
        if now - self._notified_at >= 1.0:  # the arbiter's heartbeat: a file write, not every event
            self.notify()
            self._notified_at = now
        try:
            # While accepting is paused, look again soon: room comes when connections age, too.
            has_work = self.scheduler.poller_has_work()
            wait = 0 if has_work else timeout if self._accepting else min(timeout, 0.05)
            events = self.poller.select(wait)  # type: ignore[union-attr]
        except OSError as exc:
            if exc.errno != errno.EINTR:
                raise
            events = []
        self._turn_started = time.monotonic()
        self._finish()  # threads done first: a review that arrives now then sees their slots free
        for key, _ in events:
            key.data(key.fileobj)
        if self._refusals:
            self._count_refusals()
        self._finish()
        self._evaluate_in_poller()
        if not self._accepting:
            self._resume_accepting()
        now = time.monotonic()
        if now - self._scanned_at >= 0.1:
            self._scanned_at = now
            self._murder(now)

    def _drain(self) -> None:
        """SIGTERM: stop accepting; requests already here are answered; a kept-alive connection
        may send one more request (answered with Connection: close) for a moment."""
        for listener in self.sockets:
            with contextlib.suppress(KeyError, ValueError):
                self.poller.unregister(listener)  # type: ignore[union-attr]
        stop = time.monotonic() + STOP_KEEPALIVE_SECONDS
        for conn in self.keepalived:
            conn.timeout = min(conn.timeout, stop)
        grace = time.monotonic() + self.cfg.graceful_timeout
        while (self._in_threads or self.scheduler.busy() or len(self.keepalived) or len(self.reading)
               or len(self.unrequested) or len(self.writing)) and time.monotonic() < grace:
            self._loop(0.1)
        for conn in [*self.keepalived, *self.reading, *self.unrequested, *self.writing]:
            _close_quietly(conn.sock)
        for _ in self._threads:
            self._evaluations.put(None)
            self._helpers.put(None)
        for listener in self.sockets:
            _close_quietly(listener)

    def _wake(self, _fileobj: Any) -> None:
        with contextlib.suppress(OSError):
            while os.read(self.PIPE[0], 4096):
                pass

    def _count(self, fn: Callable[..., None], *args: Any) -> None:
        """Metrics are updated in the telemetry thread, off the request path (webhook.server.telemetry)."""
        if self._telemetry is not None:
            self._telemetry.call(fn, *args)

    # -- connections: the poller does the TLS handshake and reads each request in full

    def _context(self) -> ssl.SSLContext:
        """The TLS context from gunicorn's ``ssl_context`` server hook (webhook.server.tls_reload
        caches it per certificate version), with gunicorn's documented default as the base."""
        cfg = self.cfg

        def default() -> ssl.SSLContext:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=cfg.ca_certs)
            context.load_cert_chain(certfile=cfg.certfile, keyfile=cfg.keyfile)
            context.verify_mode = cfg.cert_reqs
            # No TLS 1.3 session tickets: kube-apiserver's Go client keeps no session cache
            # (client-go's TLSConfigFor sets none), so it never resumes; tickets were about a
            # tenth of each new connection's CPU (docs/operations.md, "Overload").
            context.num_tickets = 0
            if cfg.ciphers:
                context.set_ciphers(cfg.ciphers)
            return context

        return cfg.ssl_context(cfg, default)  # type: ignore[no-any-return]

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
        if self.cfg.is_ssl:
            try:
                sock = self._context().wrap_socket(client_sock, server_side=True, do_handshake_on_connect=False,
                                                   suppress_ragged_eofs=self.cfg.suppress_ragged_eofs)
            except (OSError, ValueError):
                _close_quietly(client_sock)
                return
            stage = "handshake"
        self.nr_conns += 1
        conn = Conn(sock, client_addr, listener.getsockname(), self.limits.client_timeout_seconds)
        conn.stage = stage
        now = self._start_reading(conn, self.limits.new_connection_seconds)
        self.poller.register(sock, selectors.EVENT_READ, partial(self._on_reading, conn))  # type: ignore[union-attr]
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
                self._close_reading(self.unrequested.popleft(), "unrequested")
            elif len(self.keepalived):
                self._close_reading(self.keepalived.popleft(), "idle")
            elif len(self.reading) > 1 and self.reading.oldest() is not newest:
                self._close_reading(self.reading.popleft(), "slow")
            else:
                self.reading.discard(newest)
                self._close_reading(newest, "busy")
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
            self._close_reading(self.reading.popleft(), "slow")
        return True

    def _pause_accepting(self) -> None:
        """New connections wait in the listen backlog until there is room (_resume_accepting)."""
        if self._accepting:
            self._accepting = False
            for listener in self.sockets:
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self.poller.unregister(listener)  # type: ignore[union-attr]

    def _resume_accepting(self) -> None:
        if self._accepting or not self.alive or not self._close_slow(time.monotonic()):
            return
        self._accepting = True
        for listener in self.sockets:
            self.poller.register(listener, selectors.EVENT_READ, self._accept)  # type: ignore[union-attr]

    def _close_reading(self, conn: Conn, why: str) -> None:
        self._unregister(conn)
        self._evicted(conn, why)

    def _evicted(self, conn: Conn, why: str) -> None:
        self.nr_conns -= 1
        if self._metrics is not None:
            self._count(self._metrics.evicted.labels(why).inc)
        _close_quietly(conn.sock)

    def _unregister(self, conn: Conn) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)  # type: ignore[union-attr]

    def _close(self, conn: Conn) -> None:
        """Close a connection that is in no queue (its socket may still be registered)."""
        self._unregister(conn)
        self.nr_conns -= 1
        _close_quietly(conn.sock)

    def _on_keepalive_readable(self, conn: Conn, _fileobj: Any) -> None:
        """A kept-alive connection's next request begins. Usually it is all here in one read: then
        it is refused at the door (the connection stays registered, no poller change) or goes on
        to the scheduler; otherwise the connection is read on, with the request's own deadline."""
        conn.stage = "headers"
        reading = self._read(conn)
        if reading is not None and reading.state == "complete" and self._refused_while_kept_alive(conn, reading):
            return
        self.keepalived.remove(conn)
        if reading is None:
            self._close(conn)
        elif reading.state == "incomplete":
            self._start_reading(conn, self.limits.client_timeout_seconds)
            self.poller.modify(conn.sock, selectors.EVENT_READ, partial(self._on_reading, conn))  # type: ignore[union-attr]
            if conn.buf.find(b"\r\n\r\n") >= 0:
                conn.stage = "body"
        else:
            self._unregister(conn)
            self._dispatch(conn, reading, judged=reading.state == "complete")  # the door judged it above

    def _on_reading(self, conn: Conn, _fileobj: Any) -> None:
        """The TLS handshake, then the request's bytes, without blocking; a complete request goes
        to the door and then to the scheduler."""
        if conn.stage == "handshake":
            try:
                conn.sock.do_handshake()  # type: ignore[attr-defined]
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return  # more of the handshake is due; the new-connection deadline bounds it
            except (OSError, ValueError) as exc:  # not TLS, or the client went away
                log.debug("TLS handshake with %s failed: %s", _peer(conn.client), exc)
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
                    conn.timeout = time.monotonic() + self._keepalive
                    self.unrequested.append(conn)
            elif conn in self.unrequested:  # its first bytes: now it is sending its first request
                self.unrequested.remove(conn)
                self._start_reading(conn, self.limits.new_connection_seconds)
            if conn.stage == "headers" and conn.buf.find(b"\r\n\r\n") >= 0:
                conn.stage = "body"
        else:
            self.reading.discard(conn)
            self.unrequested.discard(conn)
            self._unregister(conn)
            self._dispatch(conn, reading)

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
        handled) or not. A refused connection stays registered in the poller: no system calls but
        the read and the answer, which is what keeps refusing cheap under sustained overload."""
        head = reading.head
        if head is None or not head.plain or reading.size != len(conn.buf):
            return False
        work = work_of(head.method, head.path)
        why = self.scheduler.refusal(work, head.timeout, self._turn_started) if work in _SLOTTED else None
        if why is None:
            return False
        conn.buf.clear()
        self.keepalived.remove(conn)
        if not door.send_now(conn.sock, self._door_answer(why, head)):
            self._close(conn)  # the answer could not be written at once: the client is not reading
            return True
        self._tally_refusal(head.path)
        if head.close:
            self._unregister(conn)
            self.nr_conns -= 1
            self._linger(conn.sock)
        else:
            conn.timeout = self._turn_started + (self._keepalive if self.alive else STOP_KEEPALIVE_SECONDS)
            self.keepalived.append(conn)  # at the back, with a fresh timeout
        return True

    def _drop(self, conn: Conn) -> None:
        self.reading.discard(conn)
        self.unrequested.discard(conn)
        self._close(conn)

    # -- scheduling what arrived

    def _dispatch(self, conn: Conn, reading: door.Reading, judged: bool = False) -> None:
        """A request is all here (or is one a thread must read on, or one refused unread): refuse
        it at the door if the scheduler says so (unless the kept-alive door ``judged`` it a moment
        ago), else hand it to the scheduler. The connection is in no queue and not registered."""
        if self._refusals:
            self._count_refusals()  # before anything is served: a scrape then shows every refusal
        conn.fresh = False
        head = reading.head
        if reading.state == "too_large":
            self._too_large(conn, head)
            return
        conn.data = bytes(conn.buf)
        conn.buf.clear()
        conn.queued_at = time.monotonic()
        if reading.state == "thread":  # a body larger than the poller buffers: a thread reads it
            self._in_threads += 1
            self._helpers.put((True, conn))
            return
        conn.head, conn.size = head, reading.size
        work = work_of(head.method, head.path) if head is not None else Work.PROBE  # the parser answers 400
        conn.work = work
        timeout = head.timeout if head is not None else None
        if head is not None and head.plain and reading.size == len(conn.data) and not judged and work in _SLOTTED:
            why = self.scheduler.refusal(work, timeout, conn.queued_at)
            if why is not None:
                self._refuse_at_door(conn, why, head)
                return
        inline = head is not None and head.plain and len(conn.data) <= self.limits.inline_max_bytes
        self._place(conn, self.scheduler.arrive(conn, work, timeout, conn.queued_at, inline=inline))

    def _arrived_in_thread(self, conn: Conn) -> None:
        """A request a thread has read in full (its body in memory): scheduled like any other."""
        req = conn.req
        conn.head = door.RequestHead(req.method, req.path, req.should_close(),
                                     timeout_parameter(req.query) if req.query else None, False)
        conn.size = None
        work = conn.work = work_of(req.method, req.path)
        timeout = conn.head.timeout
        why = self.scheduler.refusal(work, timeout, time.monotonic()) if work in _SLOTTED else None
        if why is not None:
            self._refuse(conn, self.scheduler.reason(why, timeout))
            return
        self._place(conn, self.scheduler.arrive(conn, work, timeout, conn.queued_at, inline=False))

    def _place(self, conn: Conn, route: Route) -> None:
        if route is Route.THREAD:
            self._to_thread(conn)

    def _to_thread(self, conn: Conn) -> None:
        """Run ``conn``'s request on a thread: an evaluation thread when it holds a slot, else a helper."""
        self._in_threads += 1
        if conn.work in _SLOTTED:
            self._evaluations.put(conn)
        else:
            self._helpers.put((False, conn))

    def _start_granted(self) -> None:
        """Queued reviews and tools whose turn has come get a slot and a thread; those whose wait
        has used up their deadline get a 503 instead."""
        started, refused = self.scheduler.grants(time.monotonic())
        for conn, _ in started:
            self._to_thread(conn)
        for refusal in refused:
            self._refuse(refusal.item, refusal.reason)

    def _evaluate_in_poller(self) -> None:
        """Probes, then the poller's own reviews, oldest first, for one slice of time (a review is
        never cut short: what a review may cost is bounded by the rules themselves)."""
        stop = time.monotonic() + self.limits.inline_slice_seconds
        scheduler = self.scheduler
        while True:
            now = time.monotonic()
            nxt = scheduler.next_for_poller(now)
            if nxt is None:
                return
            conn, work, late = nxt
            if late is not None:
                self._refuse(conn, late)
            else:
                review = work is Work.REVIEW
                if review:
                    scheduler.evaluating_in_poller(True)
                answer, keep = self._evaluate(conn)
                took = time.monotonic() - now
                if review:
                    scheduler.evaluating_in_poller(False)
                    scheduler.finished(work, took, now + took, in_thread=False)
                self._answer(conn, answer, keep)
                if took >= self.limits.inline_slice_seconds / 4:
                    return  # a costly one: look at the connections (probes, handshakes) before the next
            if time.monotonic() >= stop:
                return

    def _refuse_at_door(self, conn: Conn, why: str, head: door.RequestHead) -> None:
        if not door.send_now(conn.sock, self._door_answer(why, head)):
            self._close(conn)  # the answer could not be written at once: the client is not reading
            return
        self._tally_refusal(head.path)
        if head.close:
            self.nr_conns -= 1
            self._linger(conn.sock)
            return
        self._keep_alive(conn)

    def _refuse(self, conn: Conn, reason: str) -> None:
        """A 503 instead of an evaluation, for a request the poller holds (read in full)."""
        head = conn.head
        keep = head is not None and not head.close and self.alive
        if conn.req is None:
            if conn.size is None:
                keep = False  # its end is unknown (chunked): nothing after it can be read
            else:
                conn.buf[:0] = conn.data[conn.size:]  # what the client sent after it (pipelined)
        conn.data, conn.req = b"", None
        self._tally_refusal(head.path if head is not None else "")
        self._answer(conn, http_json(503, error_body(503, reason), close=not keep), keep)

    def _too_large(self, conn: Conn, head: door.RequestHead | None) -> None:
        """A body announced over server.max_body_bytes: a 413 before it is read, then close
        (lingering, so the client reads the answer rather than a reset)."""
        conn.buf.clear()
        if self._metrics is not None:
            self._count(self._metrics.count_request, endpoint_label(head.path if head else ""), "", "",
                        "too_large", None)
        answer = http_json(413, error_body(413, f"body larger than {self.max_body_bytes} bytes"), close=True)
        self._answer(conn, answer, False)

    def _keep_alive(self, conn: Conn) -> None:
        conn.timeout = time.monotonic() + (self._keepalive if self.alive else STOP_KEEPALIVE_SECONDS)
        self.keepalived.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ,  # type: ignore[union-attr]
                             partial(self._on_keepalive_readable, conn))

    def _finish(self) -> None:
        """What threads handed back: requests read in full (scheduled now), and answers (their
        slots free, written by the poller)."""
        handled = False
        while self._done:
            outcome = self._done.popleft()
            self._in_threads -= 1
            handled = True
            conn = outcome.conn
            if outcome.answer is None:
                self._arrived_in_thread(conn)
                continue
            if outcome.slot:
                self.scheduler.finished(conn.work, outcome.seconds, time.monotonic(), in_thread=True)
            self._answer(conn, outcome.answer, outcome.keep)
        if handled:
            self._start_granted()

    # -- writing answers: without blocking, the rest as the client takes it

    def _answer(self, conn: Conn, answer: bytes, keep: bool) -> None:
        """Write an answer; what the client does not take at once waits in the poller (never in a
        thread or a slot) until it does, or until its time runs out."""
        if not answer:  # nothing to send: the client went away or sent no request
            self._close(conn)
            return
        conn.pending, conn.keep = memoryview(answer), keep
        try:
            done = self._send(conn)
        except OSError as exc:
            self._gone(conn, exc)
            return
        if done:
            self._resume(conn, keep)
            return
        now = time.monotonic()
        conn.timeout = now + conn.client_timeout
        self.writing.append(conn, now)
        self._unsent += len(conn.pending)
        self.poller.register(conn.sock, self._write_events(conn), partial(self._on_writable, conn))  # type: ignore[union-attr]
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
    def _write_events(conn: Conn) -> int:
        return selectors.EVENT_READ if conn.want_read else selectors.EVENT_WRITE

    def _on_writable(self, conn: Conn, _fileobj: Any) -> None:
        before = len(conn.pending) if conn.pending is not None else 0
        gone: OSError | None = None
        try:
            done = self._send(conn)
        except OSError as exc:
            done, gone = True, exc
        self._unsent -= before - (len(conn.pending) if conn.pending is not None else 0)
        if not done:
            self.poller.modify(conn.sock, self._write_events(conn), partial(self._on_writable, conn))  # type: ignore[union-attr]
            return
        self._unregister(conn)
        self.writing.remove(conn)
        if gone is not None:
            self._unsent -= len(conn.pending) if conn.pending is not None else 0
            conn.pending = None
            self._gone(conn, gone)
        else:
            self._resume(conn, conn.keep)

    def _gone(self, conn: Conn, exc: OSError) -> None:
        """The client closed or reset the connection before taking its answer: one line, no traceback."""
        log.info("client %s went away before taking its answer: %s", _peer(conn.client),
                 exc.strerror or type(exc).__name__)
        self._close(conn)

    def _evict_unread(self) -> None:
        """Past overload.max_unsent_bytes of answers waiting for their clients, close the
        connections whose answers waited longest: a client that does not read loses its own
        connection, and the server's memory stays bounded."""
        while self._unsent > self.limits.max_unsent_bytes and len(self.writing) > 1:
            conn = self.writing.popleft()
            self._unsent -= len(conn.pending) if conn.pending is not None else 0
            conn.pending = None
            self._close_reading(conn, "unread")

    def _resume(self, conn: Conn, keep: bool) -> None:
        """After an answer: the connection is kept alive (its next request may be here already,
        read ahead by the parser), or closed."""
        if not keep or conn.must_close:
            self.nr_conns -= 1
            self._linger(conn.sock)
            return
        if conn.buf:  # pipelined: the next request is (partly) here already
            conn.stage = "headers"
            self._start_reading(conn, self.limits.client_timeout_seconds)
            self.poller.register(conn.sock, selectors.EVENT_READ,  # type: ignore[union-attr]
                                 partial(self._on_reading, conn))
            self._on_reading(conn, None)
        else:
            self._keep_alive(conn)

    def _murder(self, now: float) -> None:
        """Close connections whose time ran out: a 408 to one that sent part of a request; a
        stalled handshake, a new connection that sent nothing, an expired keep-alive, an answer
        not taken: just closed. A request is judged late by the time this turn began, when the
        poller last looked at its socket: bytes that arrived in time have been read."""
        while len(self.keepalived) and self.keepalived.oldest().timeout <= now:  # type: ignore[union-attr]
            self._close(self.keepalived.popleft())
        started = self._turn_started
        for conn in [c for c in (*self.reading, *self.unrequested) if c.timeout <= started]:
            self.reading.discard(conn)
            self.unrequested.discard(conn)
            setting, seconds = (("new_connection_seconds", self.limits.new_connection_seconds) if conn.fresh
                                else ("client_timeout_seconds", self.limits.client_timeout_seconds))
            exc = ClientTimeout(conn.stage, seconds, setting)
            if self._metrics is not None:
                self._count(self._metrics.client_timeouts.labels(conn.stage).inc)
            if conn.buf:
                log.info("closing a slow client connection from %s: %s", _peer(conn.client), exc.description)
                door.send_now(conn.sock, http_json(408, error_body(408, exc.description or ""), close=True))
            self._close(conn)
        while len(self.writing) and self.writing.oldest().timeout <= now:  # type: ignore[union-attr]
            conn = self.writing.popleft()
            self._unsent -= len(conn.pending) if conn.pending is not None else 0
            self._close(conn)
            if self._metrics is not None:
                self._count(self._metrics.client_timeouts.labels("answer").inc)
            log.info("closing a client connection from %s: it did not take its answer within %g s "
                     "(overload.client_timeout_seconds)", _peer(conn.client), conn.client_timeout)
        while self._lingering and (self._lingering[0][0] <= now or self._lingering[0][1].fileno() < 0):
            self._unlinger(self._lingering.popleft()[1])

    def _linger(self, sock: socket.socket) -> None:
        """Close after the response without a reset: send FIN, then read and drop what the client
        still sends until it closes or LINGER_SECONDS pass, from the poller (never blocking)."""
        try:
            socket.socket.shutdown(sock, socket.SHUT_WR)
            sock.setblocking(False)
            self.poller.register(sock, selectors.EVENT_READ, partial(self._drain_lingering, sock))  # type: ignore[union-attr]
        except (OSError, ValueError, KeyError):
            _close_quietly(sock)
            return
        self._lingering.append((time.monotonic() + LINGER_SECONDS, sock))

    def _drain_lingering(self, sock: socket.socket, _fileobj: Any) -> None:
        try:
            while socket.socket.recv(sock, 65536):
                pass
        except BlockingIOError:
            return  # more may come; the poller calls again, the deadline ends it
        except OSError:
            pass
        self._unlinger(sock)

    def _unlinger(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(sock)  # type: ignore[union-attr]
        _close_quietly(sock)

    # -- threads: evaluations (one per slot), and helpers (large bodies, scrapes)

    def _report(self, outcome: _Outcome) -> None:
        self._done.append(outcome)
        with contextlib.suppress(OSError):
            os.write(self.PIPE[1], b".")

    def _evaluator(self) -> None:
        """Runs requests that hold an evaluation slot; the answer goes back to the poller."""
        while (conn := self._evaluations.get()) is not None:
            started = time.monotonic()
            answer, keep = self._evaluate(conn)
            self._report(_Outcome(conn, answer, keep, time.monotonic() - started, slot=True))

    def _helper(self) -> None:
        """Reads what the poller left to a thread (a large body, under the client deadline), and
        runs scrapes (no slot)."""
        while (job := self._helpers.get()) is not None:
            read, conn = job
            if read:
                self._report(self._read_request(conn))
            else:  # a scrape, in a scrape slot (webhook.server.scheduling)
                answer, keep = self._evaluate(conn)
                self._report(_Outcome(conn, answer, keep, slot=True))

    def _read_request(self, conn: Conn) -> _Outcome:
        """Parse a request whose body the poller did not buffer and read the body into memory
        (up to server.max_body_bytes and one byte), so that it never holds a slot while it arrives."""
        conn.deadline = time.monotonic() + conn.client_timeout
        conn.stage = "headers"
        capture = _Capture()
        conn.writer = capture
        req = None
        try:
            parser = http.RequestParser(self.cfg, _DeadlineSocket(conn), conn.client)
            parser.unreader.unread(conn.data)
            conn.data = b""
            req = next(parser)
            conn.stage = "body"
            reader = getattr(req.body, "reader", None)
            if isinstance(reader, LengthReader):
                body = req.body.read(reader.length) if reader.length <= self.max_body_bytes else b""
                conn.must_close = reader.length > self.max_body_bytes
            else:
                body = req.body.read(self.max_body_bytes + 1)
                # Over the limit the app answers 413; the rest of the body is never read.
                conn.must_close = isinstance(reader, ChunkedReader) and len(body) > self.max_body_bytes
            req.body = io.BytesIO(body)
            conn.buf += parser.unreader.buf.getvalue()  # read ahead: the next request (pipelining)
            conn.req = req
            return _Outcome(conn, None)
        except (http_errors.NoMoreData, StopIteration):
            return _Outcome(conn, b"")
        except ssl.SSLError as exc:
            log.debug("TLS error from %s: %s", _peer(conn.client), exc)
            return _Outcome(conn, b"")
        except OSError as exc:
            log.info("client %s went away while sending its request: %s", _peer(conn.client),
                     exc.strerror or type(exc).__name__)
            return _Outcome(conn, b"")
        except http_errors.ParseException as exc:
            if req is not None:  # a malformed chunked body: the words the app uses for it
                self._refuse_body(req, capture, f"malformed request body: {exc}"[:300])
            else:
                self.handle_error(req, capture, conn.client, exc)
        except Exception as exc:
            self.handle_error(req, capture, conn.client, exc)
        finally:
            conn.writer = conn.sock
            with contextlib.suppress(OSError):
                conn.sock.setblocking(False)  # the poller's again: it reads and writes without blocking
        return _Outcome(conn, capture.value())

    def _refuse_body(self, req: Any, capture: _Capture, reason: str) -> None:
        if self._metrics is not None:
            self._count(self._metrics.count_request, endpoint_label(req.path), "", "", "invalid", None)
        capture.sendall(http_json(400, error_body(400, reason), close=True))

    # -- running the app: in the poller (probes, its reviews) or a thread, the answer in memory

    def _evaluate(self, conn: Conn) -> tuple[bytes, bool]:
        """Run the request in ``conn``; its answer (empty when there is none to send) and whether
        the connection stays open."""
        capture = _Capture()
        conn.writer = capture
        try:
            keep = self._serve(conn)
        finally:
            conn.writer = conn.sock
        return capture.value(), keep

    def _serve(self, conn: Conn) -> bool:
        """Parse (unless a thread has read it) and answer one request; whether the connection stays open."""
        conn.waited = time.monotonic() - conn.queued_at
        conn.stage = "headers"
        req = conn.req
        parser = None
        try:
            if req is None:
                parser = http.RequestParser(self.cfg, _AllRead(), conn.client)
                parser.unreader.unread(conn.data)
                conn.data = b""
                req = next(parser)
            conn.req = None
            keep = self.handle_request(req, conn)
            if keep and parser is not None:
                # What the app did not read of the body, then anything read ahead (pipelining),
                # goes back to the poller's buffer.
                while req.body.read(65536):
                    pass
                conn.buf += parser.unreader.buf.getvalue()
            return keep
        except (http_errors.NoMoreData, StopIteration):
            pass
        except Exception as exc:
            self.handle_error(req, conn.writer, conn.client, exc)
        return False

    def handle_request(self, req: Any, conn: Conn) -> bool:
        conn.stage = "body"
        if self._metrics is not None:
            self._count(self._metrics.queue_wait.observe, conn.waited)
        return self._run_app(req, conn)

    def _run_app(self, req: Any, conn: Conn) -> bool:
        """The WSGI call, as gunicorn's own workers make it (gunicorn.http.wsgi)."""
        environ: dict[str, Any] = {}
        resp = None
        try:
            self._pre_request(self, req)
            resp, environ = wsgi.create(req, conn.writer, conn.client, conn.server, self.cfg)
            # The connection itself (its peer certificate, its listener), whatever the answer is
            # written to: the app's authentication and listener split read it.
            environ["gunicorn.socket"] = conn.sock
            environ["wsgi.multithread"] = True
            self.nr += 1
            if self.nr >= self.max_requests and self.alive:
                log.info("restarting the worker after this request (max_requests)")
                self.alive = False
            if not self.alive or not self._keepalive or conn.must_close:
                resp.force_close()
            respiter = self.wsgi(environ, resp.start_response)
            try:
                if isinstance(respiter, environ["wsgi.file_wrapper"]):
                    resp.write_file(respiter)
                else:
                    for item in respiter:
                        resp.write(item)
                resp.close()
            finally:
                if hasattr(respiter, "close"):
                    respiter.close()
            return not resp.should_close()
        except (Exception, SystemExit):
            if resp is not None and resp.headers_sent:
                log.exception("error while building an answer for %s", _peer(conn.client))
                return False  # half an answer is built: close after it, never write a second one
            raise
        finally:
            try:
                self._post_request(self, req, environ, resp)
            except Exception:
                log.exception("post_request hook failed")

    # -- refusing at the door

    def _tally_refusal(self, path: str) -> None:
        """Refusals are counted in /metrics once per poller turn, not once each: under sustained
        overload a telemetry call per refusal was a tenth of a refusal's cost."""
        self._refusals[path] = self._refusals.get(path, 0) + 1

    def _count_refusals(self) -> None:
        refusals, self._refusals = self._refusals, {}
        if self._metrics is not None:
            by_endpoint: dict[str, int] = {}
            for path, count in refusals.items():
                label = endpoint_label(path)
                by_endpoint[label] = by_endpoint.get(label, 0) + count
            self._count(self._metrics.count_overloaded, by_endpoint)
        self._log_shed(sum(refusals.values()))

    def _door_answer(self, why: str, head: door.RequestHead) -> bytes:
        """The prepared 503 for a door refusal; one per reason, deadline and Connection header."""
        key = (why, head.timeout, head.close)
        answer = self._door_answers.get(key)
        if answer is None:
            answer = http_json(503, error_body(503, self.scheduler.reason(why, head.timeout)), close=head.close)
            if len(self._door_answers) < 512:
                self._door_answers[key] = answer
        return answer

    def _log_shed(self, refused: int = 0) -> None:
        """One warning per 5 s at most: under overload a line per refusal would add to the load."""
        self._shed_since_log += refused
        now = time.monotonic()
        if self._shed_since_log and now - self._shed_logged_at >= 5.0:
            log.warning("overloaded: refused %d requests that could not be answered before their deadline "
                        "or found the waiting room full", self._shed_since_log)
            self._shed_since_log, self._shed_logged_at = 0, now

    # -- errors before the app ran

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        if isinstance(exc, ClientTimeout):
            if self._metrics is not None:
                self._count(self._metrics.client_timeouts.labels(exc.stage).inc)
            log.info("closing a slow client connection from %s: %s", _peer(addr), exc.description)
            if exc.stage != "handshake":  # no TLS session to answer on otherwise
                self._write_error(client, http_json(408, error_body(408, exc.description or ""), close=True))
            return
        if isinstance(exc, ssl.SSLError):
            log.debug("TLS error from %s: %s", _peer(addr), exc)
            return
        status = next((code for cls, code in _CLIENT_ERRORS if isinstance(exc, cls)), 500)
        if status == 500:
            log.exception("unexpected error handling a request from %s", _peer(addr))
            reason = f"internal error: {type(exc).__name__}"
        else:
            reason = f"malformed HTTP request: {exc}"[:300]
        if self._metrics is not None:
            self._count(self._metrics.count_request, endpoint_label(getattr(req, "path", "") or ""), "", "",
                        "error" if status == 500 else "invalid", None)
        self._write_error(client, http_json(status, error_body(status, reason), close=True))

    @staticmethod
    def _write_error(client: Any, data: bytes) -> None:
        try:
            client.settimeout(1.0)
            client.sendall(data)
        except OSError:
            pass


def _return_large_buffers() -> None:
    """Have glibc map every allocation of 1 MiB or more on its own, and give it back when freed.

    Answers of megabytes (a /metrics scrape at 5,000 nodes, a /dry-run answer) are built and
    freed all the time. glibc's default raises its mapping threshold to the largest block freed
    so far, after which such buffers come from the heap, whose free space is rarely returned: the
    worker's resident memory grew by a hundred megabytes under clients pipelining scrapes and
    stayed there. A fixed threshold (mallopt M_MMAP_THRESHOLD) keeps it flat. Not glibc: nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.mallopt(ctypes.c_int(_M_MMAP_THRESHOLD), ctypes.c_int(1024 * 1024))
    except (OSError, AttributeError):
        pass


_M_MMAP_THRESHOLD = -3  # glibc malloc.h


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


def _peer(addr: Any) -> str:
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)


def worker_class(limits: OverloadSettings, max_body_bytes: int) -> type[WebhookWorker]:
    """The worker class with the configured limits baked in (gunicorn takes a class)."""
    return type("WebhookWorker", (WebhookWorker,), {"limits": limits, "max_body_bytes": max_body_bytes,
                                                    "__module__": __name__})
