"""How fresh the cluster state is: filled by the state source, read by /metrics and /readyz.

A snapshot source fills it once at load; a live (watch) source calls ``synced`` after its
initial lists and ``event`` for every watch event it applies.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class StateStatus:
    source: str
    # True once the state holds a complete view (snapshot loaded, or initial lists done).
    is_synced: bool = False
    # Unix time of the last watch event applied (for a snapshot: when it was loaded).
    last_event_time: float | None = None
    events: int = 0

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
