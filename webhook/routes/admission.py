"""``POST /validate`` and ``POST /mutate``: from an AdmissionReview to an engine call and back;
no policy is decided here."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

from flask import Blueprint, Response

from policies.assume import PlacementLedger
from policies.cluster import ClusterState
from policies.engine import Engine
from policies.leadership import FollowerView
from policies.resources import ShapeError
from policies.subject import UserInfo
from policies.workloads import WorkloadConfigError
from webhook.routes.body import BadRequest
from webhook.routes.observe import Observer
from webhook.routes.review import AdmissionReview, ReviewError, build_response, parse_review
from webhook.routes.services import Services
from webhook.server.http_errors import error_response, json_response
from webhook.server.metrics import register_endpoint
from webhook.server.scheduling import Work, declare
from webhook.state.leader import LeaderElector

Mode = Literal["mutate", "validate"]
log = logging.getLogger("gpushare.admission")


def answer_review(review: AdmissionReview, engine: Engine, state: ClusterState | None,
                  mode: Mode, ledger: PlacementLedger | None = None,
                  leader: LeaderElector | None = None) -> dict[str, Any]:
    """The AdmissionReview response for one request, mutating or validating.

    With a ``ledger``, a validated request that is not a dry run records what it admitted
    (placements, new pods) so that the next request sees it before the watch does. With a
    ``leader``, a binding reaching a replica that does not lead meets the placement fail mode.
    """
    request = review.request
    kind, group = request.kind.kind, request.kind.group
    if request.operation not in ("CREATE", "UPDATE") or request.object is None or not engine.handles(kind, group):
        return build_response(review, None, allowed=True)
    if ledger is not None and state is not None:
        state = ledger.view(state)  # what this process admitted counts before the watch shows it
    if leader is not None and state is not None and kind == "Binding" and not leader.leading():
        state = FollowerView(state, leader.holder())
    subject = engine.subject(
        kind, request.object, operation=request.operation, namespace=request.namespace,
        old=request.old_object, user=UserInfo(request.user_info.username, tuple(request.user_info.groups)),
        state=state, group=group,
    )
    try:
        if mode == "mutate":
            verdict = engine.mutate(subject)
        elif ledger is not None and not request.dry_run:
            verdict = engine.admit(subject, ledger)
        else:
            verdict = engine.validate(subject)
    except ShapeError as exc:
        raise ReviewError(f"request.object: {kind} {subject.label.split(' ', 1)[-1]}: {exc}") from None
    except WorkloadConfigError as exc:
        # The admin's configuration, not the user's object, is wrong: admitted unjudged, and said so to
        # both (gpushare check fails on it, where the configuration is tested).
        said = f"{subject.label} was not checked: {exc}"
        log.warning(said)
        return build_response(review, None, allowed=True, warnings=[f"gpushare: {said}"])
    return build_response(review, verdict)


def admission_routes(services: Services, observer: Observer, read_json: Callable[[], Any]) -> Blueprint:
    """``POST /validate`` and ``POST /mutate``: an AdmissionReview in, an AdmissionReview out."""
    routes = Blueprint("admission", __name__)

    def review_route(mode: Mode) -> Response:
        started = time.perf_counter()
        review: AdmissionReview | None = None
        try:
            review = parse_review(read_json())
            body = answer_review(review, services.engine, services.state, mode, services.ledger, services.leader)
        except (BadRequest, ReviewError) as exc:
            observer.refused(mode, 400, str(exc), time.perf_counter() - started, review)
            return error_response(400, str(exc))
        observer.answered(mode, review, body, time.perf_counter() - started)
        return json_response(body)

    for mode in ("validate", "mutate"):
        path = declare(f"/{mode}", Work.REVIEW, ["POST"])  # the API server's calls
        register_endpoint(path)
        routes.add_url_rule(path, mode, partial(review_route, mode), methods=["POST"])
    return routes
