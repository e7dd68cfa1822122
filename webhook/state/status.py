"""How fresh the cluster state is: filled by the state source, read by /metrics and /readyz.

A snapshot source fills it once at load; a live (watch) source calls ``synced`` after its
initial lists and ``event`` for every watch event it applies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class ConfigzStatus:
    """What the opt-in kubelet /configz reader did, for /metrics (written by its threads)."""

    reads_ok: int = 0
    reads_failed: int = 0
    # GPU nodes by what their last read found: "static", "none", "other", or "unread" (failed or pending).
    nodes: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def read(self, node: str, outcome: str, ok: bool) -> None:
        with self._lock:
            if ok:
                self.reads_ok += 1
            else:
                self.reads_failed += 1
            self.nodes[node] = outcome

    def pending(self, node: str) -> None:
        """A GPU node to be read, not read yet."""
        with self._lock:
            self.nodes.setdefault(node, "unread")

    def forget(self, node: str) -> None:
        with self._lock:
            self.nodes.pop(node, None)

    def by_outcome(self) -> dict[str, int]:
        """GPU nodes per outcome, every outcome present (a scrape sees zeros, not gaps)."""
        counts = dict.fromkeys(("static", "none", "other", "unread"), 0)
        with self._lock:
            for outcome in self.nodes.values():
                counts[outcome] += 1
        return counts


@dataclass
class StateStatus:
    source: str
    # True once the state holds a complete view (snapshot loaded, or initial lists done).
    is_synced: bool = False
    # Unix time of the last watch event applied (for a snapshot: when it was loaded).
    last_event_time: float | None = None
    events: int = 0
    # Set when the opt-in kubelet /configz reader runs (state.kubelet_configz.enabled).
    configz: ConfigzStatus | None = None
    # Set when replicas elect a leader (leader.enabled, live state): whether this one leads.
    leader: Callable[[], bool] | None = None

    def synced(self, value: bool = True) -> None:
        self.is_synced = value

    def event(self, when: float | None = None) -> None:
        """Record one applied watch event (plain attribute writes: safe from any thread)."""
        self.last_event_time = when if when is not None else time.time()
        self.events += 1

    def age_seconds(self, now: float | None = None) -> float | None:
        """Seconds since the last event, or None when there has been none."""
        if self.last_event_time is None:
            return None
        current = now if now is not None else time.time()
        return max(0.0, current - self.last_event_time)

    @classmethod
    def loaded_snapshot(cls, source: str) -> StateStatus:
        status = cls(source)
        status.event()
        status.synced()
        return status
