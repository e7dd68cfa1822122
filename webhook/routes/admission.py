"""``POST /validate`` and ``POST /mutate``: from an AdmissionReview to an engine call and back;
no policy is decided here."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal

import msgspec
from flask import Response

from policies.admission.engine import Engine
from policies.model.cluster import ClusterState
from policies.model.resources import ShapeError
from policies.model.subject import UserInfo
from policies.model.workloads import WorkloadConfigError
from policies.placement.assume import PlacementLedger
from policies.placement.leadership import FollowerView
from webhook.http.errors import error_body, error_response
from webhook.http.guards import Environ, GuardChain
from webhook.http.jsonbody import BadRequest
from webhook.http.routing import RouteTable, Work
from webhook.routes.observe import Observer
from webhook.routes.review import AdmissionReview, ReviewError, build_response, parse_review
from webhook.routes.services import Services
from webhook.state.leader import LeaderElector

Mode = Literal["mutate", "validate"]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]
log = logging.getLogger("gpushare.admission")
_ENCODE = msgspec.json.Encoder().encode  # as webhook.http.errors.json_response encodes
_STATUS = {200: "200 OK", 400: "400 Bad Request"}


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
    # A subresource whose object is the whole Pod (ephemeralcontainers, status) is judged as that
    # subresource's change; pods/binding sends a Binding, a kind judged as itself.
    sub_resource = request.sub_resource if kind == "Pod" else ""
    subject = engine.subject(
        kind, request.object, operation=request.operation, namespace=request.namespace,
        old=request.old_object, user=UserInfo(request.user_info.username, tuple(request.user_info.groups)),
        state=state, group=group, sub_resource=sub_resource, admission=True,
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


class ReviewEndpoints:
    """``POST /validate`` and ``POST /mutate`` as plain WSGI in front of the Flask app
    (``fallback``), which serves every other path.

    Not Flask views because the API server calls these two for every pod, and Flask's request and
    response objects, routing and context cost about a third of a review (bench/admission_cost.py).
    They run the app's guard chain (webhook.http.guards: listener split, authentication, body
    limit, metrics, JSON errors), the same object in the same order as Flask's hooks run it.
    """

    def __init__(self, fallback: WsgiApp, table: RouteTable, services: Services, observer: Observer,
                 chain: GuardChain, read_json: Callable[[Environ], Any]) -> None:
        self._fallback = fallback
        self._services = services
        self._observer = observer
        self.chain = chain
        self._read_json = read_json
        self._modes: dict[str, Mode] = {}
        for mode in ("validate", "mutate"):
            path = table.declare(f"/{mode}", Work.REVIEW, ["POST"])  # the API server's calls
            table.count(path)
            self._modes[path] = mode

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        mode = self._modes.get(path)
        if mode is None:
            return self._fallback(environ, start_response)
        try:
            status, payload = self._answer(mode, path, environ)
        except Exception as exc:  # a body over the limit (413), the large-body gate (503), a bug (500)
            return self.chain.error(path, environ, exc, log)(environ, start_response)
        if isinstance(payload, Response):
            return payload(environ, start_response)
        start_response(_STATUS[status], [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
        return [payload]

    def _answer(self, mode: Mode, path: str, environ: Environ) -> tuple[int, bytes | Response]:
        """The status and the answer's bytes, or a refusal as a Response."""
        refusal = self.chain.before(path, environ)
        if refusal is not None:
            return refusal.status_code, refusal
        if environ.get("REQUEST_METHOD") != "POST":
            reason = f"{path} answers POST only (an AdmissionReview from the API server)"
            self.chain.refused(path, 405, reason)
            response = error_response(405, reason)
            response.headers["Allow"] = "POST"
            return 405, response
        started = time.perf_counter()
        review: AdmissionReview | None = None
        services = self._services
        try:
            review = parse_review(self._read_json(environ))
            body = answer_review(review, services.engine, services.state, mode, services.ledger, services.leader)
        except (BadRequest, ReviewError) as exc:
            self._observer.refused(mode, 400, str(exc), time.perf_counter() - started, review)
            return 400, _ENCODE(error_body(400, str(exc)))
        self._observer.answered(mode, review, body, time.perf_counter() - started)
        return 200, _ENCODE(body)
