"""The audit reports every running pod that sets what GS010 or GS011 judge, once per pod and rule, from
a snapshot and from the live list/watch (which decodes env and envFrom for this); pods carrying
GM003's own value, hidden devices or nothing are not reported, and a GPU-free pod that sets nothing
is still kept by key only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policies.model.cluster_manifests import pod_from_manifest
from policies.model.isolation import judged_names
from tests.support.check_helpers import run_gpushare
from tests.support.fake_apiserver import FakeApiServer
from tests.support.isolation_cluster import (
    DISABLED_MESSAGE,
    EXPECTED,
    FORGED_MESSAGE,
    MONITOR_MESSAGE,
    objects,
    write_snapshot,
)
from webhook.settings import Settings
from webhook.state.kube_schema import POD_DECODERS
from webhook.state.live import _judged_env_only

ISOLATION = ("GS010", "GS011")


def _audit(*args: str | Path) -> tuple[int, dict[str, Any]]:
    done = run_gpushare("audit", "--format", "json", *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def _reported(document: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(f["rule"], f"{f['object']['kind']} {f['object']['namespace']}/{f['object']['name']}"): f["message"]
            for f in document["findings"] if f["rule"] in ISOLATION}


def _check(document: dict[str, Any]) -> None:
    reported = _reported(document)
    assert set(reported) == EXPECTED
    assert len([f for f in document["findings"] if f["rule"] in ISOLATION]) == len(EXPECTED)  # once per pod
    assert reported[("GS010", "Pod team-a/forged")] == FORGED_MESSAGE
    assert reported[("GS011", "Pod team-a/no-isolation")] == DISABLED_MESSAGE
    assert reported[("GS011", "Pod monitoring/gpu-monitor")] == MONITOR_MESSAGE


@pytest.mark.processes
def test_a_snapshot_audit_reports_each_such_running_pod_once(tmp_path):
    code, document = _audit("--snapshot", write_snapshot(tmp_path))
    assert code == 1
    _check(document)


@pytest.mark.processes
def test_the_live_audit_decodes_env_and_reports_the_same(tmp_path):
    api = FakeApiServer().start()
    try:
        api.add(*objects())
        code, document = _audit("--kubeconfig", api.kubeconfig(tmp_path / "kubeconfig"))
    finally:
        api.stop()
    assert code == 1
    _check(document)


def _decoded(pod: dict[str, Any], names: Any) -> dict[str, Any]:
    """The pod as the live state's decoder keeps it (only the fields the rules read, only the judged
    env entries)."""
    event = POD_DECODERS.event.decode(json.dumps({"type": "ADDED", "object": pod}).encode())
    _judged_env_only(event["object"]["spec"], judged_names(names.env))
    return event["object"]


@pytest.mark.parametrize("pod", objects()[2:], ids=lambda p: p["metadata"]["name"])
def test_the_live_decoder_keeps_what_a_snapshot_keeps(pod):
    names = Settings().names
    assert pod_from_manifest(_decoded(pod, names), names).env == pod_from_manifest(pod, names).env


def test_only_pods_worth_judging_are_kept_in_full():
    names = Settings().names
    kept = {p["metadata"]["name"]: pod_from_manifest(p, names) for p in objects()[2:]}
    assert kept["mutated"].env is None  # GM003's own value and hidden devices: nothing to keep
    assert kept["web"].env is None and not kept["web"].kept  # GPU-free, devices hidden: by key only
    assert kept["gpu-monitor"].kept and not kept["gpu-monitor"].uses_gpu  # GPU-free, but it exposes GPUs
