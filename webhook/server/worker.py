"""The gunicorn worker: an event loop of our own on gunicorn's public base ``Worker``.

gunicorn runs it as ``worker_class``; it uses only the documented extension points (the base
``gunicorn.workers.base.Worker``: ``init_process``, ``run``, ``notify``, ``handle_exit``,
``handle_error``, ``load_wsgi``; the ``ssl_context``, ``pre_request`` and ``post_request``
server hooks) and gunicorn's HTTP library (``gunicorn.http.RequestParser``,
``gunicorn.http.wsgi.create``), never another worker's internals. What it does:

- **Connections are read in the poller.** One thread (the poller) accepts, does the TLS
  handshake without blocking, and reads each request until it is complete; only then does a
  thread get it. An idle or trickling client (slowloris, in the handshake, the headers or the
  body) costs a socket and a buffer, never a thread. A new connection must finish its
  handshake within ``overload.new_connection_seconds`` and its first request within as long of
  its first byte; on a kept-alive connection a request must be complete within ``overload.client_timeout_seconds``
  of its first byte. Late: a JSON 408 (if anything was sent) and the connection is closed.
- **Room under pressure.** Past ``overload.max_slow_connections`` connections in the middle of
  a handshake or a request, the oldest of them is closed once it has been there
  ``overload.slow_after_seconds``; while all are younger (a burst of new connections, which
  wait on this server rather than on their clients) the poller stops accepting for that long at
  most, and the burst waits in the listen backlog. Past ``overload.max_connections`` in all, the
  oldest idle one is closed (connected and silent, then kept-alive); new connections are never
  refused. A connection that connected and sends nothing is idle, like a kept-alive one.
- **Tool endpoints in their own slots.** /dry-run, the scheduler extender and other tool POSTs
  evaluate in ``overload.auxiliary_concurrency`` slots apart from the admission reviews'.
- **Evaluation slots.** At most ``overload.app_concurrency`` threads run the app at once; with
  the GIL, more evaluating threads only contend, and starve the poller.
- **Reviews evaluated in the poller** (``overload.inline_admission``). A review that arrived
  whole (one plain POST to /validate or /mutate, the API server's only calls, of at most
  ``overload.inline_max_bytes``) while no review is with a thread joins a queue the poller
  itself evaluates, in order, a slice of ``overload.inline_slice_seconds`` at a time between
  looks at its connections (a review is never cut short). No thread
  hand-off: with the GIL only one thread runs Python at a time anyway, and each hand-off costs
  futex calls, a context switch and a wake-up of the poller. The answer is written without
  blocking; what the client does not take at once is finished by a thread.
- **Refusal by deadline** (``webhook.server.deadline``). A review is refused with a JSON 503 (the
  API server then applies the webhook's failurePolicy) only when it could not be answered
  before the deadline the API server gave the call (``?timeout=``, less the rounding and a
  margin), or when ``overload.max_waiting_requests`` reviews are already waiting (sustained
  overload: each waiting review holds a connection). No Retry-After header: client-go would
  retry inside the timeout and multiply the load.
- **Refusal at the door** (``webhook.server.door``). While refusals are possible at all, the
  poller answers a complete POST that cannot be answered in time with a prepared 503: no
  thread, no HTTP parser, no WSGI request. A thread re-checks the deadline after its wait for a
  thread and for a slot.
- **JSON protocol errors.** A malformed request line or header gets the same JSON error shape
  as the app's errors instead of gunicorn's HTML page.
- Metrics: queue wait, in-flight and waiting requests, open connections, client timeouts,
  evicted connections.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import queue
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn.http import errors as http_errors
from gunicorn.http import wsgi
from gunicorn.http.body import LengthReader
from gunicorn.workers.base import Worker
from werkzeug.exceptions import RequestTimeout

from webhook.server import deadline, door
from webhook.server.http_errors import error_body
from webhook.server.metrics import Metrics, endpoint_label
from webhook.server.telemetry import Telemetry
from webhook.settings import OverloadSettings

log = logging.getLogger("gpushare.worker")
LINGER_SECONDS = 2.0
ADMISSION_PATHS = frozenset({"/validate", "/mutate"})  # the API server's calls (webhook.routes.admission)
STOP_KEEPALIVE_SECONDS = 1.0  # on SIGTERM, kept-alive connections get this long for one last request
STAGES = {"handshake": "TLS handshake", "headers": "request headers", "body": "request body"}
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
_REASONS = {400: "Bad Request", 408: "Request Timeout", 414: "URI Too Long", 417: "Expectation Failed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
            503: "Service Unavailable"}


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
    """One client connection: its socket, what the poller has read of the next request, and the
    deadlines of its current stage."""

    __slots__ = (
        "buf",
        "client",
        "client_timeout",
        "data",
        "deadline",
        "fresh",
        "head",
        "keep",
        "pending",
        "queued_at",
        "review",
        "server",
        "sock",
        "stage",
        "timeout",
        "waited",
        "writer",
    )

    def __init__(self, sock: socket.socket, client: Any, server: Any, client_timeout: float) -> None:
        self.sock = sock
        self.client = client
        self.server = server
        self.buf = bytearray()  # what the poller has read of the next request
        self.stage = "handshake"
        self.fresh = True  # no request yet (its deadline: overload.new_connection_seconds)
        self.timeout = 0.0  # poller deadline: handshake + first request, a request, or keep-alive
        self.deadline = 0.0  # thread deadline for reading what the poller did not
        self.queued_at = 0.0
        self.waited = 0.0
        self.data = b""  # the request handed to a thread
        self.client_timeout = client_timeout
        self.writer: Any = sock  # where the answer goes: the socket, or a _Capture in the poller
        self.pending = b""  # an answer the poller could not write at once, for a thread to finish
        self.keep = False  # whether the connection stays open once ``pending`` is written
        self.head: door.RequestHead | None = None  # the request's head, when the door parsed it
        self.review = False  # a thread holds it for what may be an admission review

    def timed_out(self) -> ClientTimeout:
        return ClientTimeout(self.stage, self.client_timeout)


class _DeadlineSocket:
    """What the HTTP parser reads through in a thread (only when the poller left it something to
    read: Expect, a large body): every recv gets only the time left before the deadline."""

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
    """What gunicorn's response writes to when the poller answers: the bytes, for one
    non-blocking send (a client that does not read can never block the poller)."""

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
    """The parser's socket in the poller: the request is all in the buffer already, so a read
    past it means the request was not what the poller thought; it ends the connection."""

    def recv(self, size: int) -> bytes:
        raise http_errors.NoMoreData(b"")


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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.poller: selectors.BaseSelector | None = None
        self.nr_conns = 0
        self.keepalived = ConnectionQueue()  # idle between requests, oldest first
        self.reading = ConnectionQueue()  # handshaking or part of a request here, oldest first
        self.unrequested = ConnectionQueue()  # handshake done, nothing sent yet, oldest first
        self._metrics: Metrics | None = None
        self._telemetry: Telemetry | None = None
        # Requests handed to threads and not yet answered; when each request waiting for a thread
        # was queued (oldest first); one entry per request a thread holds; per request evaluating.
        # deque and list appends and pops are atomic, so threads never take a lock for these.
        self._jobs: queue.SimpleQueue[Conn | None] = queue.SimpleQueue()
        self._done: deque[tuple[Conn, bool]] = deque()
        self._threads: list[threading.Thread] = []
        self._in_threads = 0
        self._waiting: deque[float] = deque()
        self._ready: deque[Conn] = deque()  # whole reviews the poller evaluates itself, oldest first
        self._reviews_in_threads = 0  # (possible) admission reviews handed to threads, not yet done
        self._busy: list[None] = []
        self._handling: list[None] = []
        self._door_answers: dict[tuple[str, str | None, bool], bytes] = {}
        self._refusals: dict[str, int] = {}  # door refusals by path, not yet in /metrics
        self._turn_started = 0.0  # when the poller's current turn began (after select)
        self._accepting = True  # listeners registered in the poller (see _pause_accepting)
        self._budgets: dict[str | None, float] = {}
        self._seconds_per_request = 0.0
        # Evaluation slots as tokens in a C queue: taking one blocks without the GIL, and costs a
        # fraction of threading.Semaphore's Python-level condition variable.
        self._app_slots: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(self.limits.app_concurrency):
            self._app_slots.put(None)
        # /dry-run and the scheduler extender evaluate in slots of their own: a body that costs
        # seconds of CPU there never holds the slots the API server's reviews need.
        self._aux_slots: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(self.limits.auxiliary_concurrency):
            self._aux_slots.put(None)
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
            self._metrics.open_connections.set_function(lambda: self.nr_conns)
            self._metrics.waiting.set_function(self._requests_waiting)
            self._metrics.in_flight.set_function(lambda: len(self._busy))

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.alive = False  # the signal wakes the poller through the base Worker's pipe

    def run(self) -> None:
        # gunicorn's Config resolves every attribute through its settings table: read the ones
        # used per request once (they do not change while the worker runs).
        self._keepalive = self.cfg.keepalive
        self._pre_request, self._post_request = self.cfg.pre_request, self.cfg.post_request
        self.poller = selectors.DefaultSelector()
        self.poller.register(self.PIPE[0], selectors.EVENT_READ, self._wake)
        for listener in self.sockets:
            listener.setblocking(False)
            self.poller.register(listener, selectors.EVENT_READ, self._accept)
        for i in range(self.cfg.threads):
            thread = threading.Thread(target=self._thread, name=f"request-{i}", daemon=True)
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
            wait = 0 if self._ready else timeout if self._accepting else min(timeout, 0.05)
            events = self.poller.select(wait)  # type: ignore[union-attr]
        except OSError as exc:
            if exc.errno != errno.EINTR:
                raise
            events = []
        self._turn_started = time.monotonic()
        self._finish()  # threads done first: a review that arrives now then sees them gone
        for key, _ in events:
            key.data(key.fileobj)
        if self._refusals:
            self._count_refusals()
        self._finish()
        if self._ready:
            self._evaluate_ready()
        if not self._accepting:
            self._resume_accepting()
        now = time.monotonic()
        if now - self._scanned_at >= 0.1:
            self._scanned_at = now
            self._murder(now)

    def _drain(self) -> None:
        """SIGTERM: stop accepting; requests in threads finish and are answered; a kept-alive
        connection may send one more request (answered with Connection: close) for a moment."""
        for listener in self.sockets:
            with contextlib.suppress(KeyError, ValueError):
                self.poller.unregister(listener)  # type: ignore[union-attr]
        stop = time.monotonic() + STOP_KEEPALIVE_SECONDS
        for conn in self.keepalived:
            conn.timeout = min(conn.timeout, stop)
        grace = time.monotonic() + self.cfg.graceful_timeout
        while (self._in_threads or self._ready or len(self.keepalived) or len(self.reading)
               or len(self.unrequested)) and time.monotonic() < grace:
            self._loop(0.1)
        for conn in [*self.keepalived, *self.reading, *self.unrequested]:
            _close_quietly(conn.sock)
        for _ in self._threads:
            self._jobs.put(None)
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
        one. Only when every other connection is busy in a thread is the new one closed."""
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

    def _on_keepalive_readable(self, conn: Conn, _fileobj: Any) -> None:
        """A kept-alive connection's next request begins. Usually it is all here in one read: then
        it is refused at the door (the connection stays registered, no poller change) or goes to
        a thread; otherwise the connection is read on, with the request's own deadline."""
        conn.stage = "headers"
        state = self._read(conn)
        if state == "complete" and self._refused_while_kept_alive(conn):
            return
        self.keepalived.remove(conn)
        if state == "closed":
            self._unregister(conn)
            self.nr_conns -= 1
            _close_quietly(conn.sock)
        elif state == "incomplete":
            self._start_reading(conn, self.limits.client_timeout_seconds)
            self.poller.modify(conn.sock, selectors.EVENT_READ, partial(self._on_reading, conn))  # type: ignore[union-attr]
            if conn.buf.find(b"\r\n\r\n") >= 0:
                conn.stage = "body"
        else:
            self._unregister(conn)
            self._dispatch(conn, judged=state == "complete")  # the door above judged a complete one

    def _on_reading(self, conn: Conn, _fileobj: Any) -> None:
        """The TLS handshake, then the request's bytes, without blocking; a complete request goes
        to the door and then to a thread."""
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
        state = self._read(conn)
        if state == "closed":
            self._drop(conn)
        elif state == "incomplete":
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
            self._dispatch(conn)

    def _read(self, conn: Conn) -> str:
        """Read what is here without blocking: the request's state (door.read_state), or
        "closed" when the peer closed or failed; ``conn.head`` is the head of a complete plain request."""
        limit = door.MAX_HEAD_BYTES + self.limits.buffer_body_bytes
        state, conn.head = "incomplete", None
        if conn.buf:
            state, conn.head = door.read_state(conn.buf, self.limits.buffer_body_bytes)
        while state == "incomplete" and len(conn.buf) <= limit:
            try:
                chunk = conn.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                break
            except OSError:
                return "closed"
            if not chunk:
                return "closed"  # the peer closed (or never sent a request)
            conn.buf += chunk
            state, conn.head = door.read_state(conn.buf, self.limits.buffer_body_bytes)
        return "thread" if state == "incomplete" and len(conn.buf) > limit else state

    def _refused_while_kept_alive(self, conn: Conn) -> bool:
        """The door for a kept-alive connection's complete request: refused (and the connection
        handled) or not. A refused connection stays registered in the poller: no system calls but
        the read and the answer, which is what keeps refusing cheap under sustained overload."""
        head = conn.head  # what _read saw: one complete plain request, or None
        ahead = self._requests_waiting()
        if head is None or not ahead:
            return False
        why = self._door_refusal(ahead, head)
        if why is None:
            return False
        conn.head = None
        conn.buf.clear()
        self.keepalived.remove(conn)
        if not door.send_now(conn.sock, self._door_answer(why, head)):
            self._unregister(conn)
            self.nr_conns -= 1  # the answer could not be written at once: the client is not reading
            _close_quietly(conn.sock)
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
        self._unregister(conn)
        self.nr_conns -= 1
        _close_quietly(conn.sock)

    def _dispatch(self, conn: Conn, judged: bool = False) -> None:
        """A request is all here (or is one for gunicorn's parser to refuse or stream): refuse it
        at the door if it cannot be answered in time (unless the kept-alive door ``judged`` it a
        moment ago), else queue it. The connection is in no queue and not registered in the poller."""
        if self._refusals:
            self._count_refusals()  # before anything is served: a scrape then shows every refusal
        data = bytes(conn.buf)
        conn.buf.clear()
        conn.fresh = False
        head, conn.head = conn.head, None  # parsed once, by _read (None: not one plain request)
        ahead = self._requests_waiting()
        if ahead and head is not None and not judged:
            why = self._door_refusal(ahead, head)
            if why is not None:
                self._refuse_at_door(conn, why, head)
                return
        conn.data = data
        conn.queued_at = time.monotonic()
        # Reviews keep their order: while one is with a thread, the next goes there too.
        review = head is None or (head.method == "POST" and head.path in ADMISSION_PATHS)
        if (head is not None and review and self.limits.inline_admission and not self._reviews_in_threads
                and len(data) <= self.limits.inline_max_bytes):
            self._ready.append(conn)  # evaluated by the poller (_evaluate_ready)
            return
        conn.review = review
        self._reviews_in_threads += review
        self._waiting.append(conn.queued_at)
        self._in_threads += 1
        self._jobs.put(conn)

    def _evaluate_ready(self) -> None:
        """Evaluate queued whole reviews in the poller, oldest first, for one slice of time."""
        stop = time.monotonic() + self.limits.inline_slice_seconds
        while self._ready:
            conn = self._ready.popleft()
            capture = _Capture()
            conn.writer = capture
            keep = self._serve(conn, inline=True)
            conn.writer = conn.sock
            answer = capture.value()
            sent = 0
            try:
                while sent < len(answer):
                    sent += conn.sock.send(answer[sent:])
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                # The client is not reading: a thread finishes the answer under the client deadline.
                conn.pending, conn.keep = answer[sent:], keep
                self._in_threads += 1
                self._jobs.put(conn)  # not a review in a thread: the next reviews stay here
            except OSError:
                self.nr_conns -= 1
                _close_quietly(conn.sock)
            else:
                self._resume(conn, keep)
            if time.monotonic() >= stop:
                return

    def _refuse_at_door(self, conn: Conn, why: str, head: door.RequestHead) -> None:
        if not door.send_now(conn.sock, self._door_answer(why, head)):
            self.nr_conns -= 1  # the answer could not be written at once: the client is not reading
            _close_quietly(conn.sock)
            return
        self._tally_refusal(head.path)
        if head.close:
            self.nr_conns -= 1
            self._linger(conn.sock)
            return
        self._keep_alive(conn)

    def _keep_alive(self, conn: Conn) -> None:
        conn.timeout = time.monotonic() + (self._keepalive if self.alive else STOP_KEEPALIVE_SECONDS)
        self.keepalived.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ,  # type: ignore[union-attr]
                             partial(self._on_keepalive_readable, conn))

    def _finish(self) -> None:
        """Connections whose request a thread has answered: kept alive (the next request may be
        here already, read ahead by the parser), or closed."""
        while self._done:
            conn, keep = self._done.popleft()
            self._in_threads -= 1
            self._reviews_in_threads -= conn.review
            conn.review = False
            self._resume(conn, keep)

    def _resume(self, conn: Conn, keep: bool) -> None:
        """After an answer: the connection is kept alive (its next request may be here already,
        read ahead by the parser), or closed."""
        if not keep:
            self.nr_conns -= 1
            self._linger(conn.sock)
            return
        try:
            conn.sock.setblocking(False)
        except OSError:
            self.nr_conns -= 1
            _close_quietly(conn.sock)
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
        stalled handshake, a new connection that sent nothing, an expired keep-alive: just closed."""
        while len(self.keepalived) and self.keepalived.oldest().timeout <= now:  # type: ignore[union-attr]
            conn = self.keepalived.popleft()
            self._unregister(conn)
            self.nr_conns -= 1
            _close_quietly(conn.sock)
        for conn in [c for c in (*self.reading, *self.unrequested) if c.timeout <= now]:
            self.reading.discard(conn)
            self.unrequested.discard(conn)
            self._unregister(conn)
            self.nr_conns -= 1
            setting, seconds = (("new_connection_seconds", self.limits.new_connection_seconds) if conn.fresh
                                else ("client_timeout_seconds", self.limits.client_timeout_seconds))
            exc = ClientTimeout(conn.stage, seconds, setting)
            if self._metrics is not None:
                self._count(self._metrics.client_timeouts.labels(conn.stage).inc)
            if conn.buf:
                log.info("closing a slow client connection from %s: %s", _peer(conn.client), exc.description)
                door.send_now(conn.sock, http_json(408, error_body(408, exc.description or ""), close=True))
            _close_quietly(conn.sock)
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

    # -- threads: complete requests only

    def _thread(self) -> None:
        while True:
            conn = self._jobs.get()
            if conn is None:
                return
            keep = self._serve(conn) if not conn.pending else self._finish_answer(conn)
            self._done.append((conn, keep))
            with contextlib.suppress(OSError):
                os.write(self.PIPE[1], b".")

    def _finish_answer(self, conn: Conn) -> bool:
        """Write the rest of an answer the poller could not write at once, under the client deadline."""
        pending, conn.pending = conn.pending, b""
        try:
            conn.sock.settimeout(conn.client_timeout)
            conn.sock.sendall(pending)
        except OSError:
            return False
        return conn.keep

    def _serve(self, conn: Conn, inline: bool = False) -> bool:
        """Parse and answer one request; whether the connection stays open. ``inline``: in the
        poller, with the request all in ``conn.data`` and the answer going to ``conn.writer``."""
        now = time.monotonic()
        conn.waited = now - conn.queued_at
        conn.deadline = now + conn.client_timeout
        conn.stage = "headers"
        if not inline:
            with contextlib.suppress(IndexError):
                self._waiting.popleft()
        self._handling.append(None)
        req = None
        try:
            if not inline:
                conn.sock.settimeout(conn.client_timeout)  # bounds the answer's writes too
            parser = http.RequestParser(self.cfg, _AllRead() if inline else _DeadlineSocket(conn), conn.client)
            parser.unreader.unread(conn.data)
            conn.data = b""
            req = next(parser)
            keep = self.handle_request(req, conn, inline)
            if keep:
                # What the app did not read of the body, then anything read ahead (pipelining),
                # goes back to the poller's buffer.
                while req.body.read(65536):
                    pass
                conn.buf += parser.unreader.buf.getvalue()
            return keep
        except ClientTimeout as exc:
            self.handle_error(req, conn.writer, conn.client, exc)
        except (http_errors.NoMoreData, StopIteration):
            pass
        except ssl.SSLError as exc:
            log.debug("TLS error from %s: %s", _peer(conn.client), exc)
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, None):
                log.exception("socket error answering %s", _peer(conn.client))
        except Exception as exc:
            self.handle_error(req, conn.writer, conn.client, exc)
        finally:
            self._handling.pop()
        return False

    def handle_request(self, req: Any, conn: Conn, inline: bool = False) -> bool:
        conn.stage = "body"
        if self._metrics is not None:
            self._count(self._metrics.queue_wait.observe, conn.waited)
        budget = 0.0
        if req.method == "POST":
            budget = self._budget(deadline.timeout_parameter(req.query) if req.query else None)
            if conn.waited + self._seconds_per_request > budget:
                return self._shed(req, conn, budget)
        self._buffer_body(req)
        admission = req.method != "POST" or req.path in ADMISSION_PATHS
        # The poller is one evaluator by itself: it takes no slot (and must never wait for one).
        slots = None if inline else self._app_slots if admission else self._aux_slots
        if slots is not None:
            slots.get()
            if req.method == "POST" and time.monotonic() - conn.queued_at + self._seconds_per_request > budget:
                slots.put(None)  # the wait for a slot used up the budget: refuse, don't answer late
                return self._shed(req, conn, budget)
        self._busy.append(None)
        started = time.monotonic()
        try:
            return self._run_app(req, conn)
        finally:
            self._busy.pop()
            if slots is not None:
                slots.put(None)
            if admission:
                # A moving average of the time a review holds a slot: it turns the number of
                # requests ahead into the wait a new one can expect (see _expected_wait).
                self._seconds_per_request += (time.monotonic() - started - self._seconds_per_request) / 64

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
            if not self.alive or not self._keepalive:
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
                log.exception("error while sending an answer to %s", _peer(conn.client))
                return False  # half an answer went out: close, never write a second one
            raise
        finally:
            try:
                self._post_request(self, req, environ, resp)
            except Exception:
                log.exception("post_request hook failed")

    def _buffer_body(self, req: Any) -> None:
        """Read a Content-Length body (under the client deadline) before the request takes an
        evaluation slot, so that a slow sender cannot hold one. Not with ``Expect: 100-continue``:
        that client sends its body only after gunicorn's interim 100, which the app triggers."""
        reader = getattr(req.body, "reader", None)
        if isinstance(reader, LengthReader) and 0 < reader.length <= self.limits.buffer_body_bytes \
                and not any(name == "EXPECT" for name, _ in req.headers):
            req.body = io.BytesIO(req.body.read(reader.length))

    # -- refusing: at the door (poller) or in the thread

    def _requests_waiting(self) -> int:
        """Requests not yet evaluating: queued for a thread, or in one (being read, or waiting
        for an evaluation slot)."""
        return len(self._waiting) + len(self._ready) + max(0, len(self._handling) - len(self._busy))

    def _budget(self, timeout: str | None) -> float:
        """Seconds after its arrival by which a review must be answerable (webhook.server.deadline)."""
        try:
            return self._budgets[timeout]
        except KeyError:
            value = deadline.budget_seconds(timeout, self.limits)
            if len(self._budgets) < 256:  # the API server sends at most a few dozen distinct values
                self._budgets[timeout] = value
            return value

    def _expected_wait(self, ahead: int) -> float:
        """When a review arriving now would be answered: the requests ahead of it times the recent
        time per evaluation, divided by the slots, plus its own evaluation; and at least as late as
        the oldest waiting request has waited already (a stalled queue shows there first)."""
        # The poller evaluates its queue alone; threads share the evaluation slots.
        in_poller = len(self._ready)
        estimate = (in_poller + max(0, ahead - in_poller) / self.limits.app_concurrency + 1) * self._seconds_per_request
        now = oldest = time.monotonic()
        try:  # noqa: SIM105 (contextlib.suppress costs ~2 µs, and this runs for every refusal)
            oldest = min(now, self._waiting[0])
        except IndexError:  # threads pop _waiting concurrently
            pass
        if in_poller:
            oldest = min(oldest, self._ready[0].queued_at)
        return max(estimate, now - oldest)

    def _door_refusal(self, ahead: int, head: door.RequestHead) -> str | None:
        """Why the door refuses this request, or None to queue it."""
        if head.method != "POST":
            return None  # health checks and scrapes are never refused
        if ahead >= self.limits.max_waiting_requests:
            return "full"
        return "late" if self._expected_wait(ahead) > self._budget(head.timeout) else None

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
            if why == "full":
                reason = (f"gpushare-webhook is overloaded: {self.limits.max_waiting_requests} reviews are "
                          "already waiting to be evaluated (overload.max_waiting_requests), so this one was "
                          "refused without evaluation; the API server applies the webhook's failurePolicy")
            else:
                reason = ("gpushare-webhook is overloaded: this review would be answered after its deadline ("
                          f"{deadline.describe(head.timeout, self.limits)}), so it was refused without "
                          "evaluation; the API server applies the webhook's failurePolicy")
            answer = http_json(503, error_body(503, reason), close=head.close)
            if len(self._door_answers) < 512:
                self._door_answers[key] = answer
        return answer

    def _shed(self, req: Any, conn: Conn, budget: float) -> bool:
        waited = time.monotonic() - conn.queued_at
        timeout = deadline.timeout_parameter(req.query) if req.query else None
        reason = (f"gpushare-webhook is overloaded: this review waited {waited:.2f} s to be evaluated and "
                  f"would be answered after its deadline ({deadline.describe(timeout, self.limits)}), so it "
                  "was refused without evaluation; the API server applies the webhook's failurePolicy")
        keep_alive = not req.should_close() and self.alive
        conn.writer.sendall(http_json(503, error_body(503, reason), close=not keep_alive))
        if self._metrics is not None:
            self._count(self._metrics.count_request, endpoint_label(req.path), "", "", "overloaded", None)
        self._log_shed()
        return keep_alive  # the unread body is drained before the connection is reused

    def _log_shed(self, refused: int = 1) -> None:
        """One warning per 5 s at most: under overload a line per refusal would add to the load."""
        self._shed_since_log += refused
        now = time.monotonic()
        if now - self._shed_logged_at >= 5.0:
            log.warning("overloaded: refused %d reviews that could not be answered before their deadline "
                        "or found %d already waiting", self._shed_since_log, self.limits.max_waiting_requests)
            self._shed_since_log, self._shed_logged_at = 0, now

    # -- errors before the app ran

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        if isinstance(exc, ClientTimeout):
            if self._metrics is not None:
                self._count(self._metrics.client_timeouts.labels(exc.stage).inc)
            log.info("closing a slow client connection from %s: %s", _peer(addr), exc.description)
            if exc.stage != "handshake":  # no TLS session to answer on otherwise
                self._write(client, http_json(408, error_body(408, exc.description or ""), close=True))
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
        self._write(client, http_json(status, error_body(status, reason), close=True))

    @staticmethod
    def _write(sock: socket.socket, data: bytes) -> None:
        try:
            sock.settimeout(1.0)
            sock.sendall(data)
        except OSError:
            pass


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


def _peer(addr: Any) -> str:
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)


def worker_class(limits: OverloadSettings) -> type[WebhookWorker]:
    """The worker class with the configured limits baked in (gunicorn takes a class)."""
    return type("WebhookWorker", (WebhookWorker,), {"limits": limits, "__module__": __name__})
