"""Prometheus metrics of one server process (prometheus_client, one registry per app).

Every label takes values from a fixed set (kinds the engine knows, rule ids, endpoints), so a
hostile client cannot grow the registry by sending made-up kinds or paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from webhook.state.audit_loop import AuditStatus
from webhook.state.status import StateStatus

# The *_created series double the exposition and no dashboard here uses them.
disable_created_metrics()
# "ok": an answer from /dry-run or the scheduler extender, which have no allow/deny decision.
OUTCOMES = ("allowed", "denied", "ok", "invalid", "unauthorized", "too_large", "timeout", "overloaded", "error")
# Admission answers take milliseconds; the tail buckets show queueing before the webhook timeout.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def outcome_for_status(status: int) -> str:
    """The outcome label of a request refused before (or instead of) a verdict."""
    return {400: "invalid", 401: "unauthorized", 403: "unauthorized", 408: "timeout", 413: "too_large",
            503: "overloaded"}.get(status, "invalid" if 400 <= status < 500 else "error")


class _StateCollector(Collector):
    """State source, sync status and watch-event age, read from the StateStatus at scrape time."""

    def __init__(self, status: Callable[[], StateStatus | None]) -> None:
        self._status = status

    def collect(self) -> Iterable[Metric]:
        status = self._status()
        if status is None:
            return
        info = InfoMetricFamily("gpushare_state", "Where the cluster state comes from.")
        info.add_metric([], {"source": status.source})
        yield info
        yield GaugeMetricFamily("gpushare_state_synced", "1 when the cluster state holds a complete view.",
                                value=1.0 if status.is_synced else 0.0)
        yield CounterMetricFamily("gpushare_state_events", "Watch events applied to the cluster state.",
                                  value=status.events)
        if status.last_event_time is not None:
            yield GaugeMetricFamily("gpushare_state_last_event_timestamp_seconds",
                                    "Unix time of the last watch event (snapshot: load time).",
                                    value=status.last_event_time)
            yield GaugeMetricFamily("gpushare_state_last_event_age_seconds",
                                    "Seconds since the last watch event (snapshot: since load).",
                                    value=status.age_seconds() or 0.0)
        if status.leader is not None:
            yield GaugeMetricFamily("gpushare_binding_leader", "1 while this replica holds the leader Lease and "
                                    "judges pods/binding reviews.", value=1.0 if status.leader() else 0.0)
        configz = status.configz
        if configz is not None:  # the opt-in kubelet /configz reader (state.kubelet_configz)
            reads = CounterMetricFamily("gpushare_kubelet_configz_reads", "Reads of kubelets' /configz through the "
                                        "API server's node proxy, by result.", labels=["result"])
            reads.add_metric(["ok"], configz.reads_ok)
            reads.add_metric(["failed"], configz.reads_failed)
            yield reads
            nodes = GaugeMetricFamily("gpushare_kubelet_configz_nodes", "GPU nodes without the CPU manager policy "
                                      "label, by the policy their kubelet reported (unread: not read, or the "
                                      "read failed, so the policy is unknown).", labels=["policy"])
            for policy, count in configz.by_outcome().items():
                nodes.add_metric([policy], count)
            yield nodes

    def describe(self) -> Iterable[Metric]:
        return []


class _AuditCollector(Collector):
    """The last periodic audit: findings by rule and severity, when it ran and how long it took."""

    def __init__(self, status: Callable[[], AuditStatus | None]) -> None:
        self._status = status

    def collect(self) -> Iterable[Metric]:
        status = self._status()
        if status is None or (status.last_run is None and not status.failures):
            return
        yield CounterMetricFamily("gpushare_audit_failures", "Audits that failed or were stopped at "
                                  "audit.run_timeout_seconds.", value=status.failures)
        if status.last_run is None:
            return
        findings = GaugeMetricFamily("gpushare_audit_findings", "Findings of the last audit of the live state, "
                                     "by rule and severity.", labels=["rule", "severity"])
        for (rule, severity), count in sorted(status.counts.items()):
            findings.add_metric([rule, severity], count)
        yield findings
        yield GaugeMetricFamily("gpushare_audit_last_run_timestamp_seconds", "Unix time the last audit finished.",
                                value=status.last_run)
        yield GaugeMetricFamily("gpushare_audit_duration_seconds", "How long the last audit took.",
                                value=status.duration)
        yield CounterMetricFamily("gpushare_audit_runs", "Audits of the live state since start.", value=status.runs)
        yield GaugeMetricFamily("gpushare_audit_cpu_seconds", "CPU time (user + system) of the last audit's own "
                                "process, apart from the serving process.", value=status.cpu_seconds)
        yield GaugeMetricFamily("gpushare_audit_fork_seconds", "How long the last audit's fork took: the moment "
                                "the serving process holds its requests up for the audit.", value=status.fork_seconds)
        yield GaugeMetricFamily("gpushare_audit_reports_written", "Report objects this replica created or replaced "
                                "after its last audit (0 where another replica leads).", value=status.reports_written)
        yield GaugeMetricFamily("gpushare_audit_reports_deleted", "Stale report objects this replica deleted after "
                                "its last audit.", value=status.reports_deleted)
        yield CounterMetricFamily("gpushare_audit_report_failures", "Audits after which the report objects could not "
                                  "be written (see the log).", value=status.report_failures)

    def describe(self) -> Iterable[Metric]:
        return []


class Metrics:
    """The metrics one process exposes on /metrics."""

    def __init__(self, known_kinds: Iterable[str], state_status: Callable[[], StateStatus | None],
                 audit_status: Callable[[], AuditStatus | None] = lambda: None) -> None:
        self.registry = CollectorRegistry()
        self.known_kinds = frozenset(known_kinds)
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        r.register(_StateCollector(state_status))
        r.register(_AuditCollector(audit_status))
        build = Gauge("gpushare_build_info", "Version of the running webhook.", ["version"], registry=r)
        build.labels(_version()).set(1)
        self.requests = Counter("gpushare_admission_requests", "Requests by endpoint, object kind, operation "
                                "and outcome.", ["endpoint", "kind", "operation", "outcome"], registry=r)
        self.duration = Histogram("gpushare_admission_duration_seconds", "Time from reading the request to "
                                  "the answer, by endpoint (excludes queueing; see gpushare_queue_wait_seconds).",
                                  ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.denials = Counter("gpushare_denials", "Answers in which the rule denied, by rule id.", ["rule"],
                               registry=r)
        self.warnings = Counter("gpushare_warnings", "Answers in which the rule warned, by rule id.", ["rule"],
                                registry=r)
        self.patches = Counter("gpushare_patches", "Answers carrying a JSON patch, by mutation id.", ["mutation"],
                               registry=r)
        # Namespace is a label here: exemptions are honoured only in namespaces an admin allowed or
        # named in a grant, so the set stays as small as the admins keep it.
        self.exemptions = Counter("gpushare_exemptions", "Answers in which an honoured exemption set a rule "
                                  "aside, by rule id and namespace.", ["rule", "namespace"], registry=r)
        self.in_flight = Gauge("gpushare_in_flight_requests", "Requests being evaluated (holding an evaluation "
                               "slot, or a review the poller evaluates).", registry=r)
        self.waiting = Gauge("gpushare_waiting_requests", "Reviews and tool requests waiting to be evaluated.",
                             registry=r)
        self.review_estimate = Gauge("gpushare_review_seconds_estimate", "The recent time one review's evaluation "
                                     "takes, as the refusals by deadline estimate it.", registry=r)
        self.queue_wait = Histogram("gpushare_queue_wait_seconds", "Time a request waited to be evaluated.",
                                    buckets=LATENCY_BUCKETS, registry=r)
        self.client_timeouts = Counter("gpushare_client_timeouts", "Connections closed because the client was too "
                                       "slow, by stage (handshake, headers, body; answer: it did not read its "
                                       "answer).", ["stage"], registry=r)
        self.open_connections = Gauge("gpushare_open_connections", "Open client connections of this process.",
                                      registry=r)
        self.evicted = Counter("gpushare_connections_evicted", "Connections closed to make room, by kind "
                               "(unrequested: no complete request yet; idle: kept-alive; slow: in a handshake or "
                               "request too long; busy: the new one, every other connection being busy; unread: "
                               "its answer waited longest while unsent answers were over their limit).", ["kind"],
                               registry=r)
        self._children: dict[tuple[Any, ...], Any] = {}  # labels() validates on every call; look up once
        self._before_scrape: list[Callable[[], None]] = []
        self._rendered: list[Callable[[], bytes]] = []

    def before_scrape(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` before every exposition (the telemetry flush: a scrape sees every request before it)."""
        self._before_scrape.append(fn)

    def add_rendered(self, fn: Callable[[], bytes]) -> None:
        """Append ``fn()``, exposition text rendered elsewhere ahead of time (the GPU allocation
        cache), to every scrape: the registry never formats those series itself."""
        self._rendered.append(fn)

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def kind_label(self, kind: str) -> str:
        if not kind:
            return ""
        return kind if kind in self.known_kinds else "other"

    def count_request(self, endpoint: str, kind: str, operation: str, outcome: str, seconds: float | None) -> None:
        self._child(self.requests, endpoint, self.kind_label(kind), operation, outcome).inc()
        if seconds is not None:
            self._child(self.duration, endpoint).observe(seconds)

    def count_overloaded(self, by_endpoint: dict[str, int]) -> None:
        """Requests refused unevaluated under overload, counted in bulk (webhook.server.worker)."""
        for endpoint, count in by_endpoint.items():
            self._child(self.requests, endpoint, "", "", "overloaded").inc(count)

    def count_rules(self, denied: Iterable[str], warned: Iterable[str], patched: Iterable[str]) -> None:
        for rule_id in denied:
            self._child(self.denials, rule_id).inc()
        for rule_id in warned:
            self._child(self.warnings, rule_id).inc()
        for mutation_id in patched:
            self._child(self.patches, mutation_id).inc()

    def count_exemptions(self, rule_ids: Iterable[str], namespace: str) -> None:
        for rule_id in rule_ids:
            self._child(self.exemptions, rule_id, namespace).inc()

    def exposition(self) -> bytes:
        for fn in self._before_scrape:
            fn()
        return b"".join([generate_latest(self.registry), *(fn() for fn in self._rendered)])


def _version() -> str:
    try:
        return version("gpushare-webhook")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        return "unknown"
