"""AdmissionReview (admission.k8s.io/v1, and v1beta1 answered in kind): parsing and answers."""

from __future__ import annotations

import base64
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policies.engine import Verdict

SUPPORTED_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


class ReviewError(ValueError):
    """The body is not an AdmissionReview this server can answer (an HTTP 400)."""


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class GroupVersionKind(_Loose):
    group: str = ""
    version: str = ""
    kind: str


class GroupVersionResource(_Loose):
    group: str = ""
    version: str = ""
    resource: str


class ReviewUser(_Loose):
    username: str = ""
    groups: list[str] = Field(default_factory=list)


class AdmissionRequest(_Loose):
    uid: str = Field(min_length=1, max_length=256)
    kind: GroupVersionKind
    resource: GroupVersionResource | None = None
    sub_resource: str = Field("", alias="subResource")
    name: str = ""
    namespace: str = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    user_info: ReviewUser = Field(default_factory=ReviewUser, alias="userInfo")
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(None, alias="oldObject")
    dry_run: bool = Field(False, alias="dryRun")


class AdmissionReview(_Loose):
    api_version: Literal["admission.k8s.io/v1", "admission.k8s.io/v1beta1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


def _describe(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return f"{where}: {first['msg']}"


def parse_review(payload: Any) -> AdmissionReview:
    """Validate a decoded JSON body as an AdmissionReview with a request."""
    if not isinstance(payload, dict):
        raise ReviewError(f"body must be a JSON object (an AdmissionReview), got {type(payload).__name__}")
    if "request" not in payload:
        raise ReviewError("AdmissionReview has no request")
    try:
        return AdmissionReview.model_validate(payload)
    except ValidationError as exc:
        raise ReviewError(f"not an AdmissionReview: {_describe(exc)}") from None


def audit_annotations(verdict: Verdict | None, allowed: bool) -> dict[str, str]:
    """What the API server writes into its audit event (as ``<webhook name>/<key>``).

    ``decision`` and ``rules`` (every rule and mutation that fired, comma-separated, empty when
    none did) are always present; ``denied``, ``warned`` and ``patched`` name the ids by effect.
    """
    rule_ids = verdict.rule_ids if verdict is not None else []
    notes = {"decision": "allowed" if allowed else "denied", "rules": ",".join(rule_ids)}
    if verdict is not None:
        by_effect = {"denied": [f.rule for f in verdict.violations], "warned": [f.rule for f in verdict.warnings],
                     "patched": verdict.patch_ids, "exempted": [f.rule for f in verdict.exempted]}
        for key, ids in by_effect.items():
            if ids:
                notes[key] = ",".join(dict.fromkeys(ids))
        if verdict.exempted:  # exemptions leave an audit trail, with the reason given
            notes["exemption_reason"] = verdict.exemption_reason
    return notes


def build_response(review: AdmissionReview, verdict: Verdict | None, *, allowed: bool | None = None,
                   message: str | None = None, warnings: list[str] | None = None) -> dict[str, Any]:
    """The AdmissionReview answer: uid echoed, in the apiVersion that was sent."""
    response: dict[str, Any] = {"uid": review.request.uid}
    warns = list(warnings or [])
    if verdict is not None:
        allowed = verdict.allowed if allowed is None else allowed
        warns = [w.message for w in verdict.warnings] + warns
        if not verdict.allowed:
            denial = "; ".join(v.message for v in verdict.violations)
            message = denial if message is None else f"{message}; {denial}"
        if verdict.patch:
            response["patch"] = base64.b64encode(json.dumps(verdict.patch, separators=(",", ":"))
                                                 .encode()).decode()
            response["patchType"] = "JSONPatch"
    response["allowed"] = True if allowed is None else allowed
    response["auditAnnotations"] = audit_annotations(verdict, response["allowed"])
    if not response["allowed"]:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message or "denied",
                              "status": "Failure"}
    elif message:
        warns.append(message)
    if warns:
        response["warnings"] = warns
    return {"apiVersion": review.api_version, "kind": "AdmissionReview", "response": response}
