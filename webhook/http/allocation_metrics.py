"""GPU allocation series for Prometheus, rendered from a cache that follows the cluster state.

A background thread (``start``) wakes every ``metrics.refresh_seconds``, asks the state's change
log which nodes changed since its last look (the watch writes that log on every event), recomputes
only those nodes with ``policies.placement.allocation.node_usage`` (the occupancy admission decides with),
and renders the text once. A scrape copies those bytes: nothing is recomputed per scrape, and no
admission request ever touches this cache. Series per node by default; per card on request
(``metrics.per_card``); docs/metrics.md lists them and counts them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from policies.model.cluster import ClusterState
from policies.model.settings import MIB_PER_GIB, Names
from policies.placement.allocation import CORE_MODE, NodeUsage, node_usage
from policies.placement.cards import CORE_PER_CARD
from webhook.settings import MetricsSettings

log = logging.getLogger("gpushare.metrics")

# (name, help) in exposition order; every one is a gauge.
NODE_FAMILIES = (
    ("gpushare_node_gpu_mode", "1 per node sharing GPUs, labelled with its mode (ack.node.gpu.schedule) and "
                               "placement."),
    ("gpushare_node_gpu_cards", "GPU cards the node shares."),
    ("gpushare_node_gpu_memory_assigned_gib", "GPU memory assigned to pods on the node, GiB."),
    ("gpushare_node_gpu_memory_total_gib", "GPU memory the node shares, GiB."),
    ("gpushare_node_gpu_core_assigned_percent", "Compute assigned on the node's cards, percent summed over cards "
                                                "(core_mem nodes only)."),
    ("gpushare_node_gpu_pods", "Pods holding GPU memory on the node."),
    ("gpushare_node_gpu_overcommitted_cards", "Cards with more GPU memory (or, on core_mem nodes, compute) "
                                              "assigned than they have."),
)
CARD_FAMILIES = (
    ("gpushare_gpu_memory_assigned_gib", "GPU memory assigned to pods on the card, GiB."),
    ("gpushare_gpu_memory_total_gib", "GPU memory of the card, GiB."),
    ("gpushare_gpu_core_assigned_percent", "Compute assigned on the card, percent (core_mem nodes only)."),
    ("gpushare_gpu_pods", "Pods sharing the card."),
)
# Per namespace and quota limit covering it (docs/quotas.md): ResourceQuota, ElasticQuotaTree node, ClusterQueue.
QUOTA_FAMILIES = (
    ("gpushare_namespace_gpu_quota_used", "What the namespaces under a GPU quota use of it, as the quota counts "
                                          "(GiB of GPU memory, percent of a card of compute)."),
    ("gpushare_namespace_gpu_quota_hard", "The GPU quota's limit (GiB of GPU memory, percent of a card of compute)."),
    ("gpushare_namespace_gpu_quota_left", "What is left of the GPU quota (GiB of GPU memory, percent of a card "
                                          "of compute)."),
)
CLUSTER_FAMILIES = (
    ("gpushare_cluster_gpu_memory_assigned_gib", "GPU memory assigned to pods in the cluster, GiB."),
    ("gpushare_cluster_gpu_memory_total_gib", "GPU memory shared in the cluster, GiB."),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _number(value: float) -> str:
    """A sample value: whole numbers without a fraction, others exactly."""
    return str(int(value)) if value == int(value) else repr(value)


def _header(name: str, text: str) -> str:
    return f"# HELP {name} {text}\n# TYPE {name} gauge\n"


@dataclass(frozen=True, slots=True)
class NodeLines:
    """One node's samples, by family name, plus what the cluster totals need."""

    lines: dict[str, str]
    assigned: float
    total: float
    series: int


