"""What the routes need, built once per process by the composition root (``webhook.serving``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from policies.admission.engine import Engine
from policies.model.cluster import ClusterState
from policies.placement.assume import PlacementLedger
from webhook.http.allocation_metrics import AllocationExporter
from webhook.settings import Settings
from webhook.state.audit_loop import AuditLoop
from webhook.state.leader import LeaderElector
from webhook.state.status import StateStatus


@dataclass
class Services:
    """What the routes need, built once per process."""

    settings: Settings
    engine: Engine
    state: ClusterState | None
    ready: Callable[[], bool] = field(default=lambda: True)
    state_source: str = "none"
    # The same in words, for people: "demo snapshot: 4 nodes, 2 GPU pods".
    state_description: str = "no cluster state"
    # Filled by the state source (snapshot: once at load; live: per watch event); read by /metrics.
    state_status: StateStatus | None = None
    # Admission side effects (the assume-cache); None where nothing may be recorded.
    ledger: PlacementLedger | None = None
    # Run in the serving process before it answers (threads do not survive gunicorn's fork).
    start: Callable[[], None] = field(default=lambda: None)
    # The periodic audit of a live state (None for snapshots); /metrics reads its last run.
    audit: AuditLoop | None = None
    # The GPU allocation series, when this replica exports them (metrics.export_allocation).
    allocation: AllocationExporter | None = None
    # Leader election among replicas (live state, leader.enabled): only the leader judges bindings.
    leader: LeaderElector | None = None
