"""The composition root of ``gpushare serve``: settings + state source + certificates + the Flask
app (routes/) + gunicorn (server/) -> a running server. It is the one module that sees every room."""

from __future__ import annotations

import errno
import gc
import logging
import socket
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask

from certs.issue import ensure_serving_certs
from policies.admission.engine import Engine
from policies.audit.audit import AuditResult
from policies.model.cluster import ClusterState
from policies.placement.assume import PlacementLedger
from webhook.http.allocation_metrics import AllocationExporter
from webhook.http.auth import configured_guards
from webhook.routes.app import create_app
from webhook.routes.services import Services
from webhook.server.gunicorn import run_gunicorn
from webhook.server.gunicorn_conf import gunicorn_options, worker_app
from webhook.settings import Settings
from webhook.state.audit_loop import AuditLoop, Publish
from webhook.state.report_writer import WriteSummary
from webhook.state.snapshot import describe_snapshot, load_demo_snapshot, load_snapshot
from webhook.state.status import StateStatus

log = logging.getLogger("gpushare.serve")


class ServeError(ValueError):
    """``gpushare serve`` cannot start: unusable certificates, an address in use."""


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
    engine.warm()  # before the fork, once: no review reads the catalog's files
    ledger = new_ledger(settings)
    if snapshot is None and (kubeconfig is not None or in_cluster()):
        api, host = core_api(kubeconfig)
        source = f"live:{kubeconfig}" if kubeconfig is not None else "live:in-cluster"
        status = StateStatus(source)
        configz = None
        if settings.state.kubelet_configz.enabled:  # opt-in: needs RBAC get on nodes/proxy (docs/state.md)
            from webhook.state.kubelet_config import api_fetcher

            configz = api_fetcher(api, settings.state.kubelet_configz, settings.state.connect_timeout_seconds)
        live = LiveClusterState(api, settings.names, settings.state, status=status, configz=configz,
                                quotas=True)
        where = f"kubeconfig {kubeconfig}" if kubeconfig is not None else "the in-cluster service account"
        description = f"cluster from {where} (API server {host})"
        log.warning("cluster state source: %s (API server %s); ready once nodes and pods are listed", source, host)
        leader = None
        if settings.leader.enabled:
            from webhook.state.leader import elector

            namespace = settings.leader.namespace or settings.certs.namespace
            leader = elector(api.api_client, settings.leader, namespace, live.synced)
            status.leader = leader.leading
            log.warning("leader election: lease %s/%s as %s; bindings are judged by the leader",
                        namespace, settings.leader.lease_name, leader.identity)
        ready = live.synced if leader is None else (lambda: live.synced() and leader.known())
        audit = None
        if settings.audit.interval_seconds > 0:
            # Report objects come from the leader alone; without leader election, from this replica.
            audit = AuditLoop(live, settings, ready,
                              publish=report_publisher(settings, kubeconfig, leader.identity if leader else ""),
                              may_publish=leader.leading if leader is not None else (lambda: True))

        def start() -> None:
            live.start()
            if audit is not None:
                audit.start()
            if leader is not None:
                import atexit

                leader.start()
                atexit.register(leader.stop)  # a worker that exits releases the Lease and its label

        return Services(settings=settings, engine=engine, state=live, ready=ready,
                        state_source=source, state_description=description, state_status=status, ledger=ledger,
                        start=start, audit=audit, leader=leader,
                        allocation=allocation_exporter(settings, live, leader.leading if leader else None,
                                                       ready=live.synced))
    if snapshot is not None:
        state = load_snapshot(snapshot, settings.names)
        source = f"snapshot:{snapshot}"
    else:
        state = load_demo_snapshot(settings.names)
        source = "demo-snapshot"
    return Services(settings=settings, engine=engine, state=state, state_source=source,
                    state_description=describe_snapshot(state, snapshot),
                    state_status=StateStatus.loaded_snapshot(source), ledger=ledger,
                    allocation=allocation_exporter(settings, state))


def report_publisher(settings: Settings, kubeconfig: Path | None, identity: str) -> Publish | None:
    """What writes the audit's report objects (``audit.reports``; None when ``none``). It runs in the
    audit's child process, with an API client of its own, through the code path of ``gpushare audit
    --write-reports`` (``report_writer.publish``). Imported here, before any fork."""
    if settings.audit.reports == "none":
        return None
    from kubernetes import client as k8s

    from webhook.report.policy_reports import candidates, report_objects
    from webhook.state.kube_client import api_client
    from webhook.state.report_writer import publish

    kinds = candidates(settings.audit.reports)
    configuration = api_client(kubeconfig).configuration  # read once, here; each child connects anew
    # Who wrote what shows in the API server's audit log: the webhook, and which replica.
    agent = f"gpushare-webhook/{package_version()} (audit reports; {identity or socket.gethostname()})"

    def write(result: AuditResult, now: float) -> WriteSummary:
        client = k8s.ApiClient(configuration)
        client.user_agent = agent
        return publish(k8s.CustomObjectsApi(client), kinds,
                       lambda api: report_objects(result, api, settings.audit, now),
                       clean_others=settings.audit.reports == "auto")

    return write


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpushare-webhook")
    except PackageNotFoundError:  # a source tree without install
        return "unknown"


