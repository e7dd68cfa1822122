"""Routes over the ranking engine: ``POST /dry-run``, ``POST /scheduler/filter``, ``POST /scheduler/prioritize``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, request

from policies.cluster import ClusterState
from policies.dryrun import DryRun
from policies.scoring import Scorer
from webhook.routes.dry_run import DryRunInputError, dry_run_body, read_text_body
from webhook.routes.extender import Extender, ExtenderArgs, parse_extender_args
from webhook.server.http_errors import error_response as _refuse
from webhook.server.http_errors import json_response as _answer

if TYPE_CHECKING:
    from webhook.routes.observe import Observer
    from webhook.routes.services import Services


def register_scoring_routes(app: Flask, services: Services, read_json: Callable[[], Any],
                            observer: Observer) -> None:
    """Add the routes; ``read_json()`` is the app's JSON body reader (ValueError on bad JSON);
    ``observer`` counts and logs every answer and refusal."""
    settings = services.settings
    scorer = Scorer(settings.names)  # one per process: its profile cache serves every route
    dry_run = DryRun(services.engine, scorer)
    extender = Extender(settings, scorer)
    if services.state is not None:
        scorer.profiles(services.state)  # build the per-node cache now, not on the scheduler's first call

    def observed(endpoint: str, route: Callable[[], Any]) -> Callable[[], Response]:
        """``route`` returns a JSON-able answer or raises _Refusal; either way it is counted and logged."""

        def run() -> Response:
            started = time.perf_counter()
            try:
                body = route()
            except _Refusal as refusal:
                observer.refused(endpoint, refusal.status, refusal.reason, time.perf_counter() - started)
                return _refuse(refusal.status, refusal.reason)
            observer.served(endpoint, time.perf_counter() - started)
            return _answer(body)

        return run

    def dry_run_answer() -> Any:
        node = request.args.get("node", "")
        try:
            results = dry_run_body(read_text_body(), dry_run, services.state, node)
        except DryRunInputError as exc:
            raise _Refusal(400, str(exc)) from None
        return {"state": services.state_source, "cluster": services.state_description, "results": results}

    def extender_answer(answer: Callable[[ExtenderArgs, ClusterState], Any]) -> Any:
        try:
            args = parse_extender_args(read_json())
        except ValueError as exc:  # ExtenderInputError, and the reader's refusals of bad JSON
            raise _Refusal(400, str(exc)) from None
        state = services.state
        if state is None:
            raise _Refusal(503, "no cluster state to filter or score nodes against")
        try:
            return answer(args, state)
        except ValueError as exc:
            raise _Refusal(400, str(exc)) from None

    app.add_url_rule("/dry-run", "dry_run", observed("dry-run", dry_run_answer), methods=["POST"])
    app.add_url_rule("/scheduler/filter", "scheduler_filter",
                     observed("scheduler-filter", lambda: extender_answer(extender.filter)), methods=["POST"])
    app.add_url_rule("/scheduler/prioritize", "scheduler_prioritize",
                     observed("scheduler-prioritize", lambda: extender_answer(extender.prioritize)),
                     methods=["POST"])


class _Refusal(Exception):
    """A route's answer is an HTTP error with a JSON reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason

