"""Request telemetry off the hot path: metrics updates and log lines run in one background thread.

Updating Prometheus metrics and writing a log line on the request thread cost little alone,
but with 16 request threads every metric's lock, the log queue's wake-up of a writer thread
per request and the GIL hand-offs they cause made them queue behind each other: measured
about 80 µs of server CPU per request over TLS at 16 connections (bench/admission.py). Here a
request thread only appends the call to a deque (atomic, wakes nobody). One thread runs
what has collected every ``interval`` seconds, or sooner when ``wake_at`` calls are pending.

``flush()`` runs everything pending at once: a /metrics scrape calls it first, so a scrape
shows every request answered before it; so does exit, so no log line is lost.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("gpushare.telemetry")


class Telemetry:
    """Deferred calls, run in order by one background thread (started lazily, again after a fork)."""

    def __init__(self, interval: float = 0.1, wake_at: int = 4096) -> None:
        self._interval = interval
        self._wake_at = wake_at
        self._pending: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._after_flush: list[Callable[[], None]] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._new_locks()
        forked = weakref.WeakMethod(self._forked)
        os.register_at_fork(after_in_child=lambda: (method := forked()) and method())

    def _new_locks(self) -> None:
        self._flush_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._wake = threading.Event()

    def _forked(self) -> None:
        # Threads do not survive a fork and a lock may have been held by one: start afresh.
        self._thread = None
        self._new_locks()

    def call(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` soon, in the telemetry thread (the hot path: one deque append)."""
        self._pending.append((fn, args))
        if self._thread is None:
            self._start()
        elif len(self._pending) >= self._wake_at:
            self._wake.set()

    def after_flush(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` after every flush (e.g. write the log lines the flush produced in one go)."""
        self._after_flush.append(fn)

    def flush(self) -> None:
        """Run every pending call now, in order."""
        with self._flush_lock:
            pending = self._pending
            while pending:
                fn, args = pending.popleft()
                try:
                    fn(*args)
                except Exception:  # telemetry must never take the server down
                    log.exception("telemetry call %s failed", getattr(fn, "__qualname__", fn))
            for done in self._after_flush:
                done()

    def close(self) -> None:
        """Stop the thread and flush what is left."""
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(2.0)
        self.flush()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                return
            self._stopping = False
            thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
            thread.start()
            self._thread = thread
            atexit.register(self.close)

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._interval)
            self._wake.clear()
            self.flush()
