"""Serve renewed certificate files without a restart.

Gunicorn asks its ``ssl_context`` hook for a context on every new connection. This hook
keeps one context and builds a new one only when the certificate or key file changed
(size, mtime or inode: a Secret volume swaps a symlink, ``certs rotate`` renames a file).
Connections already open keep the session they negotiated; new ones get the new
certificate. A half-written pair (new key, old certificate) fails to load: the old context
stays in service and the next connection tries again, so a rotation never fails a handshake.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("gpushare.tls")
Signature = tuple[tuple[int, int, int], ...]


def _signature(paths: tuple[str, ...]) -> Signature:
    stats = [os.stat(p) for p in paths]  # follows symlinks, as a Secret volume needs
    return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in stats)


class ReloadingContext:
    """The current SSLContext for a certificate/key pair, rebuilt when the files change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._loaded: Signature | None = None
        self._failed: Signature | None = None

    def get(self, paths: tuple[str, ...], factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        try:
            current = _signature(paths)
        except OSError as exc:
            if self._context is None:
                raise
            log.warning("certificate files unreadable, keeping the loaded certificate: %s", exc)
            return self._context
        if current == self._loaded and self._context is not None:
            return self._context
        with self._lock:
            if current != self._loaded or self._context is None:
                self._reload(current, factory)
            assert self._context is not None
            return self._context

    def _reload(self, current: Signature, factory: Callable[[], ssl.SSLContext]) -> None:
        try:
            context = factory()
        except (ssl.SSLError, OSError, ValueError) as exc:
            if self._context is None:
                raise
            if current != self._failed:  # log a half-written pair once, not per connection
                log.warning("new certificate files do not load yet, keeping the previous ones: %s", exc)
                self._failed = current
            return
        if self._context is not None:
            log.warning("loaded a renewed serving certificate")
        self._context, self._loaded, self._failed = context, current, None


_RELOADER = ReloadingContext()


def reloading_ssl_context(conf: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    """Gunicorn's ``ssl_context`` server hook: gunicorn's own context, cached per file version."""
    paths = tuple(p for p in (conf.certfile, conf.keyfile, conf.ca_certs) if p)

    def factory() -> ssl.SSLContext:
        context = default_ssl_context_factory()
        # No TLS 1.3 session tickets: kube-apiserver's Go client keeps no session cache
        # (client-go's TLSConfigFor sets none), so it never resumes; tickets were about a
        # tenth of each new connection's CPU (docs/operations.md, "Overload").
        context.num_tickets = 0
        return context

    return _RELOADER.get(paths, factory)
