"""``GET /explain?namespace=&name=``: why a GPU pod is Pending (``policies.scoring.explain``), behind the
same authentication as ``/dry-run`` (``auth.bearer_paths``), never on the admission paths."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, request

from policies.scoring.explain import explain_pod
from policies.scoring.scoring import Scorer
from webhook.http.routing import RouteTable, Work
from webhook.routes.observe import Refusal, observed

if TYPE_CHECKING:
    from webhook.routes.observe import Observer
    from webhook.routes.services import Services


def explain_routes(table: RouteTable, services: Services, observer: Observer, scorer: Scorer) -> Blueprint:
    routes = Blueprint("explain", __name__)

    def answer() -> dict[str, Any]:
        namespace = request.args.get("namespace", "")
        name = request.args.get("name", "")
        if not namespace or not name:
            raise Refusal(400, "give the pod as ?namespace=NS&name=NAME")
        state = services.state
        if state is None:
            raise Refusal(503, "no cluster state to explain pods against")
        pod = state.get_pod(namespace, name)
        if pod is None:
            why = "it asks for no GPU" if state.has_pod(namespace, name) else "no such pod in the cluster state"
            raise Refusal(404, f"pod {namespace}/{name}: {why}")
        return {"state": services.state_source, **explain_pod(pod, state, scorer).as_dict()}

    path = table.declare("/explain", Work.TOOL, ["GET"])
    routes.add_url_rule(path, "explain", observed(observer, table.count(path), answer), methods=["GET"])
    return routes
