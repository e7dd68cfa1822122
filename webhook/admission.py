"""From an AdmissionReview to an engine call and back; no policy is decided here."""

from __future__ import annotations

from typing import Any, Literal

from policies.cluster import ClusterState
from policies.engine import Engine
from policies.resources import ShapeError
from policies.rules.base import UserInfo

from .review import AdmissionReview, ReviewError, build_response

Mode = Literal["mutate", "validate"]


def answer_review(review: AdmissionReview, engine: Engine, state: ClusterState | None,
                  mode: Mode) -> dict[str, Any]:
    """The AdmissionReview response for one request, mutating or validating."""
    request = review.request
    kind = request.kind.kind
    if request.operation not in ("CREATE", "UPDATE") or request.object is None or not engine.handles(kind):
        return build_response(review, None, allowed=True)
    subject = engine.subject(
        kind, request.object, operation=request.operation, namespace=request.namespace,
        old=request.old_object, user=UserInfo(request.user_info.username, tuple(request.user_info.groups)),
        state=state,
    )
    try:
        verdict = engine.mutate(subject) if mode == "mutate" else engine.validate(subject)
    except ShapeError as exc:
        raise ReviewError(f"request.object: {kind} {subject.label.split(' ', 1)[-1]}: {exc}") from None
    return build_response(review, verdict)
