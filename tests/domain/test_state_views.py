"""Views over the cluster state (a replica's assumptions, a follower's answer) read the state
through, except what each one changes."""

from __future__ import annotations

from policies.model.cluster import StateView
from policies.placement.assume import PlacementLedger
from policies.placement.leadership import FollowerView
from tests.support.cluster_objects import gpu_pod, node, state_of
from webhook.settings import Settings

NODE, OTHER = "cn-beijing.192.168.1.10", "cn-beijing.192.168.1.11"


def _state():
    state = state_of(Settings(), [node(NODE), node(OTHER)],
                     [gpu_pod("train-0", node_name=NODE), gpu_pod("train-1", node_name=OTHER)])
    state.upsert_namespace("default", {"team": "vision"})
    return state


def test_every_view_reads_nodes_pods_and_namespaces_from_the_state():
    state = _state()
    for view in (StateView(state), FollowerView(state, "gpushare-0"), PlacementLedger().view(state)):
        assert view.get_node(NODE) is state.get_node(NODE) and view.get_node("nowhere") is None
        assert [n.name for n in view.nodes()] == [n.name for n in state.nodes()] == [NODE, OTHER]
        assert view.has_pod("default", "train-0") and not view.has_pod("default", "nobody")
        assert view.get_pod("default", "train-1") is state.get_pod("default", "train-1")
        assert [p.key for p in view.pods_on_node(OTHER)] == ["default/train-1"]
        assert view.namespace_labels("default") == {"team": "vision"}
        assert view.namespace_labels("elsewhere") is None


def test_a_view_over_a_state_without_namespaces_has_no_labels():
    class NodesOnly:  # a ClusterState that was never given Namespaces (no namespace_labels at all)
        def __init__(self, base):
            self.base = base

        def __getattr__(self, name):
            if name == "namespace_labels":
                raise AttributeError(name)
            return getattr(self.base, name)

    assert StateView(NodesOnly(_state())).namespace_labels("default") is None


def test_only_the_follower_changes_availability():
    state = _state()
    assert StateView(state).availability() == state.availability()
    assert PlacementLedger().view(state).availability() == state.availability()
    follower = FollowerView(state, "gpushare-0").availability()
    assert not follower.usable and "the leader is gpushare-0" in follower.reason
