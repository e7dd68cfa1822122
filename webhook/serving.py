"""The composition root of ``gpushare serve``: settings + state source + certificates + the Flask
app (routes/) + gunicorn (server/) -> a running server. It is the one module that sees every room."""

from __future__ import annotations

import gc
import logging
from pathlib import Path

from flask import Flask

from certs.issue import ensure_serving_certs
from policies.assume import PlacementLedger
from policies.cluster import ClusterState
from policies.engine import Engine
from policies.settings import Settings
from webhook.routes.app import create_app
from webhook.routes.services import Services
from webhook.server.allocation_metrics import AllocationExporter
from webhook.server.auth import configured_guards
from webhook.server.gunicorn import run_gunicorn
from webhook.server.gunicorn_conf import gunicorn_options
from webhook.state.audit_loop import AuditLoop
from webhook.state.snapshot import load_demo_snapshot, load_snapshot
from webhook.state.status import StateStatus

log = logging.getLogger("gpushare.serve")


def new_ledger(settings: Settings) -> PlacementLedger:
    s = settings.state
    return PlacementLedger(s.assume_ttl_seconds, s.assume_max_entries, s.recent_pods_ttl_seconds,
                           s.recent_pods_max_entries)


def build_services(settings: Settings, snapshot: Path | None, kubeconfig: Path | None = None) -> Services:
    """Engine and cluster state for one server process.

    The source is, in order: ``snapshot``, else the cluster of ``kubeconfig``, else the
    in-cluster service account, else the embedded demo snapshot. Watch threads do not
    survive gunicorn's fork, so the live source is configured here (failing fast on a bad
    kubeconfig) and started by ``Services.start`` in the worker.
    """
    from webhook.state.kube_client import in_cluster
    from webhook.state.live import LiveClusterState, core_api

    engine = Engine(settings)
    ledger = new_ledger(settings)
    if snapshot is None and (kubeconfig is not None or in_cluster()):
        api, host = core_api(kubeconfig)
        source = f"live:{kubeconfig}" if kubeconfig is not None else "live:in-cluster"
        status = StateStatus(source)
        configz = None
        if settings.state.kubelet_configz.enabled:  # opt-in: needs RBAC get on nodes/proxy (docs/state.md)
            from webhook.state.kubelet_config import api_fetcher

            configz = api_fetcher(api, settings.state.kubelet_configz, settings.state.connect_timeout_seconds)
        live = LiveClusterState(api, settings.names, settings.state, status=status, configz=configz)
        log.warning("cluster state source: %s (API server %s); ready once nodes and pods are listed", source, host)
        audit = AuditLoop(live, settings, live.synced) if settings.audit.interval_seconds > 0 else None
        leader = None
        if settings.leader.enabled:
            from webhook.state.leader import elector

            namespace = settings.leader.namespace or settings.certs.namespace
            leader = elector(api.api_client, settings.leader, namespace, live.synced)
            status.leader = leader.leading
            log.warning("leader election: lease %s/%s as %s; bindings are judged by the leader",
                        namespace, settings.leader.lease_name, leader.identity)

        def start() -> None:
            live.start()
            if audit is not None:
                audit.start()
            if leader is not None:
                import atexit

                leader.start()
                atexit.register(leader.stop)  # a worker that exits releases the Lease and its label

        ready = live.synced if leader is None else (lambda: live.synced() and leader.known())
        return Services(settings=settings, engine=engine, state=live, ready=ready,
                        state_source=source, state_status=status, ledger=ledger, start=start, audit=audit,
                        allocation=allocation_exporter(settings, live), leader=leader)
    if snapshot is not None:
        state = load_snapshot(snapshot, settings.names)
        source = f"snapshot:{snapshot}"
    else:
        state = load_demo_snapshot(settings.names)
        source = "demo-snapshot"
    nodes, pods = state.counts()
    log.warning("cluster state source: %s (%d nodes, %d GPU pods)", source, nodes, pods)
    return Services(settings=settings, engine=engine, state=state, state_source=source,
                    state_status=StateStatus.loaded_snapshot(source), ledger=ledger,
                    allocation=allocation_exporter(settings, state))


def allocation_exporter(settings: Settings, state: ClusterState) -> AllocationExporter | None:
    """The GPU allocation series' cache, when this replica exports them (metrics.export_allocation)."""
    if not settings.metrics.export_allocation:
        return None
    return AllocationExporter(state, settings.names, settings.metrics)


def serving_names(settings: Settings) -> list[str]:
    return ["localhost", "127.0.0.1", "::1", *settings.certs.service_dns_names(), *settings.certs.extra_sans]


def prepare_certificates(settings: Settings, cert_dir: Path) -> bool:
    generated = ensure_serving_certs(cert_dir, serving_names(settings), ca_days=settings.certs.ca_days,
                                     cert_days=settings.certs.cert_days, key_type=settings.certs.key_type)
    if generated:
        log.warning("generated a self-signed CA and serving certificate in %s", cert_dir)
    return generated


def scheduler_notice(settings: Settings) -> str:
    """What GM001 does in this process, said once at start (the choice matters: docs/install.md)."""
    scheduler = settings.names.injected_scheduler
    if scheduler is None:
        return ("GM001: names.scheduler_name is none: shared-GPU pods keep their schedulerName "
                "(the cluster's own kube-scheduler places them)")
    return f"GM001: shared-GPU pods without a scheduler get schedulerName {scheduler} (names.scheduler_name)"


def run_server(settings: Settings, cert_dir: Path, snapshot: Path | None, kubeconfig: Path | None = None) -> None:
    """Generate certificates if missing, then run the webhook under gunicorn until signalled."""
    prepare_certificates(settings, cert_dir)
    # Fail fast on a bad snapshot or kubeconfig, before forking.
    services = build_services(settings, snapshot, kubeconfig)
    configured_guards(settings.auth)  # and on an unusable CA or token file
    log.info("%s", scheduler_notice(settings))
    if settings.server.workers > 1:
        log.warning("server.workers=%d: each process keeps its own /metrics registry and binding "
                    "assume-cache; see docs/operations.md", settings.server.workers)

    def factory() -> Flask:
        services.start()
        if services.allocation is not None:
            services.allocation.start()  # its refresh thread, like the watch, lives in the worker
        app = create_app(services)
        # Everything built at start-up lives as long as the worker: move it out of the cyclic
        # collector's reach so per-request collections scan only request garbage.
        gc.collect()
        gc.freeze()
        return app

    run_gunicorn(factory, gunicorn_options(settings, cert_dir))
