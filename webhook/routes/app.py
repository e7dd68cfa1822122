"""Flask app factory: one Blueprint per surface (dry_run, explain, extender, ops) and the review
endpoints in front of them (routes/admission), both behind one guard chain (webhook.http.guards:
listener split, auth, body limit, metrics, JSON errors), and the route table they fill, which the
worker reads (webhook.http.routing). Policy lives in ``policies``."""

from __future__ import annotations

from functools import partial

from flask import Flask

from policies.admission.dryrun import DryRun
from policies.placement.capacity_index import capacity_index
from policies.scoring.scoring import Scorer
from webhook.http.auth import configured_guards
from webhook.http.cert_metrics import CertificateCollector
from webhook.http.deadline import budget_seconds
from webhook.http.guards import guard_chain, install
from webhook.http.jsonbody import LargeBodyGate, read_json_body
from webhook.http.logs import RequestLog
from webhook.http.metrics import Metrics
from webhook.http.routing import EXTENSION, RouteTable
from webhook.http.state_health import StateHealthCollector
from webhook.http.telemetry import Telemetry
from webhook.routes.admission import ReviewEndpoints
from webhook.routes.dry_run import dry_run_routes
from webhook.routes.explain import explain_routes
from webhook.routes.extender import Extender, extender_routes
from webhook.routes.observe import Observer, admission_kinds
from webhook.routes.ops import ops_routes
from webhook.routes.services import Services


def create_app(services: Services) -> Flask:
    """The webhook WSGI app over the given services."""
    app = Flask("gpushare-webhook")
    app.config["MAX_CONTENT_LENGTH"] = services.settings.server.max_body_bytes
    app.extensions["gpushare"] = services
    settings = services.settings
    max_bytes = settings.server.max_body_bytes
    metrics = Metrics(admission_kinds(), lambda: services.state_status,
                      lambda: services.audit.status if services.audit is not None else None)
    telemetry = Telemetry()
    metrics.before_scrape(telemetry.flush)
    # The worker counts what it refuses before the app runs through these too (webhook.server.worker).
    app.extensions["gpushare.metrics"] = metrics
    app.extensions["gpushare.telemetry"] = telemetry
    request_log = RequestLog(settings.logging) if settings.logging.requests else None
    if request_log is not None:
        telemetry.after_flush(request_log.flush)  # a batch of request lines, one write
    observer = Observer(metrics, request_log, telemetry)
    gate = LargeBodyGate(settings.overload.large_body_bytes, settings.overload.large_body_concurrency,
                         budget_seconds(None, settings.overload))

    table = RouteTable()  # filled by the routes below; the worker reads it (webhook.http.routing)
    app.extensions[EXTENSION] = table
    # One chain of guards for the Flask routes and the review endpoints in front of them.
    chain = guard_chain(settings.server, configured_guards(settings.auth), table, observer.refused)
    install(app, chain)
    app.extensions["gpushare.guards"] = chain
    metrics.registry.register(CertificateCollector(settings.server.cert_dir))
    metrics.registry.register(StateHealthCollector(lambda: services.state))
    if services.allocation is not None:
        metrics.add_rendered(services.allocation.exposition)
    read_json = partial(read_json_body, max_bytes=max_bytes, gate=gate)
    scorer = Scorer(settings.names)  # one per process: its per-node cache serves /dry-run and the extender
    if services.state is not None:
        scorer.profiles(services.state)  # build the per-node cache now, not on the scheduler's first call
        capacity_index(services.engine.names).warm(services.state)  # GC001's, not in the first review
    app.register_blueprint(ops_routes(table, services, metrics))
    app.register_blueprint(dry_run_routes(table, services, observer, DryRun(services.engine, scorer)))
    app.register_blueprint(explain_routes(table, services, observer, scorer))
    app.register_blueprint(extender_routes(table, services, observer, Extender(settings, scorer), read_json))

    # The API server's two calls are answered in front of Flask (webhook.routes.admission).
    app.wsgi_app = ReviewEndpoints(app.wsgi_app, table, services, observer, chain,  # type: ignore[method-assign]
                                   read_json)

    return app
