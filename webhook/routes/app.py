"""Flask app factory: one Blueprint per surface (dry_run, explain, extender, ops) and the review
endpoints in front of them (routes/admission), body limits and JSON errors. Policy lives in
``policies``."""

from __future__ import annotations

import logging
from functools import partial

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from policies.capacity_index import capacity_index
from policies.dryrun import DryRun
from policies.scoring import Scorer
from webhook.http.auth import configured_guards, install_auth
from webhook.http.cert_metrics import CertificateCollector
from webhook.http.deadline import budget_seconds
from webhook.http.errors import error_response, http_error_reason
from webhook.http.jsonbody import LargeBodyGate, read_json_body
from webhook.http.listeners import install_listener_split
from webhook.http.logs import RequestLog
from webhook.http.metrics import Metrics, endpoint_label
from webhook.http.state_health import StateHealthCollector
from webhook.http.telemetry import Telemetry
from webhook.routes.admission import ReviewEndpoints
from webhook.routes.dry_run import dry_run_routes
from webhook.routes.explain import explain_routes
from webhook.routes.extender import Extender, extender_routes
from webhook.routes.observe import Observer, admission_kinds
from webhook.routes.ops import ops_routes
from webhook.routes.services import Services

log = logging.getLogger("gpushare.webhook")


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

    def refused(status: int, reason: str) -> None:
        observer.refused(endpoint_label(request.path), status, reason)

    # The listener split runs first: a path its listener does not serve is a 404, not a 401.
    install_listener_split(app, settings.server, refused)
    guards = configured_guards(settings.auth)
    install_auth(app, guards, refused)
    metrics.registry.register(CertificateCollector(settings.server.cert_dir))
    metrics.registry.register(StateHealthCollector(lambda: services.state))
    if services.allocation is not None:
        metrics.add_rendered(services.allocation.exposition)
    read_json = partial(read_json_body, max_bytes=max_bytes, gate=gate)
    scorer = Scorer(settings.names)  # one per process: its per-node cache serves /dry-run and the extender
    if services.state is not None:
        scorer.profiles(services.state)  # build the per-node cache now, not on the scheduler's first call
        capacity_index(services.engine.names).warm(services.state)  # GC001's, not in the first review
    app.register_blueprint(ops_routes(services, metrics))
    app.register_blueprint(dry_run_routes(services, observer, DryRun(services.engine, scorer)))
    app.register_blueprint(explain_routes(services, observer, scorer))
    app.register_blueprint(extender_routes(services, observer, Extender(settings, scorer), read_json))

    # The API server's two calls are answered in front of Flask (webhook.routes.admission).
    app.wsgi_app = ReviewEndpoints(app.wsgi_app, services, observer, guards, read_json)  # type: ignore[method-assign]

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        reason = http_error_reason(exc, max_bytes)
        observer.refused(endpoint_label(request.path), exc.code or 500, reason)
        return error_response(exc.code or 500, reason)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        reason = f"internal error: {type(exc).__name__}"
        observer.refused(endpoint_label(request.path), 500, reason)
        return error_response(500, reason)

    return app
