"""The plain stack's floor for bench/admission.py: Flask under stock gunicorn ``gthread``, same
TLS, nothing of this project. It parses the AdmissionReview with the standard ``json`` module and
answers ``allowed`` with its uid, the least any admission webhook on this stack must do.

    gunicorn -c bench/plain_floor.py 'bench.plain_floor:app'   (bench/admission.py starts it)
"""

from __future__ import annotations

import json
import os

from flask import Flask, Response, request

app = Flask("plain-floor")


@app.post("/validate")
@app.post("/mutate")
def allow() -> Response:
    review = json.loads(request.get_data())
    body = {"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True}}
    return Response(json.dumps(body), mimetype="application/json")


@app.get("/healthz")
def healthz() -> Response:
    return Response('{"status":"ok"}', mimetype="application/json")


# gunicorn settings when this file is given as ``-c``: one gthread worker as the webhook runs,
# the same thread count and TLS files (passed in the environment by bench/admission.py).
worker_class = "gthread"
workers = 1
threads = int(os.environ.get("FLOOR_THREADS", "16"))
bind = f"127.0.0.1:{os.environ.get('FLOOR_PORT', '8443')}"
certfile = os.environ.get("FLOOR_CERTFILE")
keyfile = os.environ.get("FLOOR_KEYFILE")
keepalive = 75
accesslog = None
