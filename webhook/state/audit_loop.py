"""The server's periodic audit of the live state (off for snapshots: they do not change), and the
report objects the leader writes after it.

A thread of the serving process waits for the state to sync, then every
``audit.interval_seconds`` forks a child (``forked``) that audits the state as it was at the
fork and sends back the counts /metrics shows. The audit's CPU is the child's: admission
threads never wait for the interpreter lock behind it (bench/audit_admission.py measures it).

Then, when report objects are on (``audit.reports``), the thread asks whether this replica may
write them *now* (the elected leader, or the one replica when leader election is off) and tells
the child, which writes them with its own API client (``report_writer.publish``: the objects are
built and sent from the child too) and says what it wrote. A follower's child writes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from policies.audit.audit import Auditor, AuditResult
from policies.model.cluster import ClusterState
from webhook.settings import Settings
from webhook.state import forked
from webhook.state.report_writer import WriteSummary

log = logging.getLogger("gpushare.audit")

# What writes the report objects, in the child: the audit's result and its time in, a summary out.
Publish = Callable[[AuditResult, float], WriteSummary]


@dataclass
class AuditStatus:
    """What the last run found, for /metrics."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    last_run: float | None = None  # Unix time the last successful run finished
    duration: float = 0.0
    runs: int = 0
    cpu_seconds: float = 0.0  # the last run's child: user + system CPU
    fork_seconds: float = 0.0  # the worker's own part: the fork (the one moment it holds up requests)
    failures: int = 0  # runs that failed or were stopped at audit.run_timeout_seconds
    reports_written: int = 0  # report objects this replica wrote in its last run (0: a follower)
    reports_deleted: int = 0
    report_failures: int = 0  # runs whose report writes the API server refused
    nodes: int = 0
    pods: int = 0


class AuditLoop:
    def __init__(self, state: ClusterState, settings: Settings, ready: Callable[[], bool], *,
                 publish: Publish | None = None, may_publish: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.time) -> None:
        self.state, self.settings, self.ready, self.clock = state, settings, ready, clock
        self.publish, self.may_publish = publish, may_publish
        self.interval = settings.audit.interval_seconds
        self.status = AuditStatus()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._child: forked.Child | None = None
        self._last_problem = ""

    # -- one run -----------------------------------------------------------------------------
    def run_once(self) -> AuditStatus:
        """Audit in a child process; returns (and keeps) the new status."""
        previous = self.status
        now = self.clock()
        started = time.perf_counter()
        deadline = time.monotonic() + self.settings.audit.run_timeout_seconds
        held = getattr(self.state, "writes_held", None)
        child = self._child = forked.start(lambda channel: self._in_child(channel, now),
                                           held=[held()] if held is not None else [])
        fork_seconds = time.perf_counter() - started
        report: dict[str, Any] | None = None
        try:
            found = child.receive(deadline)
            if "error" in found:
                raise forked.ChildFailed(found["error"])
            if self.publish is not None:
                leading = self.may_publish()
                child.send({"publish": leading})
                if leading:
                    report = child.receive(deadline)
            ended = child.wait(deadline)
        except forked.ChildFailed as exc:
            self.status = replace(previous, failures=previous.failures + 1)
            self._problem(f"audit: the run failed: {exc}")
            return self.status
        finally:
            child.kill()  # reaped already on every path but an unexpected error: then it is stopped here
            self._child = None
        counts: Counter[tuple[str, str]] = Counter({(r, s): n for r, s, n in found["counts"]})
        status = AuditStatus(counts=counts, last_run=self.clock(), duration=time.perf_counter() - started,
                             runs=previous.runs + 1, cpu_seconds=ended.cpu_seconds, fork_seconds=fork_seconds,
                             failures=previous.failures,
                             report_failures=previous.report_failures, nodes=found["nodes"], pods=found["pods"])
        said = ""
        if report is not None and "report_error" in report:
            status.report_failures += 1
            self._problem(f"audit: cannot write report objects: {report['report_error']}")
        else:
            self._last_problem = ""
            if report is not None:
                status.reports_written, status.reports_deleted = report["written"], report["deleted"]
                said = f"; {report['summary']}"
        self.status = status
        log.info("audit: %d findings on %d nodes and %d GPU pods in %.2fs (child process CPU %.2fs, peak RSS "
                 "%.0f MiB; fork %.1f ms)%s", sum(counts.values()), status.nodes, status.pods, status.duration,
                 ended.cpu_seconds, ended.peak_rss_mib, fork_seconds * 1000, said)
        return status

    def _in_child(self, channel: forked.Channel, now: float) -> None:
        result = Auditor(self.settings).audit(self.state, now)
        channel.send({"counts": [[r, s, n] for (r, s), n in sorted(result.counts().items())],
                      "nodes": result.nodes, "pods": result.pods})
        if self.publish is None:
            return
        order = channel.receive()
        if not order or not order.get("publish"):
            return
        try:
            summary = self.publish(result, now)
        except Exception as exc:  # refused by the API server, unreachable...: said, not raised
            channel.send({"report_error": " ".join(str(exc).split())[:500] or type(exc).__name__})
            return
        channel.send({"written": len(summary.written), "deleted": len(summary.deleted),
                      "summary": summary.describe()})

    def _problem(self, message: str) -> None:
        """Warn once per distinct problem; a repeat every interval goes to the info level."""
        log.log(logging.WARNING if message != self._last_problem else logging.INFO, "%s", message)
        self._last_problem = message

    # -- the loop ----------------------------------------------------------------------------
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
        child = self._child
        if child is not None:
            child.kill()

