"""Whether the rules may trust the cluster state right now, on /metrics (the "state stale" alert)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from policies.model.cluster import ClusterState


class StateHealthCollector(Collector):
    """``gpushare_state_usable`` (the state's own verdict: synced, and no watch disconnected past
    ``state.stale_after_seconds``) and ``gpushare_state_disconnected_seconds`` (the longest a
    watch has been disconnected; 0 for a snapshot)."""

    def __init__(self, state: Callable[[], ClusterState | None]) -> None:
        self._state = state

    def collect(self) -> Iterable[Metric]:
        state = self._state()
        if state is None:
            return
        yield GaugeMetricFamily("gpushare_state_usable", "1 when the rules may trust the cluster state (synced, "
                                "no watch disconnected longer than state.stale_after_seconds).",
                                value=1.0 if state.availability().usable else 0.0)
        reflectors = getattr(state, "reflectors", ())
        yield GaugeMetricFamily("gpushare_state_disconnected_seconds", "Longest time a watch of the cluster "
                                "state has been disconnected (0 while all are connected).",
                                value=max((r.stale_for() for r in reflectors), default=0.0))

    def describe(self) -> Iterable[Metric]:
        return []