def allocation_exporter(settings: Settings, state: ClusterState, leading: Callable[[], bool] | None = None,
                        ready: Callable[[], bool] = lambda: True) -> AllocationExporter | None:
    """The GPU allocation series' cache, when this replica exports them (metrics.export_allocation;
    where replicas elect a leader, ``leading`` says whether this one leads and so exports)."""
    if not settings.metrics.export_allocation:
        return None
    return AllocationExporter(state, settings.names, settings.metrics, exporting=leading, ready=ready)


def serving_names(settings: Settings) -> list[str]:
    return ["localhost", "127.0.0.1", "::1", *settings.certs.service_dns_names(), *settings.certs.extra_sans]


def prepare_certificates(settings: Settings, cert_dir: Path) -> bool:
    """Generate what is missing, then prove the pair loads: a bad file is one line now, not a
    worker that fails to start over and over."""
    refuse_half_pairs(cert_dir)
    try:
        generated = ensure_serving_certs(cert_dir, serving_names(settings), ca_days=settings.certs.ca_days,
                                         cert_days=settings.certs.cert_days, key_type=settings.certs.key_type)
        for name in ("tls.crt", "tls.key"):
            if b"-----BEGIN " not in (cert_dir / name).read_bytes():
                raise ServeError(f"{cert_dir / name}: not a PEM file (remove it to have a new one generated)")
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_dir / "tls.crt",
                                                                            cert_dir / "tls.key")
    except ServeError:
        raise
    except (OSError, ValueError, TypeError, ssl.SSLError) as exc:
        reason = " ".join(str(getattr(exc, "strerror", None) or exc).split()) or type(exc).__name__
        raise ServeError(f"{cert_dir}: cannot use the certificates there (ca.crt, ca.key, tls.crt, tls.key): "
                         f"{reason}") from None
    if generated:
        log.warning("generated a self-signed CA and serving certificate in %s", cert_dir)
    return generated


def refuse_half_pairs(cert_dir: Path) -> None:
    """A certificate without its key (or a key without its certificate) is someone's material half
    copied: generating a new pair would replace it in silence, so say what to do instead. The CA
    pair matters only when a serving pair is to be generated from it."""
    pairs = [("tls.crt", "tls.key")]
    if not ((cert_dir / "tls.crt").exists() or (cert_dir / "tls.key").exists()):
        pairs.append(("ca.crt", "ca.key"))
    for cert, key in pairs:
        present = [name for name in (cert, key) if (cert_dir / name).exists()]
        if len(present) == 1:
            [there] = present
            missing = key if there == cert else cert
            raise ServeError(f"{cert_dir} holds {there} but no {missing}: put the matching {missing} beside it, "
                             f"or remove {there} to have a new pair generated")


def check_address(host: str, port: int) -> None:
    """Bind once before gunicorn does: gunicorn retries a busy address for seconds, logging each try."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
            probe.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ServeError(f"cannot listen on {host}:{port}: the port is in use (another server? "
                             "choose one with --port)") from None
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def urls(host: str, port: int) -> str:
    """The address as URLs a user can paste; a wildcard address names the local one too."""
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::", ""):
        return f"https://{shown}:{port} (all interfaces; locally https://localhost:{port})"
    return f"https://{shown}:{port}"


def announce(services: Services, cert_dir: Path, listeners: list[Any]) -> None:
    """One line once the sockets are bound: where it listens, what it judges against, what to trust."""
    addresses = []
    for listener in listeners:
        host, port = listener.sock.getsockname()[:2]
        addresses.append(urls(host, port))
    ca = cert_dir / "ca.crt"
    trust = f"clients trust the CA {ca}" if ca.exists() else f"clients trust the CA that signed {cert_dir / 'tls.crt'}"
    ready = "" if services.state_source.startswith(("snapshot:", "demo")) else ", ready once nodes and pods are listed"
    print(f"gpushare: serving on {', '.join(addresses)}; cluster state: {services.state_description}{ready}; {trust}",
          file=sys.stdout, flush=True)

def scheduler_notice(settings: Settings) -> str:
    """What GM001 does in this process, said once at start (the choice matters: docs/install.md)."""
    scheduler = settings.names.injected_scheduler
    if scheduler is None:
        return ("GM001: names.scheduler_name is none: shared-GPU pods keep their schedulerName "
                "(the cluster's own kube-scheduler places them)")
    return f"GM001: shared-GPU pods without a scheduler get schedulerName {scheduler} (names.scheduler_name)"


def run_server(settings: Settings, cert_dir: Path, snapshot: Path | None, kubeconfig: Path | None = None) -> None:
    """Generate certificates if missing, then run the webhook under gunicorn until signalled."""
    # Fail fast on a bad snapshot or kubeconfig or a busy port, before forking and before writing
    # certificates (README: nothing is written).
    services = build_services(settings, snapshot, kubeconfig)
    for port in (settings.server.port, settings.server.probe_port):
        if port:
            check_address(settings.server.host, port)
    prepare_certificates(settings, cert_dir)
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

    options = gunicorn_options(settings, cert_dir)
    options["when_ready"] = lambda arbiter: announce(services, cert_dir, arbiter.LISTENERS)
    run_gunicorn(worker_app(settings, factory), options)
