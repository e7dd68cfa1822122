"""The gunicorn worker: gthread, made safe for the API server's hot path.

What it adds to gunicorn's threaded worker:
- **Deadlines for slow clients.** A new connection waits in the poller, not in a thread, until
  it sends something. From the moment a thread takes a request, the TLS handshake, headers and
  body must arrive within ``overload.client_timeout_seconds``: each read gets only the time
  left. A client that trickles bytes (slowloris) gets a JSON 408 and is disconnected; one
  that stalls mid-handshake is disconnected.
- **Evaluation slots.** At most ``overload.app_concurrency`` threads run the app at once; a
  Content-Length body is read before a thread takes a slot, so slow senders cannot hold one.
  With the GIL, more evaluating threads only contend, and starve the poller.
- **Refusal at the door** (``webhook.server.door``). While a new request would wait over half the
  queue budget, the poller reads a kept-alive connection's request itself and answers a
  complete POST with a prepared JSON 503: no thread, no HTTP parser, no WSGI request.
- **Load shedding.** A POST that waited longer than ``overload.queue_budget_seconds`` for a
  thread and a slot is answered at once with a JSON 503 without running the app: under
  overload every request still gets an answer well inside the webhook timeout, and the API
  server applies the webhook's failurePolicy. No Retry-After header: client-go would retry
  inside the timeout and multiply the load.
- **JSON protocol errors.** A malformed request line or header gets the same JSON error shape
  as the app's errors instead of gunicorn's HTML page.
- Metrics: queue wait, in-flight and waiting requests, open connections, client timeouts.

It relies on gunicorn 27's gthread internals (``TConn``, ``handle``, ``handle_request``,
``_keepalive_after``, ``on_client_socket_readable``, the keep-alive and pending-connection
queues); pyproject pins ``gunicorn>=27,<28``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import queue
import select
import selectors
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn import sock as gsock
from gunicorn.http import errors as http_errors
from gunicorn.http.body import LengthReader
from gunicorn.workers.gthread import TConn, ThreadWorker
from werkzeug.exceptions import RequestTimeout

from policies.settings import OverloadSettings
from webhook.server import door
from webhook.server.http_errors import error_body
from webhook.server.metrics import Metrics, endpoint_label
from webhook.server.telemetry import Telemetry

log = logging.getLogger("gpushare.worker")
LINGER_SECONDS = 2.0
STAGES = {"handshake": "TLS handshake", "headers": "request headers", "body": "request body"}
# gunicorn's request parsing errors and the status each deserves.
_CLIENT_ERRORS: tuple[tuple[type[Exception], int], ...] = (
    (http_errors.LimitRequestLine, 414),
    (http_errors.LimitRequestHeaders, 431),
    (http_errors.UnsupportedTransferCoding, 501),
    (http_errors.ExpectationFailed, 417),
    (http_errors.ParseException, 400),
)
_REASONS = {400: "Bad Request", 408: "Request Timeout", 414: "URI Too Long", 417: "Expectation Failed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
            503: "Service Unavailable"}


class ClientTimeout(RequestTimeout):
    """The client did not send its request in time (HTTP 408)."""

    def __init__(self, stage: str, seconds: float) -> None:
        super().__init__(f"the {STAGES.get(stage, stage)} did not arrive within {seconds:g} s "
                         "(overload.client_timeout_seconds); send the whole request at once")
        self.stage = stage


def http_json(status: int, payload: Any, *, close: bool) -> bytes:
    """A complete HTTP/1.1 response with a JSON body, as bytes."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: {'close' if close else 'keep-alive'}\r\n\r\n")
    return head.encode("ascii") + body


class _DeadlineSocket:
    """What the HTTP parser reads through: every recv gets only the time left before the deadline."""

    def __init__(self, sock: socket.socket, conn: DeadlineConn) -> None:
        self._sock = sock
        self._conn = conn

    def recv(self, size: int) -> bytes:
        remaining = self._conn.deadline - time.monotonic()
        if remaining <= 0:
            raise self._conn.timed_out()
        self._sock.settimeout(remaining)
        try:
            return self._sock.recv(size)
        except TimeoutError:
            raise self._conn.timed_out() from None

    def settimeout(self, value: float | None) -> None:
        self._sock.settimeout(value)

    def gettimeout(self) -> float | None:
        return self._sock.gettimeout()


