"""The stack's floor: a Flask app that answers every AdmissionReview "allowed", served by the
same embedded gunicorn with the same settings as the webhook. Used by bench/admission.py."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flask import Flask, Response, request

from webhook.http.routing import EXTENSION, RouteTable, Work
from webhook.server.gunicorn import run_gunicorn
from webhook.server.gunicorn_conf import gunicorn_options, worker_app
from webhook.settings import load_settings


def create_bare_app() -> Flask:
    app = Flask("bare")
    table = app.extensions[EXTENSION] = RouteTable()  # handed to the worker as create_app hands its own

    def allow() -> Response:
        review = json.loads(request.get_data())
        body = {"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": True}}
        return Response(json.dumps(body), mimetype="application/json")

    # Scheduled as the webhook's own routes are (webhook.http.routing).
    app.add_url_rule(table.declare("/validate", Work.REVIEW, ["POST"]), "validate", allow, methods=["POST"])
    app.add_url_rule(table.declare("/mutate", Work.REVIEW, ["POST"]), "mutate", allow, methods=["POST"])
    app.add_url_rule(table.declare("/healthz", Work.PROBE, ["GET"]), "healthz",
                     lambda: Response('{"status":"ok"}', mimetype="application/json"))
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert-dir", type=Path, required=True)
    args = parser.parse_args()
    settings = load_settings()
    settings = settings.model_copy(update={"server": settings.server.model_copy(
        update={"host": "127.0.0.1", "port": args.port})})
    run_gunicorn(worker_app(settings, create_bare_app), gunicorn_options(settings, args.cert_dir))


if __name__ == "__main__":
    main()
