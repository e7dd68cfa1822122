"""Operational routes: ``GET /healthz``, ``GET /readyz`` and ``GET /metrics`` (Prometheus text format)."""

from __future__ import annotations

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST

from webhook.http.errors import json_response
from webhook.http.metrics import Metrics
from webhook.http.routing import RouteTable, Work
from webhook.routes.services import Services


def ops_routes(table: RouteTable, services: Services, metrics: Metrics) -> Blueprint:
    routes = Blueprint("ops", __name__)

    # Probes are answered by the poller, ahead of any review; a scrape runs on a thread without a slot.
    @routes.get(table.declare("/healthz", Work.PROBE, ["GET", "HEAD"]))
    def healthz() -> Response:
        return json_response({"status": "ok"})

    @routes.get(table.declare("/readyz", Work.PROBE, ["GET", "HEAD"]))
    def readyz() -> Response:
        ready = services.ready()
        return json_response({"ready": ready, "state": services.state_source}, 200 if ready else 503)

    @routes.get(table.declare("/metrics", Work.SCRAPE, ["GET", "HEAD"]))
    def metrics_route() -> Response:
        return Response(metrics.exposition(), content_type=CONTENT_TYPE_LATEST)

    return routes
