"""What a pod charges GPU quotas (policies/model/pod_usage.py), in process, on real Pod manifests: the
numbers of ``PodRequests`` and ``QuotaV1Pod`` (kubernetes pkg/api/v1/resource/helpers.go and
pkg/quota/v1/evaluator/core/pods.go, as tests/support/quota_oracle.py states them) and the per-namespace
index the cluster snapshot keeps current pod by pod."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from policies.model.cluster_manifests import pod_from_manifest
from policies.model.pod_usage import (
    PodUsage,
    UsageIndex,
    charged,
    deletion_deadline,
    pod_requests,
    pod_usage,
    usage_index,
    usage_of,
)
from policies.model.resources import container_requests
from policies.model.settings import Names

NAMES = Names()
MEM, CORE = NAMES.resources.gpu_mem, NAMES.resources.gpu_core
STAMP = "2024-05-01T12:00:00Z"
STAMP_SECONDS = datetime.fromisoformat("2024-05-01T12:00:00+00:00").timestamp()


def container(name: str, mem: int | None = None, core: int | None = None, *, section: str = "limits",
              sidecar: bool = False) -> dict[str, Any]:
    values = {k: str(v) for k, v in ((MEM, mem), (CORE, core)) if v is not None}
    out: dict[str, Any] = {"name": name, "image": "cuda:12", "resources": {section: values or {"cpu": "1"}}}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def requests_of(spec: dict[str, Any]):
    return container_requests(spec, ("spec",), NAMES)


@pytest.mark.parametrize(
    ("containers", "init", "overhead", "mem"),
    [
        # The app containers add up.
        ([container("a", 2), container("b", 3)], [], None, 5),
        # An init container runs alone before them: the larger of the two counts.
        ([container("a", 2)], [container("i", 7)], None, 7),
        ([container("a", 8)], [container("i", 7)], None, 8),
        # A sidecar runs beside the app containers and beside every init container after it.
        ([container("a", 2)], [container("s", 3, sidecar=True)], None, 5),
        ([container("a", 1)], [container("s", 3, sidecar=True), container("i", 4)], None, 7),
        # An init container before the sidecar does not run beside it.
        ([container("a", 1)], [container("i", 4), container("s", 3, sidecar=True)], None, 4),
        # The request, when the limit is not written.
        ([container("a", 6, section="requests")], [], None, 6),
        # spec.overhead is added, as a whole number; one that is no quantity adds nothing.
        ([container("a", 2)], [], {MEM: "3"}, 5),
        ([container("a", 2)], [], {MEM: "1500m"}, 3),
        ([container("a", 2)], [], {MEM: "-4"}, 2),
        ([container("a", 2)], [], {MEM: "lots"}, 2),
        ([container("a", 2)], [], {"cpu": "250m"}, 2),
        ([], [], {MEM: "1"}, 1),
    ],
)
def test_pod_requests_count_as_the_quota_admission_does(containers, init, overhead, mem):
    spec: dict[str, Any] = {"containers": containers, "initContainers": init}
    assert pod_requests(requests_of(spec), overhead, MEM) == mem
    if overhead is not None:
        spec["overhead"] = overhead
    pod = pod_from_manifest({"metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}, NAMES)
    assert pod.quota_mem == mem


def test_each_resource_is_counted_apart():
    spec = {"containers": [container("a", 2, 30), container("b", core=20)]}
    assert pod_requests(requests_of(spec), {CORE: "5"}, CORE) == 55
    assert pod_requests(requests_of(spec), {CORE: "5"}, MEM) == 2


@pytest.mark.parametrize(
    ("meta", "deadline"),
    [
        ({}, None),
        ({"deletionTimestamp": STAMP}, None),  # QuotaV1Pod needs both
        ({"deletionGracePeriodSeconds": 30}, None),
        ({"deletionTimestamp": STAMP, "deletionGracePeriodSeconds": 30}, STAMP_SECONDS + 30),
        ({"deletionTimestamp": STAMP, "deletionGracePeriodSeconds": 0}, STAMP_SECONDS),
        ({"deletionTimestamp": "2024-05-01T12:00:00+02:00", "deletionGracePeriodSeconds": 0}, STAMP_SECONDS - 7200),
        ({"deletionTimestamp": STAMP, "deletionGracePeriodSeconds": True}, None),
        ({"deletionTimestamp": STAMP, "deletionGracePeriodSeconds": "30"}, None),
        ({"deletionTimestamp": 1714564800, "deletionGracePeriodSeconds": 30}, None),
        ({"deletionTimestamp": "yesterday", "deletionGracePeriodSeconds": 30}, None),
    ],
)
def test_the_deletion_deadline_is_the_timestamp_plus_the_grace_period(meta, deadline):
    assert deletion_deadline(meta) == deadline


@pytest.mark.parametrize(
    ("phase", "deadline", "now", "expected"),
    [
        ("Running", None, 1000.0, True),
        ("Pending", None, 1000.0, True),
        ("", None, 1000.0, True),
        ("Succeeded", None, 1000.0, False),
        ("Failed", None, 1000.0, False),
        ("Running", 1000.0, 999.0, True),   # terminating, within its grace period
        ("Running", 1000.0, 1000.0, True),  # "now > deadline" stops the charge, not the moment itself
        ("Running", 1000.0, 1000.5, False),
        ("Failed", 1000.0, 999.0, False),
    ],
)
def test_charged_is_quota_v1_pod(phase, deadline, now, expected):
    assert charged(phase, deadline, now) is expected


def usage(namespace="team-a", phase="Running", node="gpu-1", deadline=None, mem=4, core=0) -> PodUsage:
    return PodUsage(namespace, phase, node, deadline, mem, core)


def test_the_index_sums_charged_and_placed_pods_per_namespace():
    index = UsageIndex([
        usage(mem=4, core=30),
        usage(mem=2, node=""),                    # pending: charged, not placed
        usage(namespace="team-b", mem=8, core=10),
        usage(phase="Succeeded", mem=16),         # finished: neither
        usage(phase="Failed", mem=16),
        usage(mem=0, core=0),                     # no GPU: nothing
        usage(mem=0, core=25, node="gpu-2"),      # compute only counts
    ])
    assert [index.charged_usage("team-a", i, 0.0) for i in (0, 1)] == [6, 55]
    assert [index.charged_usage("team-b", i, 0.0) for i in (0, 1)] == [8, 10]
    assert [index.charged_usage("team-c", i, 0.0) for i in (0, 1)] == [0, 0]
    assert [index.placed_usage(["team-a"], i) for i in (0, 1)] == [4, 55]
    assert [index.placed_usage(["team-a", "team-b"], i) for i in (0, 1)] == [12, 65]
    assert index.placed_usage(["team-c"], 0) == 0
    assert index.placed_usage([], 0) == 0


def test_pods_being_deleted_are_charged_until_their_grace_period_ends():
    index = UsageIndex([usage(mem=4), usage(mem=3, core=20, deadline=100.0), usage(mem=5, node="", deadline=200.0)])
    assert index.charged_usage("team-a", 0, 50.0) == 12
    assert index.charged_usage("team-a", 1, 50.0) == 20
    assert index.charged_usage("team-a", 0, 150.0) == 9     # the first one's grace period is over
    assert index.charged_usage("team-a", 1, 150.0) == 0
    assert index.charged_usage("team-a", 0, 250.0) == 4
    # A namespace whose only pods are being deleted.
    only = UsageIndex([usage(namespace="team-b", mem=2, core=15, deadline=100.0)])
    assert [only.charged_usage("team-b", i, 50.0) for i in (0, 1)] == [2, 15]
    assert [only.charged_usage("team-b", i, 150.0) for i in (0, 1)] == [0, 0]
    # Capacity scheduling counts what is placed, deleting or not.
    assert index.placed_usage(["team-a"], 0) == 7


def test_counting_a_pod_out_undoes_counting_it_in():
    index = UsageIndex()
    running, deleting = usage(mem=4, core=10), usage(mem=3, deadline=100.0)
    twin = usage(mem=3, deadline=100.0)  # two pods may look alike: one is counted out at a time
    for p in (running, deleting, twin):
        index.add(p, 1)
    assert index.charged_usage("team-a", 0, 0.0) == 10
    index.add(deleting, -1)
    assert index.charged_usage("team-a", 0, 0.0) == 7
    assert index.placed_usage(["team-a"], 0) == 7
    index.add(running, -1)
    assert (index.charged_usage("team-a", 0, 0.0), index.charged_usage("team-a", 1, 0.0)) == (3, 0)
    assert (index.placed_usage(["team-a"], 0), index.placed_usage(["team-a"], 1)) == (3, 0)
    index.add(twin, -1)
    assert index.charged_usage("team-a", 0, 0.0) == 0
    assert index.placed_usage(["team-a"], 0) == 0
    # Counting out a pod that was never counted in, or a finished one, changes nothing deleting.
    index.add(usage(namespace="team-b", mem=3, deadline=100.0), -1)
    index.add(usage(phase="Succeeded", mem=9), -1)
    assert index.charged_usage("team-b", 0, 0.0) == 0
    assert index.placed_usage(["team-a"], 0) == 0


def test_a_copy_is_counted_apart_from_its_original():
    index = UsageIndex([usage(mem=4), usage(mem=3, deadline=100.0), usage(namespace="team-b", mem=2, deadline=100.0)])
    copy = index.copy()
    assert [copy.charged_usage(n, 0, 0.0) for n in ("team-a", "team-b")] == [7, 2]
    assert copy.placed_usage(["team-a", "team-b"], 0) == 9
    copy.add(usage(mem=10), 1)
    copy.add(usage(mem=1, deadline=100.0), 1)
    copy.add(usage(namespace="team-b", mem=2, deadline=100.0), -1)
    assert [copy.charged_usage(n, 0, 0.0) for n in ("team-a", "team-b")] == [18, 0]
    assert [index.charged_usage(n, 0, 0.0) for n in ("team-a", "team-b")] == [7, 2]
    assert index.placed_usage(["team-a", "team-b"], 0) == 9
    # A copy of a copy whose deleting list emptied keeps counting what is left.
    again = copy.copy()
    assert [again.charged_usage(n, 0, 0.0) for n in ("team-a", "team-b")] == [18, 0]
    again.add(usage(namespace="team-b", mem=5, deadline=100.0), 1)
    assert again.charged_usage("team-b", 0, 0.0) == 5
    assert copy.charged_usage("team-b", 0, 0.0) == 0


def pod_manifest(name: str, namespace: str, mem: int | None, *, node: str = "gpu-1", phase: str = "Running",
                 meta: dict[str, Any] | None = None, core: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container("main", mem, core)]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, **(meta or {})},
            "spec": spec, "status": {"phase": phase}}


def test_the_quota_view_of_the_clusters_pods():
    pods = [pod_from_manifest(p, NAMES) for p in (
        pod_manifest("train", "team-a", 4, core=30),
        pod_manifest("cpu-only", "team-a", None),
        pod_manifest("serve", "team-b", None, core=20, node=""),
        pod_manifest("going", "team-a", 2, meta={"deletionTimestamp": STAMP, "deletionGracePeriodSeconds": 30}),
    )]
    assert usage_of(pods) == [
        PodUsage("team-a", "Running", "gpu-1", None, 4, 30),
        PodUsage("team-b", "Running", "", None, 0, 20),
        PodUsage("team-a", "Running", "gpu-1", STAMP_SECONDS + 30, 2, 0),
    ]
    assert pod_usage(pods[0]) == PodUsage("team-a", "Running", "gpu-1", None, 4, 30)
    assert pod_usage(pods[1]) == PodUsage("team-a", "Running", "gpu-1", None, 0, 0)
    index = usage_index(pods)
    assert index.charged_usage("team-a", 0, STAMP_SECONDS) == 6
    assert index.charged_usage("team-a", 0, STAMP_SECONDS + 31) == 4
    assert index.charged_usage("team-b", 1, STAMP_SECONDS) == 20
    assert index.placed_usage(["team-a", "team-b"], 1) == 30
