"""``POST /dry-run``: manifests in (YAML or JSON), verdicts, patches and rankings out.

The body is parsed by ``webhook.documents.manifests.parse_manifests`` (multi-document YAML, a JSON
object, a ``List`` or an AdmissionReview) and judged by ``webhook.services.dry_run`` (shared with the
dashboard); the policy work is ``policies.admission.dryrun``. Nothing
is written: not the state, not the binding assume-cache.

The answer is bounded (``dry_run`` settings): at most ``max_documents`` objects per request, the
best ``ranking_nodes`` nodes of each ranking with a count of the rest, and ``max_answer_bytes``
in all; past a bound, a 413 that names it. Without the bounds a hundred tiny documents drew a
ranking of every node each: an answer thousands of times the size of its question.
"""

from __future__ import annotations

from typing import Any

import msgspec
from flask import Blueprint, request

from policies.admission.dryrun import DryRun
from webhook.http.body import BodyError, read_body
from webhook.http.routing import RouteTable, Work
from webhook.routes.observe import Observer, Refusal, observed
from webhook.routes.services import Services
from webhook.services.dry_run import DryRunInputError, TooManyObjects, dry_run_body

_ENCODER = msgspec.json.Encoder()


def read_text_body(max_bytes: int) -> str:
    """The body as text; RequestEntityTooLarge (a 413) over ``max_bytes``, chunked or not."""
    try:
        raw = read_body(request.environ, max_bytes)
    except BodyError as exc:
        raise DryRunInputError(str(exc)) from None
    if not raw.strip():
        raise DryRunInputError("empty body; send Kubernetes manifests as YAML or JSON")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DryRunInputError(f"body is not UTF-8 (byte {exc.start})") from None


def dry_run_routes(table: RouteTable, services: Services, observer: Observer, dry_run: DryRun) -> Blueprint:
    """``POST /dry-run[?node=NAME]``: verdicts, patches and rankings, no side effects."""
    routes = Blueprint("dry_run", __name__)

    def answer() -> Any:
        node = request.args.get("node", "")
        settings = services.settings
        bounds = settings.dry_run
        try:
            results = dry_run_body(read_text_body(settings.server.max_body_bytes), dry_run, services.state, node,
                                   settings.input, bounds)
        except DryRunInputError as exc:
            raise Refusal(400, str(exc)) from None
        except TooManyObjects as exc:
            raise Refusal(413, str(exc)) from None
        encoded = _ENCODER.encode({"state": services.state_source, "cluster": services.state_description,
                                   "results": results})
        if len(encoded) > bounds.max_answer_bytes:
            raise Refusal(413, f"the answer would be {len(encoded)} bytes, more than dry_run.max_answer_bytes "
                               f"({bounds.max_answer_bytes}): send fewer objects per request")
        return msgspec.Raw(encoded)  # encoded once: the answer's JSON as it is

    path = table.declare("/dry-run", Work.TOOL, ["POST"])
    routes.add_url_rule(path, "dry_run", observed(observer, table.count(path), answer), methods=["POST"])
    return routes
