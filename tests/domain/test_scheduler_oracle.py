"""The placement rules never count more strictly than the scheduler, and inspect, the audit and the
metrics count what it counts: generated clusters judged against an oracle written from the
scheduler extender's documented allocation (tests/support/scheduler_oracle.py, independent of policies/).

Generated: nodes of every shared mode and nodes that share GPU without the mode label; cards of
several sizes, sometimes fewer allocatable than their capacity; running pods recorded on cards by
ACK's allocation annotation or the extender's card index, or on no card, some finished, some being
deleted, some with gpu-mem on init containers, some crowding a card past 20 pods; and a pending pod (one or more app
containers, init containers, the multi-GPU label, compute on core_mem nodes). Hypothesis profile
``ci`` in CI, ``large`` on demand (tests/support/profiles.py, docs/testing.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from policies.admission.engine import Engine
from policies.audit.audit import audit_state
from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.placement.allocation import cluster_usage
from tests.support.profiles import examples
from tests.support.scheduler_oracle import (
    ALLOCATION,
    CORE,
    CORE_ALLOCATION,
    COUNT,
    LEGACY,
    MEM,
    SCHEDULE,
    SPREAD,
    finds_room,
    oracle_node,
)
from webhook.http.allocation_metrics import AllocationExporter
from webhook.settings import MetricsSettings, Settings

SETTINGS = Settings()
ENGINE = Engine(SETTINGS)
NAMES = SETTINGS.names
NODE_MODES = ["cgpu", "share", "mps", "core_mem", None]  # None: shares GPU without the label


def _container(name: str, mem: int, core: int = 0) -> dict[str, Any]:
    limits = {MEM: str(mem)}
    if core:
        limits[CORE] = str(core)
    return {"name": name, "image": "cuda", "resources": {"limits": limits, "requests": dict(limits)}}


@st.composite
def nodes(draw: st.DrawFn, name: str) -> dict[str, Any]:
    mode = draw(st.sampled_from(NODE_MODES))
    count = draw(st.integers(1, 4))
    per_card = draw(st.integers(4, 32))
    capacity = {MEM: str(count * per_card), COUNT: str(count)}
    if mode == "core_mem":
        capacity[CORE] = str(count * 100)
    allocatable = dict(capacity)
    if draw(st.integers(0, 4)) == 0:  # a card reported unhealthy: allocatable drops, card sizes do not
        allocatable[MEM] = str((count - 1) * per_card)
    labels = {"kubernetes.io/hostname": name, "gpushare.io/cpu-manager-policy": "none"}
    labels.update({SCHEDULE: mode} if mode else {"gpushare": "true"})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": f"cn-beijing.i-{name}"},
            "status": {"capacity": capacity, "allocatable": allocatable}}


@st.composite
def running_pods(draw: st.DrawFn, node: dict[str, Any], index: int) -> dict[str, Any]:
    count = int(node["status"]["capacity"][COUNT])
    core_mem = node["metadata"]["labels"].get(SCHEDULE) == "core_mem"
    apps = [_container(f"c{i}", draw(st.integers(1, 8)), draw(st.sampled_from([10, 30])) if core_mem else 0)
            for i in range(draw(st.integers(1, 2)))]
    spec: dict[str, Any] = {"nodeName": node["metadata"]["name"], "containers": apps}
    if draw(st.integers(0, 4)) == 0:
        spec["initContainers"] = [_container("warm", draw(st.integers(1, 16)))]
    annotations: dict[str, str] = {}
    record = draw(st.sampled_from(["allocation", "allocation", "allocation", "legacy", "none"]))
    if record == "allocation":
        cards = {str(i): draw(st.integers(0, count - 1 + (draw(st.integers(0, 9)) == 0))) for i in range(len(apps))}
        annotations[ALLOCATION] = json.dumps({i: {card: int(apps[int(i)]["resources"]["limits"][MEM])}
                                              for i, card in cards.items()})
        if core_mem:
            annotations[CORE_ALLOCATION] = json.dumps({i: {card: int(apps[int(i)]["resources"]["limits"][CORE])}
                                                       for i, card in cards.items()})
    elif record == "legacy" and not core_mem:
        annotations[LEGACY] = str(draw(st.integers(0, count - 1)))
    phase = draw(st.sampled_from(["Running", "Running", "Running", "Succeeded"]))
    metadata: dict[str, Any] = {"name": f"run-{index}", "namespace": "default", "annotations": annotations}
    if draw(st.integers(0, 4)) == 0:  # being deleted (a rolling update's old pod, a drain), still Running
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": phase}}


@st.composite
def crowd(draw: st.DrawFn, node: dict[str, Any]) -> list[dict[str, Any]]:
    """Sometimes 19 to 21 one-GiB pods recorded on one card: the cGPU limit of 20 pods per card."""
    if draw(st.integers(0, 3)):
        return []
    core_mem = node["metadata"]["labels"].get(SCHEDULE) == "core_mem"
    card = draw(st.integers(0, int(node["status"]["capacity"][COUNT]) - 1))
    out = []
    for i in range(draw(st.integers(19, 21))):
        annotations = {ALLOCATION: json.dumps({"0": {str(card): 1}})}
        if core_mem:
            annotations[CORE_ALLOCATION] = json.dumps({"0": {str(card): 1}})
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"crowd-{i}", "namespace": "batch", "annotations": annotations},
                    "spec": {"nodeName": node["metadata"]["name"], "containers": [_container("c", 1, int(core_mem))]},
                    "status": {"phase": "Running"}})
    return out


@st.composite
def pending_pods(draw: st.DrawFn, node: dict[str, Any]) -> dict[str, Any]:
    core_mem = node["metadata"]["labels"].get(SCHEDULE) == "core_mem"
    metadata: dict[str, Any] = {"name": "pending", "namespace": "default", "labels": {}}
    shape = draw(st.sampled_from(["one", "several", "spread"] if not core_mem else ["one"]))
    if shape == "one":
        apps = [_container("c", draw(st.integers(1, 32)), draw(st.sampled_from([5, 30, 60])) if core_mem else 0)]
    elif shape == "several":
        apps = [_container(f"c{i}", draw(st.integers(1, 12))) for i in range(draw(st.integers(2, 3)))]
    else:
        cards = draw(st.integers(2, 4))
        metadata["labels"][SPREAD] = str(cards)
        apps = [_container("c", cards * draw(st.integers(1, 16)))]
    spec: dict[str, Any] = {"containers": apps}
    if draw(st.booleans()):
        spec["initContainers"] = [_container("warm", draw(st.integers(1, 32)))]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": "Pending"}}


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], dict[str, Any]]:
    node_list = [draw(nodes(f"n{i}")) for i in range(draw(st.integers(1, 3)))]
    running: dict[str, list[dict[str, Any]]] = {}
    index = 0
    for node in node_list:
        pods = []
        for _ in range(draw(st.integers(0, 6))):
            pods.append(draw(running_pods(node, index)))
            index += 1
        running[node["metadata"]["name"]] = pods + [
            {**p, "metadata": {**p["metadata"], "name": f"{node['metadata']['name']}-{p['metadata']['name']}"}}
            for p in draw(crowd(node))]
    target = draw(st.sampled_from(node_list))
    return node_list, running, draw(pending_pods(target))


def _state(node_list, running, pending) -> ClusterSnapshot:
    state = ClusterSnapshot()
    for node in node_list:
        state.upsert_node(node_from_manifest(node, NAMES))
    for pods in running.values():
        for pod in pods:
            state.upsert_pod(pod_from_manifest(pod, NAMES))
    state.upsert_pod(pod_from_manifest(pending, NAMES))
    return state


COUNTING_RULES = {"GB002", "GB003", "GB004"}


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_every_binding_the_oracle_finds_room_for_is_allowed(cluster):
    node_list, running, pending = cluster
    state = _state(node_list, running, pending)
    judged = 0
    for node in node_list:
        name = node["metadata"]["name"]
        if not finds_room(oracle_node(node, running[name]), pending):
            continue
        judged += 1
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "pending", "namespace": "default"},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": name}}
        verdict = ENGINE.validate(ENGINE.subject("Binding", binding, namespace="default", state=state))
        refused = [f.message for f in verdict.violations if f.rule in COUNTING_RULES]
        assert refused == [], (name, refused)
    event(f"bindings the oracle finds room for: {judged if judged < 3 else '3 or more'}")


_SAMPLE = re.compile(r'^(?P<name>\w+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$')


def _series(text: str) -> dict[tuple[str, str, str], float]:
    """(family, node, card) -> value, from the exposition text."""
    out = {}
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', found["labels"]))
        out[(found["name"], labels.get("node", ""), labels.get("card", ""))] = float(found["value"])
    return out


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_inspect_the_audit_and_the_metrics_count_what_the_oracle_counts(cluster):
    node_list, running, pending = cluster
    state = _state(node_list, running, pending)
    oracle = {n["metadata"]["name"]: oracle_node(n, running[n["metadata"]["name"]]) for n in node_list}
    usage = {n.name: n for n in cluster_usage(state, NAMES).nodes}
    exporter = AllocationExporter(state, NAMES, MetricsSettings(per_card="all"))
    exporter.refresh()
    series = _series(exporter.exposition().decode())
    audit = audit_state(state, SETTINGS, now=0.0)
    over = {(f.node, m.group(1)) for f in audit.findings if f.rule == "GA001"
            for m in [re.search(r"GPU(\d+): \d+ GiB of gpu-mem", f.message)] if m}
    crowded = {(f.node, m.group(1)) for f in audit.findings if f.rule == "GA002"
               for m in [re.search(r"GPU(\d+): ", f.message)] if m}
    for name, expected in oracle.items():
        shown = usage[name]  # inspect's and the metrics' source
        assert [(c.used_mem, c.total_mem) for c in shown.cards] == [(c.used, c.total) for c in expected.cards]
        assert (shown.used_mem, shown.total_mem) == (expected.held, expected.total)
        assert series[("gpushare_node_gpu_memory_assigned_gib", name, "")] == expected.held
        for index, card in enumerate(expected.cards):
            assert series[("gpushare_gpu_memory_assigned_gib", name, str(index))] == card.used
            assert series[("gpushare_gpu_pods", name, str(index))] == len(card.pods)
            assert ((name, str(index)) in over) == (card.used > card.total)
            assert ((name, str(index)) in crowded) == (expected.mode in ("cgpu", "core_mem", "mps")
                                                       and len(card.pods) > 20)
