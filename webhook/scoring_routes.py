"""Routes over the ranking engine: ``POST /dry-run``, ``POST /scheduler/filter``, ``POST /scheduler/prioritize``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, request

from policies.cluster import ClusterState
from policies.dryrun import DryRun
from policies.scoring import Scorer

from .dry_run import DryRunInputError, dry_run_body, read_text_body
from .extender import Extender, ExtenderArgs, parse_extender_args
from .http_errors import error_response as _refuse
from .http_errors import json_response as _answer

if TYPE_CHECKING:
    from .app import Services


def register_scoring_routes(app: Flask, services: Services, read_json: Callable[[], Any]) -> None:
    """Add the routes; ``read_json()`` is the app's JSON body reader (ValueError on bad JSON)."""
    settings = services.settings
    scorer = Scorer(settings.names)  # one per process: its profile cache serves every route
    dry_run = DryRun(services.engine, scorer)
    extender = Extender(settings, scorer)
    if services.state is not None:
        scorer.profiles(services.state)  # build the per-node cache now, not on the scheduler's first call

    @app.post("/dry-run")
    def dry_run_route() -> Response:
        node = request.args.get("node", "")
        try:
            results = dry_run_body(read_text_body(), dry_run, services.state, node)
        except DryRunInputError as exc:
            return _refuse(400, str(exc))
        return _answer({"state": services.state_source, "results": results})

    def extender_route(answer: Callable[[ExtenderArgs, ClusterState], Any]) -> Response:
        try:
            args = parse_extender_args(read_json())
            state = services.state
            if state is None:
                return _refuse(503, "no cluster state to filter or score nodes against")
            return _answer(answer(args, state))
        except ValueError as exc:  # ExtenderInputError, and the reader's refusals of bad JSON
            return _refuse(400, str(exc))

    app.add_url_rule("/scheduler/filter", "scheduler_filter", lambda: extender_route(extender.filter),
                     methods=["POST"])
    app.add_url_rule("/scheduler/prioritize", "scheduler_prioritize", lambda: extender_route(extender.prioritize),
                     methods=["POST"])

