"""The dashboard's Flask app: server-rendered Jinja pages, one small script for self-refresh,
no JavaScript build step and nothing fetched from a network (no CDN).

Read-only: the dry-run form judges what is pasted against the state and writes nothing. It
answers only requests whose Host is this loopback address (no DNS rebinding from a web page).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from flask import Flask, Response, abort, render_template, request

from policies.admission.dryrun import DryRun
from policies.admission.engine import Engine
from policies.audit.audit import Auditor, AuditResult
from policies.model.cluster import ClusterState
from policies.scoring.scoring import Scorer
from webhook.dashboard.view import PAGE_SIZE, Page, build_page
from webhook.services.dry_run import DryRunInputError, dry_run_body
from webhook.settings import Settings

MAX_FORM_BYTES = 1024 * 1024


@dataclass
class DashboardConfig:
    source: str
    refresh_seconds: int = 10
    # Minimum seconds between two audits of a changing live state (an audit of a large cluster takes seconds).
    audit_every_seconds: float = 30.0
    page_size: int = PAGE_SIZE


class AuditCache:
    """The last audit, redone when the state changed and the last one is old enough."""

    def __init__(self, auditor: Auditor, min_age: float, clock: Callable[[], float] = time.time) -> None:
        self._auditor, self._min_age, self._clock = auditor, min_age, clock
        self._lock = threading.Lock()
        self._generation: int | None = None
        self._at = 0.0
        self.result: AuditResult | None = None

    def get(self, state: ClusterState) -> tuple[AuditResult, float]:
        generation = getattr(state, "generation", 0)
        with self._lock:
            now = self._clock()
            if self.result is None or (generation != self._generation and now - self._at >= self._min_age):
                self.result = self._auditor.audit(state, now)
                self._generation, self._at = generation, now
            return self.result, self._at


def audit_time(at: float) -> str:
    """When the audit ran, in local time with its offset from UTC: people reading the page may be
    elsewhere than the machine serving it."""
    local = time.localtime(at)
    offset = local.tm_gmtoff or 0
    sign = "+" if offset >= 0 else "-"
    hours, minutes = divmod(abs(offset) // 60, 60)
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', local)} UTC{sign}{hours:02d}:{minutes:02d}"


def same_origin(fetch_site: str | None, origin: str | None, host: str) -> bool:
    """A request from this very page, or from no page at all (curl). Browsers say where a request
    comes from in Sec-Fetch-Site (Fetch Metadata); with this page's Referrer-Policy: no-referrer,
    their Origin on a form post is "null", so Origin alone decides only for browsers without it."""
    if fetch_site is not None:
        return fetch_site in ("same-origin", "none")
    if origin is None:
        return True
    from urllib.parse import urlsplit

    return origin != "null" and urlsplit(origin).netloc == host


def create_dashboard(settings: Settings, state: ClusterState, config: DashboardConfig,
                     host_names: tuple[str, ...] = ()) -> Flask:
    app = Flask(__name__)  # templates/ and static/ beside this module
    app.config["MAX_CONTENT_LENGTH"] = MAX_FORM_BYTES
    engine = Engine(settings)
    scorer = Scorer(settings.names)
    dry_run = DryRun(engine, scorer)
    audits = AuditCache(Auditor(settings, engine), config.audit_every_seconds)
    allowed_hosts = frozenset(host_names)

    @app.before_request
    def loopback_only() -> None:
        if allowed_hosts and request.host not in allowed_hosts:
            abort(403)

    def page_model() -> Page:
        result, at = audits.get(state)
        page = request.args.get("page", "1")
        number = int(page) if page.isdigit() else 1
        stamp = audit_time(at)
        return build_page(state, scorer, result, stamp, config.source, number, config.page_size)

    def refresh_seconds() -> int:
        """--refresh, or ?refresh=N (2..3600) for this page."""
        asked = request.args.get("refresh", "")
        return min(max(int(asked), 2), 3600) if asked.isdigit() else config.refresh_seconds

    @app.get("/")
    def index() -> str:
        return render_template("index.html", page=page_model(), refresh=refresh_seconds(),
                               dry_run=None, dry_run_text="", dry_run_error="")

    @app.get("/live")
    def live() -> str:
        """The part of the page that refreshes itself."""
        return render_template("live.html", page=page_model())

    @app.post("/dry-run")
    def dry_run_form() -> str | Response:
        if not same_origin(request.headers.get("Sec-Fetch-Site"), request.headers.get("Origin"), request.host):
            # A page elsewhere may not post to this one (a browser sends Origin with every form POST;
            # curl sends none and is allowed): the verdict shows the cluster's state.
            return Response("cross-origin form posts are refused; open the dashboard itself\n", status=403,
                            mimetype="text/plain")
        text = request.form.get("manifests", "")
        results, error = None, ""
        if not text.strip():
            error = "Paste one or more Kubernetes manifests (YAML or JSON)."
        else:
            try:
                results = dry_run_body(text, dry_run, state, request.form.get("node", "").strip(), settings.input)
            except DryRunInputError as exc:
                error = str(exc)
        return render_template("index.html", page=page_model(), refresh=config.refresh_seconds,
                               dry_run=results, dry_run_text=text, dry_run_error=error)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.after_request
    def headers(response: Response) -> Response:
        # Everything the page needs is served from here.
        response.headers["Content-Security-Policy"] = ("default-src 'self'; img-src 'self' data:; "
                                                       "style-src 'self'; script-src 'self'; form-action 'self'")
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    return app
