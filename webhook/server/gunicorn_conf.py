"""Gunicorn settings for the webhook, derived from the one Settings object.

Worker model (``server.worker``): one process running ``webhook.server.worker.WebhookWorker``,
a worker class of our own on gunicorn's public base ``Worker`` (an event loop that does the TLS
handshake and reads every request without blocking, threads for complete requests only; see
docs/operations.md), or stock gunicorn's ``gthread`` (``webhook.server.gthread_worker``) with
the same admission scheduling as WSGI middleware (``webhook.server.scheduling_middleware``).
The API server keeps TLS connections alive and reuses them. One process keeps the in-memory
binding assume-cache exact; throughput scales with replicas.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webhook.http.logs import gunicorn_logconfig
from webhook.server.gthread_worker import GthreadWorker
from webhook.server.heartbeat import probe_hooks
from webhook.server.process_tuning import tune_process
from webhook.server.scheduling_middleware import SchedulingMiddleware
from webhook.server.tls_reload import reloading_ssl_context
from webhook.server.worker import worker_class
from webhook.settings import Settings


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def gunicorn_options(settings: Settings, cert_dir: Path | None = None) -> dict[str, Any]:
    server = settings.server
    directory = cert_dir or server.cert_dir
    return {
        # The admission port, and the ops port when configured (webhook.http.listeners).
        "bind": [bind_address(server.host, p) for p in (server.port, server.ops_port) if p is not None],
        "worker_class": (worker_class(settings.overload, server.max_body_bytes) if server.worker == "webhook"
                         else GthreadWorker),
        "workers": server.workers,
        "threads": server.threads,
        "worker_connections": settings.overload.max_connections,
        "keepalive": server.keepalive_seconds,
        "timeout": server.request_timeout_seconds,
        "graceful_timeout": server.graceful_timeout_seconds,
        "certfile": str(directory / "tls.crt"),
        "keyfile": str(directory / "tls.key"),
        # gunicorn's ssl_context server hook: one cached TLS context, rebuilt when the certificate
        # files change (rotation, no restart). The worker wraps each connection with it.
        "ssl_context": reloading_ssl_context,
        # Admission requests have short headers; bound them so a hostile client cannot hog memory.
        "limit_request_line": 4094,
        "limit_request_fields": 64,
        "limit_request_field_size": 8190,
        # Requests are logged by the app (webhook.routes.observe), one JSON line each; gunicorn's access log stays off.
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "warning",
        "logconfig_dict": gunicorn_logconfig(settings.logging),
        "proc_name": "gpushare-webhook",
        # The webhook terminates TLS itself and reads no proxy headers: gunicorn honours none
        # (no secure-scheme or forwarder headers), so whom it would trust with them does not
        # matter, and "*" spares it parsing the peer's address on every request.
        "secure_scheme_headers": {},
        "forwarder_headers": "",
        "forwarded_allow_ips": "*",
        "control_socket_disable": True,
        **_client_certificates(settings),
        **probe_hooks(server),
    }


def worker_app(settings: Settings, factory: Callable[[], Any]) -> Callable[[], Any]:
    """What gunicorn loads in its worker: the app from ``factory``; under ``gthread``, behind
    the scheduling middleware and with the process tuned as the project's worker tunes it."""
    if settings.server.worker == "webhook":
        return factory

    def scheduled() -> Any:
        tune_process(settings.overload)
        return SchedulingMiddleware(factory(), settings.overload, settings.server.max_body_bytes)

    return scheduled


def _client_certificates(settings: Settings) -> dict[str, Any]:
    """Ask TLS clients for a certificate and verify it against the configured CA (webhook.http.auth).

    CERT_OPTIONAL, not REQUIRED: kubelet probes and Prometheus scrapes come without one; the
    guard in webhook.http.auth requires it on the admission paths.
    """
    ca_file = settings.auth.client_ca_file
    if ca_file is None:
        return {}
    return {"cert_reqs": ssl.CERT_OPTIONAL, "ca_certs": str(ca_file)}
