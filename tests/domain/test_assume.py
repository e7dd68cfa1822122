"""The assume-cache (policies/placement/assume.py): what this process admitted that the watch has not shown
yet, each record for a time-to-live and within a size, laid over the cluster state read-only."""

from __future__ import annotations

from policies.model.cluster import PodGPU, PodInfo
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.model.settings import StateSettings
from policies.placement.assume import PlacementLedger


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pod(name: str, node: str = "n1", mem: int = 4) -> PodInfo:
    return PodInfo("default", name, f"uid-{name}", node, "Running", (PodGPU("c", mem, 0, 0),), {})


def test_an_assumption_lasts_its_time_to_live_and_no_longer():
    clock = Clock()
    ledger = PlacementLedger(assume_ttl=60, recent_ttl=30, clock=clock)
    ledger.assume(pod("a"))
    ledger.remember_created(pod("r", node=""))
    clock.now = 29.9
    assert (ledger.assumed("default/a"), ledger.recent("default/r")) == (pod("a"), pod("r", node=""))
    assert ledger.counts() == (1, 1)
    clock.now = 30.0  # a record lasts up to, not including, its expiry
    assert ledger.recent("default/r") is None and ledger.counts() == (1, 0)
    assert ledger.assumed_on("n1", lambda p: False) == [pod("a")]
    clock.now = 60.0
    assert ledger.assumed("default/a") is None and ledger.assumed_on("n1", lambda p: False) == []
    assert ledger.counts() == (0, 0)
    late = PlacementLedger(assume_ttl=60, clock=clock)
    late.assume(pod("b"))
    clock.now = 200  # read long after its expiry, before anything swept it
    assert late.assumed("default/b") is None


def test_the_oldest_records_make_room_and_a_new_record_of_a_pod_replaces_its_old_one():
    clock = Clock()
    ledger = PlacementLedger(assume_max=2, recent_max=2, clock=clock)
    ledger.assume(pod("a"))
    clock.now = 1
    ledger.assume(pod("b"))
    ledger.assume(pod("a", node="n2"))  # re-admitted onto another node: the newest, on n2 only
    assert ledger.assumed_on("n1", lambda p: False) == [pod("b")]
    clock.now = 2
    ledger.assume(pod("c"))  # the oldest, b, makes room
    assert ledger.counts()[0] == 2
    assert ledger.assumed("default/b") is None
    assert ledger.assumed_on("n1", lambda p: False) == [pod("c")]
    assert ledger.assumed_on("n2", lambda p: False) == [pod("a", node="n2")]
    for name in "xyz":
        ledger.remember_created(pod(name))
    assert ledger.counts()[1] == 2 and ledger.recent("default/x") is None and ledger.recent("default/z") == pod("z")


def test_expired_records_are_swept_from_the_oldest_while_newer_ones_stay():
    clock = Clock()
    ledger = PlacementLedger(assume_ttl=10, clock=clock)
    ledger.assume(pod("old"))
    clock.now = 5
    ledger.assume(pod("new"))
    clock.now = 12  # the first has expired, the second has 3 left
    assert ledger.counts() == (1, 0)
    assert ledger.assumed_on("n1", lambda p: False) == [pod("new")]


def test_the_view_counts_assumptions_until_the_watch_shows_the_pod():
    base = ClusterSnapshot()
    ledger = PlacementLedger()
    ledger.assume(pod("a"))
    ledger.assume(pod("b"))
    ledger.remember_created(pod("r", node=""))
    view = ledger.view(base)
    assert sorted(p.key for p in view.pods_on_node("n1")) == ["default/a", "default/b"]
    assert view.get_pod("default", "r") == pod("r", node="") and view.has_pod("default", "r")
    assert view.get_pod("default", "a") == pod("a") and not view.has_pod("default", "nobody")
    assert view.get_pod("default", "nobody") is None
    base.upsert_pod(pod("a"))  # the watch shows a on n1: its own record counts, the assumption is forgotten
    assert sorted(p.key for p in view.pods_on_node("n1")) == ["default/a", "default/b"]
    assert ledger.assumed("default/a") is None and ledger.assumed("default/b") == pod("b")
    assert view.pods_on_node("n2") == []
    base.record_pod(PodInfo("default", "b", "uid-b", "", "Running", (), {}))  # the watch knows b: no GPUs now
    assert view.get_pod("default", "b") is None and view.has_pod("default", "b")


def test_each_node_has_one_lock_from_a_few():
    ledger = PlacementLedger()
    locks = {name: ledger.node_lock(name) for name in (f"node-{i}" for i in range(200))}
    assert all(ledger.node_lock(name) is lock for name, lock in locks.items())
    assert 32 < len({id(lock) for lock in locks.values()}) <= 64  # nodes spread over the stripes


def test_a_ledger_built_without_arguments_keeps_what_the_default_settings_keep():
    # The webhook builds its ledger from the state settings; one built bare (as tests and tools do)
    # must keep records exactly as long and as many as those settings' defaults say.
    defaults = StateSettings()
    clock = Clock()
    ledger = PlacementLedger(clock=clock)
    ledger.assume(pod("a"))
    ledger.remember_created(pod("r", node=""))
    clock.now = defaults.assume_ttl_seconds - 0.001
    assert ledger.assumed("default/a") == pod("a")
    clock.now = defaults.assume_ttl_seconds
    assert ledger.assumed("default/a") is None
    clock.now = defaults.recent_pods_ttl_seconds - 0.001
    assert ledger.recent("default/r") == pod("r", node="")
    clock.now = defaults.recent_pods_ttl_seconds
    assert ledger.recent("default/r") is None

    full = PlacementLedger(clock=clock)
    for number in range(defaults.assume_max_entries):
        full.assume(pod(f"a{number}"))
    for number in range(defaults.recent_pods_max_entries):
        full.remember_created(pod(f"r{number}", node=""))
    assert full.counts() == (defaults.assume_max_entries, defaults.recent_pods_max_entries)
    full.assume(pod("one-more"))
    full.remember_created(pod("one-more", node=""))
    assert full.counts() == (defaults.assume_max_entries, defaults.recent_pods_max_entries)
    assert full.assumed("default/a0") is None and full.recent("default/r0") is None  # the oldest made room
    assert full.assumed("default/a1") == pod("a1")
