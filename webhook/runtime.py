"""Wiring for ``gpushare serve``: settings + state source + certificates -> a running server."""

from __future__ import annotations

import gc
import logging
from pathlib import Path

from flask import Flask

from certs.issue import ensure_serving_certs
from policies.engine import Engine
from policies.settings import Settings

from .app import Services, create_app
from .auth import configured_guards
from .gunicorn_conf import gunicorn_options
from .server import run_gunicorn
from .state import load_demo_snapshot, load_snapshot
from .state_status import StateStatus

log = logging.getLogger("gpushare.serve")


def build_services(settings: Settings, snapshot: Path | None) -> Services:
    """Engine and cluster state for one server process."""
    engine = Engine(settings)
    if snapshot is not None:
        state = load_snapshot(snapshot, settings.names)
        source = f"snapshot:{snapshot}"
    else:
        state = load_demo_snapshot(settings.names)
        source = "demo-snapshot"
    nodes, pods = state.counts()
    log.warning("cluster state source: %s (%d nodes, %d shared-GPU pods)", source, nodes, pods)
    return Services(settings=settings, engine=engine, state=state, state_source=source,
                    state_status=StateStatus.loaded_snapshot(source))


def serving_names(settings: Settings) -> list[str]:
    return ["localhost", "127.0.0.1", "::1", *settings.certs.service_dns_names(), *settings.certs.extra_sans]


def prepare_certificates(settings: Settings, cert_dir: Path) -> bool:
    generated = ensure_serving_certs(cert_dir, serving_names(settings), ca_days=settings.certs.ca_days,
                                     cert_days=settings.certs.cert_days, key_type=settings.certs.key_type)
    if generated:
        log.warning("generated a self-signed CA and serving certificate in %s", cert_dir)
    return generated


def serve(settings: Settings, cert_dir: Path, snapshot: Path | None) -> None:
    """Generate certificates if missing, then run the webhook under gunicorn until signalled."""
    prepare_certificates(settings, cert_dir)
    services = build_services(settings, snapshot)  # fail fast on a bad snapshot, before forking
    configured_guards(settings.auth)  # and on an unusable CA or token file
    if settings.server.workers > 1:
        log.warning("server.workers=%d: each process keeps its own /metrics registry and binding "
                    "assume-cache; see docs/operations.md", settings.server.workers)

    def factory() -> Flask:
        app = create_app(services)
        # Everything built at start-up lives as long as the worker: move it out of the cyclic
        # collector's reach so per-request collections scan only request garbage.
        gc.collect()
        gc.freeze()
        return app

    run_gunicorn(factory, gunicorn_options(settings, cert_dir))
