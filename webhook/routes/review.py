"""AdmissionReview (admission.k8s.io/v1, and v1beta1 answered in kind): parsing and answers."""

from __future__ import annotations

import re
from binascii import b2a_base64
from typing import Annotated, Any, Literal

import msgspec

from policies.admission.engine import Verdict
from policies.model.warning_text import MESSAGE_LIMIT, WARNING_LIMIT, WARNINGS_TOTAL_LIMIT, bounded, joined

SUPPORTED_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


class ReviewError(ValueError):
    """The body is not an AdmissionReview this server can answer (an HTTP 400)."""


# msgspec Structs, not pydantic models: checking a review is on every request's path and
# msgspec's C validation took 1 µs where pydantic took 5 (bench/admission.py). Unknown fields
# are ignored, as the API server may add some; ``object`` stays the decoded dict.
class GroupVersionKind(msgspec.Struct, frozen=True):
    kind: str
    group: str = ""
    version: str = ""


class GroupVersionResource(msgspec.Struct, frozen=True):
    resource: str
    group: str = ""
    version: str = ""


class ReviewUser(msgspec.Struct, frozen=True):
    username: str = ""
    groups: list[str] = msgspec.field(default_factory=list)


Uid = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class AdmissionRequest(msgspec.Struct, frozen=True):
    uid: Uid
    kind: GroupVersionKind
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    resource: GroupVersionResource | None = None
    sub_resource: str = msgspec.field(default="", name="subResource")
    name: str = ""
    namespace: str = ""
    user_info: ReviewUser = msgspec.field(default_factory=ReviewUser, name="userInfo")
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = msgspec.field(default=None, name="oldObject")
    dry_run: bool = msgspec.field(default=False, name="dryRun")


class AdmissionReview(msgspec.Struct, frozen=True):
    api_version: Literal["admission.k8s.io/v1", "admission.k8s.io/v1beta1"] = msgspec.field(name="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


# msgspec builds a Struct type's conversion info on first use, and threads that race to build it
# crash the process (SIGSEGV in convert_dict_to_struct, msgspec 0.22; seen as a worker dying on
# its first burst of concurrent reviews). Build it here, at import, before any request thread:
# every nested Struct appears with a value so that each one's info is built.
msgspec.convert({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "warm-up", "kind": {"kind": "Pod"}, "operation": "CREATE", "resource": {"resource": "pods"},
    "userInfo": {"username": "warm-up", "groups": ["warm-up"]}, "object": {}, "oldObject": {}}}, AdmissionReview)

_PATCH_ENCODER = msgspec.json.Encoder()
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")


def _describe(exc: msgspec.ValidationError) -> str:
    """msgspec's "Expected `str`, got `int` - at `$.request.uid`" as "request.uid: expected `str`, got `int`"."""
    text, _, at = str(exc).partition(" - at `$")
    where = at.rstrip("`").lstrip(".")
    missing = _MISSING.match(text)
    if missing:
        where, text = f"{where}.{missing['field']}".lstrip("."), "field required"
    return f"{where or 'body'}: {text[:1].lower()}{text[1:]}"


def parse_review(payload: Any) -> AdmissionReview:
    """Validate a decoded JSON body as an AdmissionReview with a request."""
    if not isinstance(payload, dict):
        raise ReviewError(f"body must be a JSON object (an AdmissionReview), got {type(payload).__name__}")
    if "request" not in payload:
        raise ReviewError("AdmissionReview has no request")
    try:
        return msgspec.convert(payload, AdmissionReview)
    except msgspec.ValidationError as exc:
        raise ReviewError(f"not an AdmissionReview: {_describe(exc)}") from None


def audit_annotations(verdict: Verdict | None, allowed: bool) -> dict[str, str]:
    """What the API server writes into its audit event (as ``<webhook name>/<key>``).

    ``decision`` and ``rules`` (every rule and mutation that fired, comma-separated, empty when
    none did) are always present; ``denied``, ``warned`` and ``patched`` name the ids by effect.
    """
    rule_ids = verdict.rule_ids if verdict is not None else []
    notes = {"decision": "allowed" if allowed else "denied", "rules": ",".join(rule_ids)}
    if verdict is not None and (rule_ids or verdict.exempted):
        by_effect = {"denied": [f.rule for f in verdict.violations], "warned": [f.rule for f in verdict.warnings],
                     "patched": verdict.patch_ids, "exempted": [f.rule for f in verdict.exempted]}
        for key, ids in by_effect.items():
            if ids:
                notes[key] = ",".join(dict.fromkeys(ids))
        if verdict.exempted:  # exemptions leave an audit trail: the reason given, and on whose word
            notes["exemption_reason"] = verdict.exemption_reason
            notes["exempted_by"] = ",".join(verdict.exempted_by)
    return notes


def build_response(review: AdmissionReview, verdict: Verdict | None, *, allowed: bool | None = None,
                   message: str | None = None, warnings: list[str] | None = None) -> dict[str, Any]:
    """The AdmissionReview answer: uid echoed, in the apiVersion that was sent."""
    response: dict[str, Any] = {"uid": review.request.uid}
    warns = list(warnings or [])
    full: dict[str, list[str]] = {}  # warnings shortened for the limit, whole, by rule
    if verdict is not None:
        # Most verdicts find nothing: their answer is read without a pass over the findings.
        judged_allowed = verdict.allowed
        allowed = judged_allowed if allowed is None else allowed
        if verdict.findings:
            found_warnings = verdict.warnings
            for w in found_warnings:  # shortened for the answer: whole in the audit annotations
                if w.brief or len(w.message) > WARNING_LIMIT:
                    full.setdefault(w.rule, []).append(w.message)
            warns = [w.brief or w.message for w in found_warnings] + warns
            if not judged_allowed:
                denial = joined([v.message for v in verdict.violations], MESSAGE_LIMIT, what="violations")
                message = denial if message is None else f"{message}; {denial}"
        if verdict.patch:
            response["patch"] = b2a_base64(_PATCH_ENCODER.encode(verdict.patch), newline=False).decode()
            response["patchType"] = "JSONPatch"
    response["allowed"] = True if allowed is None else allowed
    notes = response["auditAnnotations"] = audit_annotations(verdict, response["allowed"])
    # The API server passes on warnings of at most 256 characters whole; the audit log keeps the rest.
    for rule, texts in full.items():
        notes[f"warning.{rule}"] = joined(texts, MESSAGE_LIMIT, what="warnings", sep=" | ")
    if not response["allowed"]:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message or "denied",
                              "status": "Failure"}
    elif message:
        warns.append(message)
    if warns:
        response["warnings"] = bounded(warns, WARNINGS_TOTAL_LIMIT)
    return {"apiVersion": review.api_version, "kind": "AdmissionReview", "response": response}
