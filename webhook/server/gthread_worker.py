"""Stock gunicorn's ``gthread`` worker (``server.worker: gthread``), the supported way out of a
bug in the project's own transport.

gthread accepts, does the TLS handshake, reads and writes each request on one of its threads;
admission scheduling runs inside the app, as WSGI middleware
(``webhook.server.scheduling_middleware``). Two things are ours, both through the base
``Worker``'s documented methods, as in the project's worker: a request gunicorn cannot parse gets
the project's JSON error instead of gunicorn's HTML page (``handle_error``), and the
open-connections gauge reads gthread's own count (``load_wsgi``). The transport is gthread's,
untouched.
"""

from __future__ import annotations

from typing import Any

from webhook.http.gunicorn_adapter import ThreadWorker, open_connections
from webhook.server.app_runner import answer_error
from webhook.server.heartbeat import Heartbeating
from webhook.server.scheduling_middleware import SchedulingMiddleware
from webhook.server.tallies import Counts


class GthreadWorker(Heartbeating, ThreadWorker):  # type: ignore[misc]
    """See the module doc."""

    counts = Counts(None, None)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        if isinstance(self.wsgi, SchedulingMiddleware):
            self.counts = self.wsgi.counts
        if self.counts.metrics is not None:
            self.counts.metrics.open_connections.set_function(lambda: open_connections(self))

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        answer_error(req, client, addr, exc, self.counts)
