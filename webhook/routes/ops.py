"""Operational routes: ``GET /metrics`` (Prometheus text format)."""

from __future__ import annotations

from flask import Flask, Response
from prometheus_client import CONTENT_TYPE_LATEST

from webhook.server.metrics import Metrics


def register_ops_routes(app: Flask, metrics: Metrics) -> None:
    @app.get("/metrics")
    def metrics_route() -> Response:
        return Response(metrics.exposition(), content_type=CONTENT_TYPE_LATEST)
