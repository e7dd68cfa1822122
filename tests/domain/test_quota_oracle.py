"""The quotas' usage counted by the project (policies/quota/quota_usage.py, through the snapshot reader) agrees
with an oracle written from PodRequests and QuotaV1Pod (tests/support/quota_oracle.py) on generated clusters."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from policies.model.cluster_manifests import pod_from_manifest
from policies.model.pod_usage import usage_of
from policies.model.settings import Names
from policies.quota.quota_usage import quota_limits
from tests.support.profiles import examples
from tests.support.quota_oracle import MEM, resource_quota_used, tree_used
from webhook.state.snapshot import snapshot_from_objects

NAMES = Names()
NAMESPACES = ["team-a", "team-b", "team-c"]
NOW = time.time()
PHASES = ["Pending", "Running", "Succeeded", "Failed", "Unknown", ""]


@st.composite
def containers(draw: st.DrawFn, init: bool) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(0, 3))):
        amount = draw(st.integers(0, 16))
        section = draw(st.sampled_from(["limits", "requests", "both"]))
        values = {MEM: str(amount)} if amount else {"cpu": "1"}
        resources = {"limits": values, "requests": values} if section == "both" else {section: values}
        container: dict[str, Any] = {"name": f"c{i}", "image": "cuda:12", "resources": resources}
        if init and draw(st.booleans()):
            container["restartPolicy"] = "Always"
        out.append(container)
    return out


@st.composite
def pods(draw: st.DrawFn, index: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"p{index}", "namespace": draw(st.sampled_from(NAMESPACES))}
    if draw(st.booleans()):  # being deleted: its grace period is over or not
        meta["deletionTimestamp"] = draw(st.sampled_from(["2020-01-01T00:00:00Z", "2999-01-01T00:00:00Z"]))
        if draw(st.booleans()):
            meta["deletionGracePeriodSeconds"] = draw(st.sampled_from([0, 30]))
    spec: dict[str, Any] = {"containers": draw(containers(False)), "initContainers": draw(containers(True))}
    if draw(st.booleans()):
        spec["nodeName"] = "gpu-1"
    if draw(st.integers(0, 4)) == 0:
        spec["overhead"] = {MEM: str(draw(st.integers(1, 2)))}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": draw(st.sampled_from(PHASES))}}


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    pod_list = [draw(pods(i)) for i in range(draw(st.integers(0, 12)))]
    quotas: list[dict[str, Any]] = []
    for namespace in NAMESPACES[:2]:
        key = draw(st.sampled_from([f"requests.{MEM}", MEM, f"limits.{MEM}"]))
        quotas.append({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": namespace},
                       "spec": {"hard": {key: str(draw(st.integers(0, 100)))}}})
    quotas.append({"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
                   "metadata": {"name": "tree", "namespace": "kube-system"},
                   "spec": {"root": {"name": "root", "max": {MEM: "1000"}, "min": {MEM: "1000"}, "children": [
                       {"name": "ab", "max": {MEM: "500"}, "children": [
                           {"name": "a", "namespaces": ["team-a"], "max": {MEM: "100"}},
                           {"name": "b", "namespaces": ["team-b"], "max": {MEM: "100"}}]},
                       {"name": "c", "namespaces": ["team-c"], "max": {MEM: "2147483647"}}]}}})
    return pod_list, quotas


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.data())
def test_the_quotas_count_what_the_oracle_counts(cluster, data):
    pod_list, quotas = cluster
    state = snapshot_from_objects([*pod_list, *quotas], NAMES)
    assert_agrees(pod_list, quotas, usage_of(state.pods()))
    # The state keeps its per-namespace sums pod by pod: after pods change phase, come and go, they agree.
    state.quota_usage()
    for index in data.draw(st.lists(st.integers(0, 40), max_size=6)):
        if index < len(pod_list) and data.draw(st.booleans()):
            gone = pod_list.pop(index)
            state.remove_pod(gone["metadata"]["namespace"], gone["metadata"]["name"])
        else:
            changed = data.draw(pods(100 + index))
            key = (changed["metadata"]["namespace"], changed["metadata"]["name"])
            pod_list[:] = [p for p in pod_list if (p["metadata"]["namespace"], p["metadata"]["name"]) != key]
            pod_list.append(changed)
            state.record_pod(pod_from_manifest(changed, NAMES))
    assert_agrees(pod_list, quotas, state.quota_usage())


def assert_agrees(pod_list, quotas, usage) -> None:
    state = snapshot_from_objects(quotas, NAMES)
    for namespace in NAMESPACES:
        limits = quota_limits(namespace, state.quota_objects(), usage, NAMES, NOW)
        found = {(limit.label, limit.key): limit.used for limit in limits}
        expected = {}
        quota = next((q for q in quotas if q["metadata"].get("namespace") == namespace), None)
        if quota is not None and f"requests.{MEM}" in quota["spec"]["hard"]:
            used = resource_quota_used(pod_list, namespace, NOW)
            expected[(f"ResourceQuota {namespace}/gpu", f"requests.{MEM}")] = used
        tree = "ElasticQuotaTree kube-system/tree quota node"
        key = f'max["{MEM}"]'
        if namespace != "team-c":
            leaf = namespace[-1]
            expected[(f"{tree} {leaf}", key)] = tree_used(pod_list, {namespace})
            expected[(f"{tree} ab", key)] = tree_used(pod_list, {"team-a", "team-b"})
            expected[(f"{tree} root", key)] = tree_used(pod_list, set(NAMESPACES))
        else:  # its own max is "unlimited": only the root limits it
            expected[(f"{tree} root", key)] = tree_used(pod_list, set(NAMESPACES))
        assert found == expected, namespace
    event(f"team-a charged: {'some' if resource_quota_used(pod_list, 'team-a', NOW) else 'nothing'}")
