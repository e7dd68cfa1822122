"""kube-scheduler extender (k8s.io/kube-scheduler/extender/v1) over the ranking engine.

``POST /scheduler/filter`` answers an ExtenderFilterResult, ``POST /scheduler/prioritize``
a HostPriorityList. The Go types carry no JSON tags, so kube-scheduler sends and reads
capitalised keys (``Pod``, ``Nodes``, ``NodeNames``, ``FailedNodes``, ``Host``, ``Score``);
Go's decoder matches keys case-insensitively, so any case is accepted here too.
Scores are 0..MaxExtenderPriority (10): the scheduler multiplies them by 10 (and the
extender's weight) into its own 0..100 scale.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from flask import Blueprint, request

from policies.model.cluster import ClusterState
from policies.model.cluster_manifests import node_from_manifest
from policies.model.resources import ShapeError, cards_per_container, container_requests, pod_spec
from policies.scoring.scoring import NodeScore, Scorer, pod_request, unusable_values
from webhook.http.routing import RouteTable, Work
from webhook.routes.observe import Observer, Refusal, observed
from webhook.routes.services import Services
from webhook.settings import Settings


class ExtenderInputError(ValueError):
    """The body is not ExtenderArgs this extender can answer (an HTTP 400)."""


@dataclass
class ExtenderArgs:
    pod: dict[str, Any]
    node_names: list[str] | None
    node_list: dict[str, Any] | None  # the NodeList, when the scheduler sends whole nodes

    def nodes(self) -> list[dict[str, Any]]:
        return list((self.node_list or {}).get("items") or [])


def _field(payload: dict[str, Any], name: str) -> Any:
    """A key as Go's encoding/json finds it: exact match first, then case-insensitive."""
    if name in payload:
        return payload[name]
    lowered = name.lower()
    return next((v for k, v in payload.items() if isinstance(k, str) and k.lower() == lowered), None)


def parse_extender_args(payload: Any) -> ExtenderArgs:
    if not isinstance(payload, dict):
        raise ExtenderInputError(f"body must be a JSON object (ExtenderArgs), got {type(payload).__name__}")
    pod = _field(payload, "Pod")
    if not isinstance(pod, dict):
        raise ExtenderInputError("ExtenderArgs.Pod must be a Pod object")
    names = _field(payload, "NodeNames")
    nodes = _field(payload, "Nodes")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise ExtenderInputError("ExtenderArgs.NodeNames must be a list of node names")
    if nodes is not None:
        items = nodes.get("items") if isinstance(nodes, dict) else None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ExtenderInputError("ExtenderArgs.Nodes must be a NodeList with items")
    if names is None and nodes is None:
        raise ExtenderInputError("ExtenderArgs needs NodeNames (nodeCacheCapable: true) or Nodes")
    return ExtenderArgs(pod, names, nodes)


class Extender:
    """Filter and prioritize for kube-scheduler, over one scorer and the current state."""

    def __init__(self, settings: Settings, scorer: Scorer) -> None:
        self.names = settings.names
        self.max_priority = settings.scoring.extender_max_priority
        self.scorer = scorer

    def _rank(self, args: ExtenderArgs, state: ClusterState) -> list[NodeScore]:
        meta = args.pod.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or meta.get('generateName') or ''}"
        try:
            spec, base = pod_spec(args.pod, "Pod")
            containers = container_requests(spec, base, self.names)
            request = pod_request("Pod", args.pod, self.names, key=key, containers=containers)
        except ShapeError as exc:
            raise ExtenderInputError(f"ExtenderArgs.Pod: {exc}") from None
        labels = meta.get("labels")
        cards = cards_per_container(labels if isinstance(labels, dict) else {}, self.names) or 1
        problems = unusable_values(containers, self.names, cards)
        if problems:
            # Fits nowhere, and no preemption would change that: every candidate fails, with why.
            return [NodeScore(name, False, problems=problems, unresolvable=True) for name in self._candidates(args)]
        if args.node_names is not None:
            return self.scorer.rank(request, state, node_names=args.node_names)
        return self.scorer.rank(request, state, nodes=(node_from_manifest(n, self.names) for n in args.nodes()))

    @staticmethod
    def _candidates(args: ExtenderArgs) -> list[str]:
        if args.node_names is not None:
            return list(args.node_names)
        metas = (n.get("metadata") for n in args.nodes())
        return [str(m.get("name") or "") if isinstance(m, dict) else "" for m in metas]

    def filter(self, args: ExtenderArgs, state: ClusterState) -> dict[str, Any]:
        """ExtenderFilterResult: the nodes that fit, and why each other node does not."""
        scores = self._rank(args, state)
        fitting = {s.node for s in scores if s.fits}
        failed = {s.node: "; ".join(s.reasons) for s in scores if not s.fits and not s.unresolvable}
        unresolvable = {s.node: "; ".join(s.reasons) for s in scores if s.unresolvable}
        result: dict[str, Any] = {"Nodes": None, "NodeNames": None, "FailedNodes": failed,
                                  "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
        if args.node_names is not None:
            result["NodeNames"] = [n for n in args.node_names if n in fitting]
        else:
            node_list = dict(args.node_list or {})
            node_list["items"] = [n for n in args.nodes() if (n.get("metadata") or {}).get("name") in fitting]
            result["Nodes"] = node_list
        return result

    def prioritize(self, args: ExtenderArgs, state: ClusterState) -> list[dict[str, Any]]:
        """HostPriorityList: every candidate node, 0..max priority; nodes that do not fit score 0."""
        scores = {s.node: s for s in self._rank(args, state)}
        order: Iterable[str] = args.node_names if args.node_names is not None else (
            str((n.get("metadata") or {}).get("name") or "") for n in args.nodes())
        return [{"Host": name, "Score": self.scale(scores.get(name))} for name in order]

    def scale(self, score: NodeScore | None) -> int:
        if score is None or not score.fits:
            return 0
        return round(score.score * self.max_priority / 100)


def extender_routes(table: RouteTable, services: Services, observer: Observer, extender: Extender,
                    read_json: Callable[[dict[str, Any]], Any]) -> Blueprint:
    """``POST /scheduler/filter`` and ``/scheduler/prioritize`` for kube-scheduler's extender."""
    routes = Blueprint("extender", __name__)

    def answer(call: Callable[[ExtenderArgs, ClusterState], Any]) -> Any:
        try:
            args = parse_extender_args(read_json(request.environ))
        except ValueError as exc:  # ExtenderInputError, and the reader's refusals of bad JSON
            raise Refusal(400, str(exc)) from None
        state = services.state
        if state is None:
            raise Refusal(503, "no cluster state to filter or score nodes against")
        try:
            return call(args, state)
        except ValueError as exc:
            raise Refusal(400, str(exc)) from None

    for path, call in (("/scheduler/filter", extender.filter), ("/scheduler/prioritize", extender.prioritize)):
        label = table.count(table.declare(path, Work.TOOL, ["POST"]))
        routes.add_url_rule(path, label.replace("-", "_"), observed(observer, label, partial(answer, call)),
                            methods=["POST"])
    return routes
