"""JSON responses and the one error shape every refusal uses: {"error": {"code", "reason"}}."""

from __future__ import annotations

import json
from typing import Any

from flask import Response


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload, separators=(",", ":")), status=status, mimetype="application/json")


def error_body(status: int, reason: str) -> dict[str, Any]:
    return {"error": {"code": status, "reason": reason}}


def error_response(status: int, reason: str) -> Response:
    return json_response(error_body(status, reason), status)
