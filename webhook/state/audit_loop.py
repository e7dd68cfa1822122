"""The server's periodic audit of the live state (off for snapshots: they do not change).

A daemon thread of the serving process audits every ``audit.interval_seconds`` once the
state is synced and keeps the last result; /metrics reads it. The audit holds no lock the
admission path takes for long (the state hands out copies of its lists), and between nodes it
gives the interpreter up so request threads are not kept waiting behind a long run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from policies.audit import Auditor, AuditResult
from policies.cluster import ClusterState
from policies.settings import Settings

log = logging.getLogger("gpushare.audit")


@dataclass
class AuditStatus:
    """What the last run found, for /metrics."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    last_run: float | None = None  # Unix time the last run finished
    duration: float = 0.0
    runs: int = 0
    result: AuditResult | None = None


class AuditLoop:
    def __init__(self, state: ClusterState, settings: Settings, ready: Callable[[], bool],
                 clock: Callable[[], float] = time.time) -> None:
        self.state, self.settings, self.ready, self.clock = state, settings, ready, clock
        self.interval = settings.audit.interval_seconds
        self.status = AuditStatus()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> AuditResult:
        started = time.perf_counter()
        result = Auditor(self.settings).audit(self.state, self.clock())
        self.status = AuditStatus(result.counts(), self.clock(), time.perf_counter() - started,
                                  self.status.runs + 1, result)
        return result

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.ready():
                try:
                    self.run_once()
                except Exception:  # a bug in one run must not end the loop
                    log.exception("audit run failed")
                wait = self.interval
            else:
                wait = 1.0  # not synced yet: look again soon
            self._stop.wait(wait)

    def start(self) -> None:
        if self.interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="audit", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
