"""Bindings on a replica that is not the leader: the state is "not usable" for them, so the
placement rules apply the configured fail mode (``state.when_unavailable.placement``) and say why.

Only the leader's assume-cache sees every admitted binding; another replica judging one could
admit a pod of the other job type onto a node the leader has just filled (GB001).
"""

from __future__ import annotations

from collections.abc import Mapping

from .cluster import Availability, ClusterState, NodeInfo, PodInfo

NOT_LEADER = "this replica is not the leader; bindings are judged by the leader"


class FollowerView:
    """A ClusterState that reads like ``base`` but is not usable for judging placements."""

    def __init__(self, base: ClusterState, holder: str) -> None:
        self.base = base
        reason = f"the leader is {holder}" if holder else "no leader known to this replica yet"
        self._availability = Availability(False, reason, NOT_LEADER, "the binding reaches the leader")

    def availability(self) -> Availability:
        base = self.base.availability()
        return base if not base.usable else self._availability  # not synced, stale: said first

    def get_node(self, name: str) -> NodeInfo | None:
        return self.base.get_node(name)

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        labels = getattr(self.base, "namespace_labels", None)
        return labels(namespace) if labels is not None else None

    def nodes(self) -> list[NodeInfo]:
        return self.base.nodes()

    def has_pod(self, namespace: str, name: str) -> bool:
        return self.base.has_pod(namespace, name)

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        return self.base.get_pod(namespace, name)

    def pods_on_node(self, node: str) -> list[PodInfo]:
        return self.base.pods_on_node(node)
