"""The gunicorn worker: an event loop of our own on gunicorn's public base ``Worker``.

gunicorn runs it as ``worker_class`` (``server.worker: webhook``, the default); it uses only
the documented extension points (the base ``gunicorn.workers.base.Worker``: ``init_process``,
``run``, ``notify``, ``handle_exit``, ``load_wsgi``; the ``ssl_context``, ``pre_request`` and
``post_request`` server hooks) and gunicorn's HTTP library, never another worker's internals.
It joins three parts, each in a module of its own:

- **the transport** (``webhook.server.transport``): one thread, the poller, accepts, does the
  TLS handshake without blocking, reads each request until it is complete and writes each
  answer without blocking; slow, idle and unread connections cost a socket, never a thread;
- **admission scheduling** (``webhook.server.scheduling``, no sockets): each complete request
  is a review, a tool call, a probe or a scrape, as its route declared; the scheduler says
  whether it is refused (a fast 503 written by the poller: no thread, no HTTP parser), evaluated
  by the poller itself (probes; reviews while none is with a thread: with the GIL only one
  thread runs Python at a time anyway, and a hand-off costs more than it buys) or on a thread
  in one of the slots;
- **running the app** (``webhook.server.app_runner``): gunicorn's parser and WSGI call, the
  answer built in memory; the poller writes it.

Slots are for evaluation only: an answer is built in memory, the slot is free, and the poller
writes the answer. ``server.worker: gthread`` runs stock gunicorn instead, with the same
scheduling as WSGI middleware (``webhook.server.scheduling_middleware``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from typing import Any

from webhook.http.deadline import timeout_parameter
from webhook.http.errors import error_body
from webhook.http.gunicorn_adapter import Worker
from webhook.http.routing import RouteTable, Work, route_table
from webhook.server import door
from webhook.server.app_runner import AppRunner, Outcome
from webhook.server.connection import Conn, http_json
from webhook.server.heartbeat import Heartbeating
from webhook.server.process_tuning import tune_process
from webhook.server.scheduling import Route, Scheduler
from webhook.server.tallies import Counts, Shedding, attach_tallies
from webhook.server.transport import Transport
from webhook.settings import OverloadSettings

log = logging.getLogger("gpushare.worker")
_SLOTTED = (Work.REVIEW, Work.LARGE_REVIEW, Work.TOOL)


class WebhookWorker(Heartbeating, Worker):  # type: ignore[misc]
    """See the module doc."""

    limits = OverloadSettings()
    max_body_bytes = 4 * 1024 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scheduler: Scheduler[Conn] = Scheduler(self.limits)
        self.counts = Counts(None, None)
        self.routes = RouteTable()  # the app's, once loaded: every request a probe until then
        self.shedding = Shedding(self.counts, self.scheduler.reason)
        # Work for threads: evaluations holding a slot (one thread per slot, so none ever waits
        # for one), and the rest (reading a large body, scrapes). What they hand back.
        self._evaluations: queue.SimpleQueue[Conn | None] = queue.SimpleQueue()
        self._helpers: queue.SimpleQueue[tuple[bool, Conn] | None] = queue.SimpleQueue()
        self._done: deque[Outcome] = deque()
        self._threads: list[threading.Thread] = []
        self._in_threads = 0
        self._notified_at = 0.0

    # -- gunicorn's base Worker

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.routes = route_table(self.wsgi)  # what create_app hands the worker with the app
        self.counts, self.shedding = attach_tallies(self.wsgi, self.scheduler, self.routes)

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.alive = False  # the signal wakes the poller through the base Worker's pipe

    def run(self) -> None:
        tune_process(self.limits)  # the poller gives the GIL up at each of its socket calls
        self.runner = AppRunner(self, self.max_body_bytes, self.counts)
        self.transport = Transport(self, self.limits, self.max_body_bytes, self.cfg.keepalive,
                                   self._tls if self.cfg.is_ssl else None, self.counts)
        if self.counts.metrics is not None:
            self.counts.metrics.open_connections.set_function(lambda: self.transport.nr_conns)
        self.transport.selector.register(self.PIPE[0], selectors.EVENT_READ, self._wake)
        self.transport.listen(self.sockets)
        limits = self.limits
        evaluators = limits.app_concurrency + limits.large_review_concurrency + limits.auxiliary_concurrency
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
        transport = self.transport
        events = transport.select(0 if self.scheduler.poller_has_work() else timeout)
        self._finish()  # threads done first: a review that arrives now then sees their slots free
        transport.handle(events)
        if self.shedding.pending():
            self.shedding.flush()
        self._finish()
        self._evaluate_in_poller()
        transport.after_turn(time.monotonic())

    def _drain(self) -> None:
        """SIGTERM: stop accepting; requests already here are answered; a kept-alive connection
        may send one more request (answered with Connection: close) for a moment."""
        transport = self.transport
        transport.stop()
        grace = time.monotonic() + self.cfg.graceful_timeout
        while (self._in_threads or self.scheduler.busy() or transport.connections()) and time.monotonic() < grace:
            self._loop(0.1)
        transport.close_all()
        for _ in self._threads:
            self._evaluations.put(None)
            self._helpers.put(None)

    def _wake(self, _fileobj: Any) -> None:
        with contextlib.suppress(OSError):
            while os.read(self.PIPE[0], 4096):
                pass

    def _tls(self, sock: socket.socket) -> socket.socket:
        """``sock`` wrapped with the context of gunicorn's ``ssl_context`` server hook
        (webhook.server.tls_reload caches it per certificate version), with gunicorn's documented
        default as the base; the handshake is the poller's, without blocking."""
        cfg = self.cfg

        def default() -> ssl.SSLContext:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=cfg.ca_certs)
            context.load_cert_chain(certfile=cfg.certfile, keyfile=cfg.keyfile)
            context.verify_mode = cfg.cert_reqs
            if cfg.ciphers:
                context.set_ciphers(cfg.ciphers)
            return context

        context: ssl.SSLContext = cfg.ssl_context(cfg, default)
        return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False,
                                   suppress_ragged_eofs=cfg.suppress_ragged_eofs)

    # -- what the transport hands over (its Admission)

    def door_answer(self, head: door.RequestHead, now: float) -> bytes | None:
        work = self.scheduler.lane(self.routes.work_of(head.method, head.path), head.length)
        why = self.scheduler.refusal(work, head.timeout, now) if work in _SLOTTED else None
        return None if why is None else self.shedding.answer(why, head.timeout, close=head.close)

    def refused(self, head: door.RequestHead) -> None:
        self.shedding.tally(head.path)

    def dispatch(self, conn: Conn, reading: door.Reading, *, judged: bool) -> None:
        """Refuse a complete request at the door if the scheduler says so (unless the kept-alive
        door ``judged`` it a moment ago), else hand it to the scheduler."""
        if self.shedding.pending():
            self.shedding.flush()  # before anything is served: a scrape then shows every refusal
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
        # The parser answers a head the door could not read (400).
        work = (self.scheduler.lane(self.routes.work_of(head.method, head.path), head.length) if head is not None
                else Work.PROBE)
        conn.work = work
        timeout = head.timeout if head is not None else None
        if head is not None and head.plain and reading.size == len(conn.data) and not judged and work in _SLOTTED:
            answer = self.door_answer(head, conn.queued_at)
            if answer is not None:
                if self.transport.refuse_now(conn, answer, head):
                    self.shedding.tally(head.path)
                return
        inline = head is not None and head.plain and len(conn.data) <= self.limits.inline_max_bytes
        self._place(conn, self.scheduler.arrive(conn, work, timeout, conn.queued_at, inline=inline))

    def _arrived_in_thread(self, conn: Conn) -> None:
        """A request a thread has read in full (its body in memory): scheduled like any other."""
        req = conn.req
        conn.head = door.RequestHead(req.method, req.path, req.should_close(),
                                     timeout_parameter(req.query) if req.query else None, False)
        conn.size = None
        work = conn.work = self.scheduler.lane(self.routes.work_of(req.method, req.path), None)  # not buffered: large
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
                answer, keep = self.runner.evaluate(conn, now)
                took = time.monotonic() - now
                if review:
                    scheduler.evaluating_in_poller(False)
                    scheduler.finished(work, took, now + took, in_thread=False)
                self.transport.writer.answer(conn, answer, keep)
                if took >= self.limits.inline_slice_seconds / 4:
                    return  # a costly one: look at the connections (probes, handshakes) before the next
            if time.monotonic() >= stop:
                return

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
        self.shedding.tally(head.path if head is not None else "")
        self.transport.writer.answer(conn, http_json(503, error_body(503, reason), close=not keep), keep)

    def _too_large(self, conn: Conn, head: door.RequestHead | None) -> None:
        """A body announced over server.max_body_bytes: a 413 before it is read, then close
        (lingering, so the client reads the answer rather than a reset)."""
        conn.buf.clear()
        self.counts.refused(head.path if head else "", "too_large")
        answer = http_json(413, error_body(413, f"body larger than {self.max_body_bytes} bytes"), close=True)
        self.transport.writer.answer(conn, answer, False)

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
            self.transport.writer.answer(conn, outcome.answer, outcome.keep)
        if handled:
            self._start_granted()

    # -- threads: evaluations (one per slot), and helpers (large bodies, scrapes)

    def _report(self, outcome: Outcome) -> None:
        self._done.append(outcome)
        with contextlib.suppress(OSError):
            os.write(self.PIPE[1], b".")

    def _evaluator(self) -> None:
        """Runs requests that hold an evaluation slot; the answer goes back to the poller."""
        while (conn := self._evaluations.get()) is not None:
            started = time.monotonic()
            answer, keep = self.runner.evaluate(conn, started)
            self._report(Outcome(conn, answer, keep, time.monotonic() - started, slot=True))

    def _helper(self) -> None:
        """Reads what the poller left to a thread (a large body, under the client deadline), and
        runs scrapes (in a scrape slot, no evaluation slot)."""
        while (job := self._helpers.get()) is not None:
            read, conn = job
            if read:
                self._report(self.runner.read_request(conn))
            else:
                answer, keep = self.runner.evaluate(conn, time.monotonic())
                self._report(Outcome(conn, answer, keep, slot=True))


def worker_class(limits: OverloadSettings, max_body_bytes: int) -> type[WebhookWorker]:
    """The worker class with the configured limits baked in (gunicorn takes a class)."""
    return type("WebhookWorker", (WebhookWorker,), {"limits": limits, "max_body_bytes": max_body_bytes,
                                                    "__module__": __name__})
