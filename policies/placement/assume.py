"""What this process admitted that the watch has not shown yet: the assume-cache.

Two records, both bounded by a TTL and a size:

- **assumed placements**: pods this process admitted onto a node (a ``pods/binding`` or a
  Pod created with ``spec.nodeName``). Until the watch shows the pod on that node, the
  placement rules count it there, so two concurrent bindings cannot both be judged
  against the same empty node (GB001).
- **recent pods**: pods this process admitted at CREATE, so that a binding which arrives
  before the watch has delivered its pod still finds it.

``LedgerView`` lays both over a ClusterState, read-only: dry-run and CLI paths may read
through it and never change it. Only ``Engine.admit`` records, under the node's lock.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from policies.model.cluster import ClusterState, PodInfo, StateView

_STRIPES = 64


@dataclass(frozen=True, slots=True)
class _Entry:
    pod: PodInfo
    expires: float


class _TimedRecords:
    """An insertion-ordered map with a TTL per entry and a size bound (oldest dropped first)."""

    def __init__(self, ttl: float, max_entries: int, clock: Callable[[], float]) -> None:
        self._ttl, self._max, self._clock = ttl, max_entries, clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def put(self, pod: PodInfo) -> None:
        self._entries.pop(pod.key, None)
        self._entries[pod.key] = _Entry(pod, self._clock() + self._ttl)
        self.sweep()
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def get(self, key: str) -> PodInfo | None:
        entry = self._entries.get(key)
        if entry is None or entry.expires <= self._clock():
            return None
        return entry.pod

    def drop(self, key: str) -> None:
        self._entries.pop(key, None)

    def sweep(self) -> None:
        """Drop expired entries from the old end (entries expire in insertion order)."""
        now = self._clock()
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.expires > now:
                break
            del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


class PlacementLedger:
    """Thread-safe record of placements and pod creations admitted by this process."""

    def __init__(self, assume_ttl: float = 60.0, assume_max: int = 20000, recent_ttl: float = 60.0,
                 recent_max: int = 20000, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._assumed = _TimedRecords(assume_ttl, assume_max, clock)
        self._by_node: dict[str, set[str]] = {}
        self._recent = _TimedRecords(recent_ttl, recent_max, clock)
        self._node_locks = [threading.Lock() for _ in range(_STRIPES)]

    def node_lock(self, node: str) -> threading.Lock:
        """The lock that serialises judging-and-recording placements onto ``node``."""
        return self._node_locks[hash(node) % _STRIPES]

    def assume(self, pod: PodInfo) -> None:
        """Count ``pod`` on ``pod.node_name`` until the watch shows it there (or the TTL passes)."""
        with self._lock:
            old = self._assumed.get(pod.key)
            if old is not None:
                self._unindex(old)
            self._assumed.put(pod)
            self._by_node.setdefault(pod.node_name, set()).add(pod.key)

    def remember_created(self, pod: PodInfo) -> None:
        with self._lock:
            self._recent.put(pod)

    def _unindex(self, pod: PodInfo) -> None:
        keys = self._by_node.get(pod.node_name)
        if keys is not None:
            keys.discard(pod.key)
            if not keys:
                del self._by_node[pod.node_name]

    def assumed_on(self, node: str, seen: Callable[[PodInfo], bool]) -> list[PodInfo]:
        """Live assumptions on ``node``; those the watch already shows (``seen``) are forgotten."""
        with self._lock:
            out: list[PodInfo] = []
            for key in list(self._by_node.get(node, ())):
                pod = self._assumed.get(key)
                if pod is None or seen(pod):
                    if pod is not None:
                        self._assumed.drop(key)
                    self._by_node[node].discard(key)
                    continue
                out.append(pod)
            if node in self._by_node and not self._by_node[node]:
                del self._by_node[node]
            return out

    def assumed(self, key: str) -> PodInfo | None:
        with self._lock:
            return self._assumed.get(key)

    def recent(self, key: str) -> PodInfo | None:
        with self._lock:
            return self._recent.get(key)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            self._assumed.sweep()
            self._recent.sweep()
            return len(self._assumed), len(self._recent)

    def view(self, base: ClusterState) -> LedgerView:
        return LedgerView(base, self)


class LedgerView(StateView):
    """A ClusterState: ``base`` plus the ledger's assumptions and recent pods. Never writes the base."""

    def __init__(self, base: ClusterState, ledger: PlacementLedger) -> None:
        super().__init__(base)
        self.ledger = ledger

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        found = self.base.get_pod(namespace, name)
        if found is not None or self.base.has_pod(namespace, name):
            return found
        key = f"{namespace}/{name}"
        return self.ledger.assumed(key) or self.ledger.recent(key)

    def has_pod(self, namespace: str, name: str) -> bool:
        key = f"{namespace}/{name}"
        return (self.base.has_pod(namespace, name) or self.ledger.assumed(key) is not None
                or self.ledger.recent(key) is not None)

    def pods_on_node(self, node: str) -> list[PodInfo]:
        pods = self.base.pods_on_node(node)
        shown = {p.key for p in pods}

        def seen(pod: PodInfo) -> bool:
            # The watch shows the pod on this node: its own record now counts. A pod the
            # watch shows deleted or finished no longer holds GPUs.
            if pod.key in shown:
                return True
            namespace, name = pod.key.split("/", 1)
            return self.base.has_pod(namespace, name) and self.base.get_pod(namespace, name) is None

        return pods + self.ledger.assumed_on(node, seen)