def node_lines(usage: NodeUsage, model: str, per_card: str) -> NodeLines:
    scale = MIB_PER_GIB if usage.unit == "MiB" else 1  # the series count GiB; names.memory_unit may be MiB

    def gib(amount: int) -> str:
        return _number(amount / scale if scale != 1 else amount)

    node = _escape(usage.name)
    core_mem = usage.mode == CORE_MODE
    pods_on: dict[int, int] = {}
    for pod in usage.pods:
        for index in pod.mem_by_card:
            pods_on[index] = pods_on.get(index, 0) + 1
    over = sum(1 for c in usage.cards if c.used_mem > c.total_mem or (core_mem and c.used_core > CORE_PER_CARD))
    at = f'{{node="{node}"}}'
    mode = _labels([("node", usage.name), ("mode", usage.mode), ("placement", usage.placement)])
    lines = {
        "gpushare_node_gpu_mode": f"gpushare_node_gpu_mode{mode} 1\n",
        "gpushare_node_gpu_cards": f"gpushare_node_gpu_cards{at} {len(usage.cards)}\n",
        "gpushare_node_gpu_memory_assigned_gib": f"gpushare_node_gpu_memory_assigned_gib{at} {gib(usage.used_mem)}\n",
        "gpushare_node_gpu_memory_total_gib": f"gpushare_node_gpu_memory_total_gib{at} {gib(usage.total_mem)}\n",
        "gpushare_node_gpu_pods": f"gpushare_node_gpu_pods{at} {len(usage.pods)}\n",
        "gpushare_node_gpu_overcommitted_cards": f"gpushare_node_gpu_overcommitted_cards{at} {over}\n",
    }
    if core_mem:
        lines["gpushare_node_gpu_core_assigned_percent"] = \
            f"gpushare_node_gpu_core_assigned_percent{at} {sum(c.used_core for c in usage.cards)}\n"
    series = len(lines)
    if per_card != "none":
        card_lines: dict[str, list[str]] = {name: [] for name, _ in CARD_FAMILIES}
        for card in usage.cards:
            pods = pods_on.get(card.index, 0)
            if per_card == "in_use" and not pods and not card.used_mem:
                continue
            labels = _labels([("node", usage.name), ("card", str(card.index)), ("model", model),
                              ("mode", usage.mode)])
            card_lines["gpushare_gpu_memory_assigned_gib"].append(f"gpushare_gpu_memory_assigned_gib{labels} "
                                                                  f"{gib(card.used_mem)}\n")
            card_lines["gpushare_gpu_memory_total_gib"].append(f"gpushare_gpu_memory_total_gib{labels} "
                                                               f"{gib(card.total_mem)}\n")
            if core_mem:
                card_lines["gpushare_gpu_core_assigned_percent"].append(
                    f"gpushare_gpu_core_assigned_percent{labels} {card.used_core}\n")
            card_lines["gpushare_gpu_pods"].append(f"gpushare_gpu_pods{labels} {pods}\n")
        for name, samples in card_lines.items():
            if samples:
                lines[name] = "".join(samples)
                series += len(samples)
    return NodeLines(lines, usage.used_mem / scale, usage.total_mem / scale, series)


