"""What the dashboard shows, as plain data: built from the scorer's cached node profiles (the
occupancy admission and scoring decide with), the last audit and the pending GPU pods."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from policies.audit.audit import AuditResult
from policies.model.cluster import ClusterState
from policies.model.settings import Names
from policies.placement.placement import NodeProfile
from policies.scoring.explain import Explanation, explain_pod, pending
from policies.scoring.scoring import Scorer

PAGE_SIZE = 100  # nodes per page: a 5,000-node cluster is 50 pages, nodes with findings first
EXPLAINED = 20  # pending pods explained on the page; the rest are counted


@dataclass(frozen=True, slots=True)
class CardView:
    index: int
    used_mem: int
    total_mem: int
    used_core: int
    show_core: bool
    pods: tuple[str, ...]

    @property
    def mem_percent(self) -> int:
        return min(100, self.used_mem * 100 // self.total_mem) if self.total_mem else 0

    @property
    def core_percent(self) -> int:
        return min(100, self.used_core)

    @property
    def over(self) -> bool:
        return self.used_mem > self.total_mem or self.used_core > 100

    @property
    def text(self) -> str:
        """The bar's text alternative."""
        core = f", {self.used_core}% of 100% compute" if self.show_core else ""
        pods = f", {len(self.pods)} pod{'' if len(self.pods) == 1 else 's'}"
        return f"GPU{self.index}: {self.used_mem} of {self.total_mem} GiB assigned{core}{pods}"


@dataclass(slots=True)
class NodeView:
    name: str
    mode: str
    placement: str
    region: str
    card_model: str
    cards: list[CardView]
    whole_gpus: str = ""  # topology nodes: "2 of 8 held"
    findings: list[str] = field(default_factory=list)

    @property
    def used_mem(self) -> int:
        return sum(c.used_mem for c in self.cards)

    @property
    def total_mem(self) -> int:
        return sum(c.total_mem for c in self.cards)


@dataclass(frozen=True, slots=True)
class QuotaView:
    namespaces: str
    quota: str
    limit: str
    used: int
    hard: int
    left: int
    unit: str

    @property
    def percent(self) -> int:
        return min(100, self.used * 100 // self.hard) if self.hard else 100

    @property
    def text(self) -> str:
        """The bar's text alternative."""
        return f"{self.quota}: {self.used} of {self.hard} {self.unit} used, {self.left} left"


def quota_views(state: ClusterState, names: Names) -> list[QuotaView]:
    objects = getattr(state, "quota_objects", None)
    quotas = objects() if objects is not None else []
    if not quotas:
        return []
    import time

    from policies.model.pod_usage import usage_of
    from policies.quota.quota_usage import quota_shares

    pods = getattr(state, "pods", None)
    views = []
    for share in quota_shares(quotas, usage_of(pods() if pods is not None else []), names, time.time()):
        limit = share.limit
        unit = names.memory_unit if limit.resource == names.resources.gpu_mem else "%"
        views.append(QuotaView(", ".join(share.namespaces), limit.label, limit.key, limit.used, limit.hard,
                               limit.left, unit))
    return views


@dataclass
class Page:
    source: str
    nodes: list[NodeView]
    node_count: int
    page: int
    pages: int
    used_mem: int
    total_mem: int
    modes: list[tuple[str, int]]
    rules: list[tuple[str, str, int]]  # rule, severity, findings
    audited_at: str
    pending: list[Explanation]
    pending_count: int
    # Each GPU quota with its namespaces and used / quota / left (what ``inspect --quotas`` shows).
    quotas: list[QuotaView] = field(default_factory=list)

    @property
    def percent(self) -> int:
        return self.used_mem * 100 // self.total_mem if self.total_mem else 0


def _node_view(profile: NodeProfile, names: Names, findings: list[str]) -> NodeView:
    node = profile.node
    labels = node.labels
    occupancy = profile.cards
    show_core = occupancy.mode == "core_mem"
    # Whole-GPU (topology) nodes report no gpu-mem: their cards are shown as held/free counts instead.
    cards = [CardView(c.index, c.used_mem, c.total_mem, c.used_core, show_core, c.pods)
             for c in occupancy.cards] if occupancy.total_mem > 0 else []
    whole = ""
    if profile.topology is not None and profile.topology.count:
        whole = f"{len(profile.topology.held)} of {profile.topology.count} whole GPUs held"
    return NodeView(node.name, profile.mode or "unset (exclusive)", occupancy.placement,
                    labels.get(names.labels.region, "") or "-", labels.get(names.labels.card_name, "") or "-",
                    cards, whole, findings)


def is_gpu_node(profile: NodeProfile) -> bool:
    return bool(profile.cards.cards) or (profile.topology is not None and profile.topology.count > 0)


def build_page(state: ClusterState, scorer: Scorer, audit: AuditResult | None, audited_at: str, source: str,
               page: int = 1, page_size: int = PAGE_SIZE) -> Page:
    names = scorer.names
    _, profiles = scorer.profiles(state)
    gpu = [p for p in profiles if is_gpu_node(p)]
    by_node: dict[str, list[str]] = {}
    rules: Counter[tuple[str, str]] = Counter()
    if audit is not None:
        for f in audit.active:
            rules[(f.rule, f.severity)] += 1
            if f.node:
                by_node.setdefault(f.node, []).append(f.message)
    gpu.sort(key=lambda p: (p.name not in by_node, p.name))
    pages = max(1, -(-len(gpu) // page_size))
    page = min(max(page, 1), pages)
    shown = gpu[(page - 1) * page_size: page * page_size]
    used = total = 0
    for p in gpu:
        for c in (p.cards.cards if p.cards.total_mem > 0 else ()):
            used += c.used_mem
            total += c.total_mem
    modes = Counter(p.mode or "unset (exclusive)" for p in profiles)
    pods_of = getattr(state, "pods", None)
    waiting = [p for p in pods_of() if pending(p)] if callable(pods_of) else []
    waiting.sort(key=lambda p: p.key)
    explained = [explain_pod(p, state, scorer) for p in waiting[:EXPLAINED]]
    return Page(source, [_node_view(p, names, by_node.get(p.name, [])) for p in shown], len(gpu), page, pages,
                used, total, sorted(modes.items()), sorted((r, s, n) for (r, s), n in rules.items()), audited_at,
                explained, len(waiting), quota_views(state, names))

