"""Which listener serves which path (``server.ops_port``).

With an ops port configured, ``server.ops_paths`` (``/metrics``, ``/dry-run``, ``/explain``) are
served only on it and every other path only on the admission port; ``server.probe_paths`` on
both. A request on the wrong listener gets a JSON 404 that names the right one (the first step
of the guard chain, webhook.http.guards). The listener is
the connection's local port, never the Host header, which the client writes.
"""

from __future__ import annotations

from typing import Any

from flask import Response

from webhook.http.errors import error_response
from webhook.settings import ServerSettings


def local_port(environ: dict[str, Any]) -> int | None:
    """The port the request's connection arrived on; None outside gunicorn (a test client)."""
    sock = environ.get("gunicorn.socket")
    try:
        return int(sock.getsockname()[1]) if sock is not None else None
    except (OSError, IndexError, TypeError, ValueError):
        return None


def listener_refusal(server: ServerSettings, path: str, port: int | None) -> str | None:
    """Why ``path`` is not served on ``port`` (None: it is)."""
    if server.ops_port is None or port is None or path in server.probe_paths:
        return None
    on_ops, ops_path = port == server.ops_port, path in server.ops_paths
    if ops_path and not on_ops:
        return f"{path} is served on the ops port {server.ops_port}, not on the admission port (server.ops_port)"
    if on_ops and not ops_path:
        return (f"{path} is not served on the ops port {server.ops_port}; it serves "
                f"{', '.join(server.ops_paths + server.probe_paths)} (server.ops_paths)")
    return None


def listener_denial(server: ServerSettings, path: str, environ: dict[str, Any]) -> Response | None:
    """The 404 for ``path`` asked for on the listener that does not serve it (None: it does)."""
    if server.ops_port is None:
        return None
    reason = listener_refusal(server, path, local_port(environ))
    if reason is None:
        return None
    return error_response(404, reason)