class AllocationExporter:
    """The rendered GPU allocation series of one state, kept current by ``refresh``."""

    def __init__(self, state: ClusterState, names: Names, settings: MetricsSettings,
                 clock: Callable[[], float] = time.time, exporting: Callable[[], bool] | None = None,
                 ready: Callable[[], bool] = lambda: True) -> None:
        # Where replicas elect a leader, only the leader exports, so sums over replicas never double.
        self._exporting = exporting
        # The refresh thread starts once the state has synced: a first refresh of an empty state
        # would leave /metrics without series for a whole refresh period.
        self._ready = ready
        self._state = state
        self._names = names
        self._settings = settings
        self._clock = clock
        self._nodes: dict[str, NodeLines] = {}
        self._generation: int | None = None
        self._text = b""
        self._refreshed_at: float | None = None
        self._refresh_seconds = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._quota_generation: int | None = None
        self._quota_text = ""
        self._quota_series = 0

    def _quotas(self) -> None:
        """The GPU quota series: one per namespace and limit covering it, at most metrics.max_quota_series."""
        objects = getattr(self._state, "quota_objects", None)
        quotas = objects() if objects is not None else []
        if not quotas:
            self._quota_text, self._quota_series = "", 0
            return
        from policies.model.pod_usage import usage_of
        from policies.quota.quota_usage import quota_shares

        pods = getattr(self._state, "pods", None)
        shares = quota_shares(quotas, usage_of(pods() if pods is not None else []), self._names, self._clock())
        bound = self._settings.max_quota_series
        samples: dict[str, list[str]] = {name: [] for name, _ in QUOTA_FAMILIES}
        written = dropped = 0
        scale = MIB_PER_GIB if self._names.memory_unit == "MiB" else 1
        for share in shares:
            limit = share.limit
            per = scale if limit.resource == self._names.resources.gpu_mem else 1
            for namespace in share.namespaces:
                if written >= bound:
                    dropped += 1
                    continue
                written += 1
                labels = _labels((("namespace", namespace), ("quota", limit.label), ("limit", limit.key),
                                  ("resource", limit.resource)))
                for (name, _), value in zip(QUOTA_FAMILIES, (limit.used, limit.hard, limit.left), strict=True):
                    samples[name].append(f"{name}{labels} {_number(value / per)}\n")
        parts = [_header(name, text) + "".join(samples[name]) for name, text in QUOTA_FAMILIES]
        parts.append(_header("gpushare_gpu_quota_series_dropped", "GPU quota series left out past "
                                                                   "metrics.max_quota_series.")
                     + f"gpushare_gpu_quota_series_dropped {dropped}\n")
        self._quota_text = "".join(parts)
        self._quota_series = written * len(QUOTA_FAMILIES) + 1

    def _node(self, name: str) -> NodeLines | None:
        usage = node_usage(self._state, name, self._names)
        if usage is None:
            return None
        node = self._state.get_node(name)
        model = node.labels.get(self._names.labels.card_name, "") if node is not None else ""
        return node_lines(usage, model, self._settings.per_card)

    def refresh(self) -> bool:
        """Recompute the nodes changed since the last refresh (all of them the first time, or when
        the change log no longer reaches back that far) and render. True when anything changed."""
        with self._lock:
            started = time.perf_counter()
            generation: int | None = getattr(self._state, "generation", None)
            quota_generation: int | None = getattr(self._state, "quota_generation", None)
            changed: list[str] | None = None
            if generation is not None and self._generation is not None:
                if generation == self._generation and quota_generation == self._quota_generation:
                    self._refreshed_at = self._clock()
                    return False
                changed = self._state.changes_since(self._generation)  # type: ignore[attr-defined]
            if changed is None:
                names = {n.name for n in self._state.nodes()}
                self._nodes = {}
            else:
                names = set(changed)
            for name in names:
                lines = self._node(name)
                if lines is None:
                    self._nodes.pop(name, None)
                else:
                    self._nodes[name] = lines
            self._generation = generation
            self._quota_generation = quota_generation
            self._quotas()
            self._text = self._render()
            self._refresh_seconds = time.perf_counter() - started
            self._refreshed_at = self._clock()
            return True

    def _render(self) -> bytes:
        order = sorted(self._nodes)
        parts: list[str] = []
        for name, text in (*NODE_FAMILIES, *CARD_FAMILIES):
            samples = [lines for node in order if (lines := self._nodes[node].lines.get(name))]
            if samples or name in dict(NODE_FAMILIES):
                parts.append(_header(name, text))
                parts.extend(samples)
        assigned = sum(n.assigned for n in self._nodes.values())
        total = sum(n.total for n in self._nodes.values())
        for (name, text), value in zip(CLUSTER_FAMILIES, (assigned, total), strict=True):
            parts.append(f"{_header(name, text)}{name} {_number(value)}\n")
        parts.append(self._quota_text)
        return "".join(parts).encode()

    @property
    def series(self) -> int:
        return sum(n.series for n in self._nodes.values()) + len(CLUSTER_FAMILIES) + self._quota_series

    def exposition(self) -> bytes:
        """The cached series plus three about the cache itself (cheap: no state is read); nothing
        on a replica that is not the leader."""
        if self._exporting is not None and not self._exporting():
            return b""
        refreshed = self._refreshed_at
        tail = (_header("gpushare_gpu_allocation_series", "GPU allocation series this replica exports.")
                + f"gpushare_gpu_allocation_series {self.series}\n"
                + _header("gpushare_gpu_allocation_refresh_duration_seconds",
                          "Time the last refresh of the GPU allocation cache took.")
                + f"gpushare_gpu_allocation_refresh_duration_seconds {self._refresh_seconds}\n")
        if refreshed is not None:
            tail += (_header("gpushare_gpu_allocation_refreshed_timestamp_seconds",
                             "Unix time the GPU allocation cache was last brought up to date.")
                     + f"gpushare_gpu_allocation_refreshed_timestamp_seconds {refreshed}\n")
        return self._text + tail.encode()

    # -- the refresh thread (started in the serving process: threads do not survive fork) ---------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpu-allocation-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._ready():
            if self._stop.wait(0.05):
                return
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception:  # a bug here must not end the thread: the cache goes stale, visibly
                log.exception("GPU allocation metrics refresh failed")
            self._stop.wait(self._settings.refresh_seconds)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
