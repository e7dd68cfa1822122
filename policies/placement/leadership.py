"""Bindings on a replica that is not the leader: the state is "not usable" for them, so the
placement rules apply the configured fail mode (``state.when_unavailable.placement``) and say why.

Only the leader's assume-cache sees every admitted binding; another replica judging one could
admit a pod of the other job type onto a node the leader has just filled (GB001).
"""

from __future__ import annotations

from policies.model.cluster import Availability, ClusterState, StateView

NOT_LEADER = "this replica is not the leader; bindings are judged by the leader"


class FollowerView(StateView):
    """A ClusterState that reads like ``base`` but is not usable for judging placements."""

    def __init__(self, base: ClusterState, holder: str) -> None:
        super().__init__(base)
        reason = f"the leader is {holder}" if holder else "no leader known to this replica yet"
        self._availability = Availability(False, reason, NOT_LEADER, "the binding reaches the leader")

    def availability(self) -> Availability:
        base = self.base.availability()
        return base if not base.usable else self._availability  # not synced, stale: said first
