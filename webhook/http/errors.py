"""JSON responses and the one error shape every refusal uses: {"error": {"code", "reason"}}."""

from __future__ import annotations

from typing import Any

import msgspec
from flask import Response

# msgspec writes compact JSON about eight times faster than json.dumps: every answer pays it.
_ENCODER = msgspec.json.Encoder()


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(_ENCODER.encode(payload), status=status, mimetype="application/json")


def error_body(status: int, reason: str) -> dict[str, Any]:
    return {"error": {"code": status, "reason": reason}}


def error_response(status: int, reason: str) -> Response:
    return json_response(error_body(status, reason), status)