class DeadlineConn(TConn):  # type: ignore[misc]
    """A connection that knows when its current request must have arrived."""

    client_timeout = 5.0

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.deadline = 0.0
        self.stage = "handshake"
        self.queued_at = time.monotonic()
        self.waited = 0.0
        self.linger: Callable[[socket.socket], None] | None = None

    def close(self, graceful: bool = False) -> None:
        # gunicorn lingers on a graceful close in the main thread for up to 2 s, which a client
        # that never closes would turn into a stalled event loop; the worker lingers in its poller.
        if graceful and self.linger is not None:
            self.linger(self.sock)
        else:
            super().close(graceful)

    def has_data(self) -> bool:
        """Whether request bytes are already here (decrypted in TLS, or in the kernel buffer)."""
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    def timed_out(self) -> ClientTimeout:
        return ClientTimeout(self.stage, self.client_timeout)

    def init(self) -> None:
        """TLS handshake and HTTP/1.1 parser, both under the deadline (gunicorn's own init would
        reset the socket to blocking without a timeout; HTTP/2 is not offered, see gunicorn_conf)."""
        if self.initialized:
            return
        self.initialized = True
        self.sock.settimeout(max(self.deadline - time.monotonic(), 0.001))
        if self.cfg.is_ssl:
            try:
                self.sock = gsock.ssl_wrap_socket(self.sock, self.cfg)
                if not self.cfg.do_handshake_on_connect:
                    self.sock.do_handshake()
            except TimeoutError:
                raise self.timed_out() from None
        self.stage = "headers"
        self.parser = http.get_parser(self.cfg, self.sock, self.client)
        self.parser.unreader.sock = _DeadlineSocket(self.sock, self)


class ConnectionQueue:
    """gthread's deque of idle (kept-alive or pending) connections, oldest first, with O(1)
    removal: ``deque.remove`` compares against every entry, about 30 µs per request at 900
    open connections, paid in the poller that everything else waits on."""

    def __init__(self) -> None:
        self._conns: dict[Any, None] = {}  # insertion-ordered; appended in timeout order

    def append(self, conn: Any) -> None:
        self._conns[conn] = None

    def remove(self, conn: Any) -> None:
        del self._conns[conn]

    def popleft(self) -> Any:
        conn = next(iter(self._conns))
        del self._conns[conn]
        return conn

    def __getitem__(self, index: int) -> Any:
        if index != 0:
            raise IndexError("only the oldest connection can be looked up")
        try:
            return next(iter(self._conns))
        except StopIteration:
            raise IndexError("no connections") from None

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._conns))

    def __len__(self) -> int:
        return len(self._conns)


