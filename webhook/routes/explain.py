"""``GET /explain?namespace=&name=``: why a GPU pod is Pending (``policies.explain``), behind the
same authentication as ``/dry-run`` (``auth.bearer_paths``), never on the admission paths."""

from __future__ import annotations

from typing import Any

from flask import request

from policies.cluster import ClusterState
from policies.explain import explain_pod
from policies.scoring import Scorer


class ExplainError(ValueError):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def explain_answer(state: ClusterState | None, scorer: Scorer, source: str) -> dict[str, Any]:
    namespace = request.args.get("namespace", "")
    name = request.args.get("name", "")
    if not namespace or not name:
        raise ExplainError(400, "give the pod as ?namespace=NS&name=NAME")
    if state is None:
        raise ExplainError(503, "no cluster state to explain pods against")
    pod = state.get_pod(namespace, name)
    if pod is None:
        why = "it asks for no GPU" if state.has_pod(namespace, name) else "no such pod in the cluster state"
        raise ExplainError(404, f"pod {namespace}/{name}: {why}")
    return {"state": source, **explain_pod(pod, state, scorer).as_dict()}
