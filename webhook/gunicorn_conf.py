"""Gunicorn settings for the webhook, derived from the one Settings object.

Worker model: one ``gthread`` process. The API server keeps TLS connections alive and
reuses them; gthread keeps idle keep-alive connections in a poller instead of pinning a
thread to each (the sync worker cannot do keep-alive at all, and async workers would add
a monkey-patching dependency). One process keeps the in-memory binding assume-cache exact;
throughput scales with replicas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from policies.settings import Settings

from .tls_reload import reloading_ssl_context


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def gunicorn_options(settings: Settings, cert_dir: Path | None = None) -> dict[str, Any]:
    server = settings.server
    directory = cert_dir or server.cert_dir
    return {
        "bind": [bind_address(server.host, server.port)],
        "worker_class": "gthread",
        "workers": server.workers,
        "threads": server.threads,
        "keepalive": server.keepalive_seconds,
        "timeout": server.request_timeout_seconds,
        "graceful_timeout": server.graceful_timeout_seconds,
        "certfile": str(directory / "tls.crt"),
        "keyfile": str(directory / "tls.key"),
        # One cached TLS context, rebuilt when the certificate files change (rotation, no restart).
        "ssl_context": reloading_ssl_context,
        # Admission requests have short headers; bound them so a hostile client cannot hog memory.
        "limit_request_line": 4094,
        "limit_request_fields": 64,
        "limit_request_field_size": 8190,
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "warning",
        "proc_name": "gpushare-webhook",
        "control_socket_disable": True,
    }