class WebhookWorker(ThreadWorker):  # type: ignore[misc]
    """gthread with client deadlines, load shedding and JSON protocol errors (see the module doc)."""

    limits = OverloadSettings()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keepalived_conns = ConnectionQueue()
        self.pending_conns = ConnectionQueue()
        self._metrics: Metrics | None = None
        self._telemetry: Telemetry | None = None
        # When each request waiting for a thread was queued (oldest first), and one entry per
        # request a thread holds: deque and list appends and pops are atomic, so request threads
        # never take a lock for these; /metrics reads the lengths, the door reads the oldest.
        self._waiting: deque[float] = deque()
        self._busy: list[None] = []
        self._handling: list[None] = []
        self._door_answers: dict[bool, bytes] = {}
        self._seconds_per_request = 0.0
        # Evaluation slots as tokens in a C queue: taking one blocks without the GIL, and costs a
        # fraction of threading.Semaphore's Python-level condition variable.
        self._app_slots: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(self.limits.app_concurrency):
            self._app_slots.put(None)
        self._shed_since_log = 0
        self._shed_logged_at = 0.0
        self._lingering: deque[tuple[float, socket.socket]] = deque()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        extensions = getattr(self.wsgi, "extensions", {})
        self._metrics = extensions.get("gpushare.metrics")
        self._telemetry = extensions.get("gpushare.telemetry")
        if self._metrics is not None:
            self._metrics.open_connections.set_function(lambda: self.nr_conns)
            self._metrics.waiting.set_function(self._requests_waiting)
            self._metrics.in_flight.set_function(lambda: len(self._busy))

    def _count(self, fn: Callable[..., None], *args: Any) -> None:
        """Metrics are updated in the telemetry thread, off the request path (webhook.server.telemetry)."""
        if self._telemetry is not None:
            self._telemetry.call(fn, *args)

    # -- connections: new ones wait in the poller (not in a thread) for their first bytes

    def accept(self, listener: socket.socket) -> None:
        try:
            client_sock, client_addr = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = DeadlineConn(self.cfg, client_sock, client_addr, listener.getsockname())
        conn.client_timeout = self.limits.client_timeout_seconds
        conn.linger = self._linger
        # All pending connections share this timeout, so the deque stays ordered for murder_pending.
        conn.timeout = time.monotonic() + self.limits.client_timeout_seconds
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn))

    def enqueue_req(self, conn: DeadlineConn) -> None:
        conn.queued_at = time.monotonic()
        self._waiting.append(conn.queued_at)
        super().enqueue_req(conn)

    def handle(self, conn: DeadlineConn) -> Any:
        now = time.monotonic()
        conn.waited = now - conn.queued_at
        conn.deadline = now + conn.client_timeout
        with contextlib.suppress(IndexError):
            self._waiting.popleft()
        self._handling.append(None)
        try:
            return self._handle(conn)
        finally:
            self._handling.pop()

    def _handle(self, conn: DeadlineConn) -> Any:
        if not conn.initialized:
            try:
                conn.init()
            except ClientTimeout as exc:
                self.handle_error(None, conn.sock, conn.client, exc)
                return False
            except OSError as exc:  # includes ssl.SSLError: not TLS, or the client went away
                log.debug("TLS handshake with %s failed: %s", _peer(conn.client), exc)
                return False
            if not conn.has_data():
                # Handshake done but no request yet (a pre-dialled connection): wait in the
                # poller like a kept-alive connection instead of holding this thread.
                return True
        conn.stage = "headers"
        return super().handle(conn)

    def _linger(self, sock: socket.socket) -> None:
        """Close after the response without a reset: send FIN, then read and drop what the client
        still sends until it closes or LINGER_SECONDS pass, from the poller (never blocking)."""
        try:
            socket.socket.shutdown(sock, socket.SHUT_WR)
            sock.setblocking(False)
            self.poller.register(sock, selectors.EVENT_READ, partial(self._drain_lingering, sock))
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
            self.poller.unregister(sock)
        _close_quietly(sock)

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        while self._lingering and (self._lingering[0][0] <= now or self._lingering[0][1].fileno() < 0):
            self._unlinger(self._lingering.popleft()[1])

    # -- refusing at the door (webhook.server.door): kept-alive connections, read by the poller

    def _requests_waiting(self) -> int:
        """Requests not yet evaluating: queued for a thread, or in one (being read, or waiting
        for an evaluation slot)."""
        return len(self._waiting) + max(0, len(self._handling) - len(self._busy))

    def _over_budget(self) -> bool:
        """Whether a request arriving now would likely wait over half the queue budget before
        it is evaluated: the requests ahead of it times the recent time per evaluation, divided
        by the slots; or the oldest request waiting for a thread has waited that long. Half, so
        that refusals happen here, cheaply, and seldom in a thread after the full wait."""
        waiting = self._waiting
        ahead = self._requests_waiting()
        if not ahead:
            return False
        limit = self.limits.queue_budget_seconds / 2
        if ahead * self._seconds_per_request / self.limits.app_concurrency > limit:
            return True
        try:
            return time.monotonic() - waiting[0] > limit
        except IndexError:
            return False

    def on_client_socket_readable(self, conn: DeadlineConn, client: socket.socket) -> None:
        if not self._over_budget():
            super().on_client_socket_readable(conn, client)
            return
        self._door(conn)

    def _door(self, conn: DeadlineConn) -> None:
        """Answer a POST with 503 from here if it is all here and plain; else queue it as usual.
        A refused connection stays registered in the poller: two fewer system calls per refusal."""
        try:
            data, head, closed = door.read_request(conn.sock, door.MAX_HEAD_BYTES + self.limits.buffer_body_bytes)
        except OSError:
            data, head, closed = b"", None, True
        refusable = head is not None and head.method == "POST"
        refused = refusable and door.send_now(conn.sock, self._door_answer(head.close))
        if refused:
            if self._metrics is not None:
                self._count(self._metrics.count_request, endpoint_label(head.path), "", "", "overloaded", None)
            self._log_shed()
            if not head.close:
                self.keepalived_conns.remove(conn)  # and back at the end, with a fresh timeout
                conn.set_timeout()
                self.keepalived_conns.append(conn)
                return
        self.poller.unregister(conn.sock)
        self.keepalived_conns.remove(conn)
        if refused:  # the client asked to close after this answer
            self.nr_conns -= 1
            conn.close(graceful=True)
        elif closed or refusable:  # the peer went away, or the answer could not be written at once
            self.nr_conns -= 1
            conn.close()
        else:
            if data:
                conn.parser.unreader.unread(data)
            self.enqueue_req(conn)

    def _door_answer(self, close: bool) -> bytes:
        answers = self._door_answers
        if close not in answers:
            reason = ("gpushare-webhook is overloaded: a new request would wait over half of "
                      f"overload.queue_budget_seconds={self.limits.queue_budget_seconds:g} to be evaluated, "
                      "so this one was refused without evaluation; the API server applies the webhook's "
                      "failurePolicy")
            answers[close] = http_json(503, error_body(503, reason), close=close)
        return answers[close]

    # -- requests

    def handle_request(self, req: Any, conn: DeadlineConn) -> bool:
        conn.stage = "body"
        if self._metrics is not None:
            self._count(self._metrics.queue_wait.observe, conn.waited)
        if req.method == "POST" and conn.waited > self.limits.queue_budget_seconds:
            return self._shed(req, conn)
        self._buffer_body(req)
        self._app_slots.get()
        if req.method == "POST" and time.monotonic() - conn.queued_at > self.limits.queue_budget_seconds:
            self._app_slots.put(None)  # the wait for a slot used up the budget: refuse, don't answer late
            return self._shed(req, conn)
        self._busy.append(None)
        started = time.monotonic()
        try:
            return bool(super().handle_request(req, conn))
        finally:
            self._busy.pop()
            self._app_slots.put(None)
            # A moving average of the time a request holds a slot: it turns the number of
            # requests ahead into the wait a new one can expect (see _over_budget).
            self._seconds_per_request += (time.monotonic() - started - self._seconds_per_request) / 64

    def _buffer_body(self, req: Any) -> None:
        """Read a Content-Length body (under the client deadline) before the request takes an
        evaluation slot, so that a slow sender cannot hold one. Not with ``Expect: 100-continue``:
        that client sends its body only after gunicorn's interim 100, which the app triggers."""
        reader = getattr(req.body, "reader", None)
        if isinstance(reader, LengthReader) and 0 < reader.length <= self.limits.buffer_body_bytes \
                and not any(name == "EXPECT" for name, _ in req.headers):
            req.body = io.BytesIO(req.body.read(reader.length))

    def _shed(self, req: Any, conn: DeadlineConn) -> bool:
        waited = time.monotonic() - conn.queued_at
        reason = (f"gpushare-webhook is overloaded: this request waited {waited:.2f} s to be evaluated "
                  f"(overload.queue_budget_seconds={self.limits.queue_budget_seconds:g}) and was refused "
                  "without evaluation; the API server applies the webhook's failurePolicy")
        keep_alive = not req.should_close()
        conn.sock.sendall(http_json(503, error_body(503, reason), close=not keep_alive))
        if self._metrics is not None:
            self._count(self._metrics.count_request, endpoint_label(req.path), "", "", "overloaded", None)
        self._log_shed()
        return keep_alive  # gunicorn drains the unread body before reusing the connection

    def _log_shed(self) -> None:
        """One warning per 5 s at most: under overload a line per refusal would add to the load."""
        self._shed_since_log += 1
        now = time.monotonic()
        if now - self._shed_logged_at >= 5.0:
            log.warning("overloaded: refused %d requests that waited over %g s for a worker thread",
                        self._shed_since_log, self.limits.queue_budget_seconds)
            self._shed_since_log, self._shed_logged_at = 0, now

    def _keepalive_after(self, conn: DeadlineConn, keepalive: bool) -> bool:
        try:
            return bool(super()._keepalive_after(conn, keepalive))
        except ClientTimeout:  # the leftover body trickled in too slowly: just close
            return False

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
