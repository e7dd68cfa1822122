"""``gpushare check --snapshot``: stateful rules see the snapshot for Pods, Nodes and Bindings.

The node (GN*) and placement (GB*) rules are written in parallel; here a stateful probe rule,
registered for the test only, shows that ``check`` hands every kind the engine judges the
snapshot's state, and judges a Node manifest that the snapshot knows as an UPDATE of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from policies.model.subject import Subject
from policies.rules.base import REGISTRY, Found, rule
from policies.rules.relevance import Relevance
from tests.support.check_helpers import SEED_JOBS, run_gpushare, write_yaml
from tests.support.manifests import MEM, container, pod_spec, workload
from webhook.cli.commands import main
from webhook.state.snapshot import DEMO_SNAPSHOT

pytestmark = pytest.mark.processes

SNAPSHOT = str(Path(__file__).resolve().parents[2] / "webhook" / "data" / DEMO_SNAPSHOT)
KNOWN_NODE = "cn-beijing.192.168.1.10"


@pytest.fixture
def probe() -> Iterator[str]:
    """A stateful warn rule that reports what it was shown."""

    def seen(subject: Subject) -> Iterator[Found]:
        assert subject.state is not None  # the engine never runs a stateful rule without state
        node = subject.state.get_node(KNOWN_NODE)
        old = (subject.old or {}).get("metadata", {}).get("labels", {}).get("ack.node.gpu.schedule")
        yield Found(f"{subject.label} op={subject.operation} nodes={len(subject.state.nodes())} "
                    f"known={node is not None} old-mode={old}")

    rule("GT900", severity="warn", seed="test", kinds=("Pod", "Job", "Node", "Binding"),
         title="probe", doc="probe", stateful=True, relevance=Relevance(resources=("gpu_mem",)))(seen)
    try:
        yield "GT900"
    finally:
        del REGISTRY["GT900"]


def _objects() -> list[dict]:
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": KNOWN_NODE, "labels": {"ack.node.gpu.schedule": "share"}}}
    new_node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "new-pool-node", "labels": {"ack.node.gpu.schedule": "cgpu"}}}
    pinned = workload("Pod", pod_spec(container("c", limits={MEM: 2}), nodeName=KNOWN_NODE), name="pinned")
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "pinned", "namespace": "default"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": KNOWN_NODE}}
    job = workload("Job", pod_spec(container("c", limits={MEM: 2})), name="job")
    return [node, new_node, pinned, binding, job]


def test_stateful_rules_get_the_snapshot_for_every_kind(tmp_path, probe):
    manifests = write_yaml(tmp_path / "m.yaml", *_objects())
    runner = CliRunner()
    with_state = runner.invoke(main, ["check", "-f", "json", "--snapshot", SNAPSHOT, str(manifests)])
    # The real stateful rules judge these objects against the snapshot too: the demo node runs a
    # core+mem pod, so relabelling it (GN006) and placing a mem-only pod there (GB001) fail.
    assert with_state.exit_code == 1, with_state.output
    findings = json.loads(with_state.stdout)["findings"]  # stderr names the snapshot judged against
    assert {"GN006", "GB001"} <= {f["rule"] for f in findings}
    messages = [f["message"] for f in findings if f["rule"] == probe]
    assert messages == [
        f"GT900: Node {KNOWN_NODE} op=UPDATE nodes=4 known=True old-mode=core_mem",
        "GT900: Node new-pool-node op=CREATE nodes=4 known=True old-mode=None",
        "GT900: Pod default/pinned op=CREATE nodes=4 known=True old-mode=None",
        "GT900: Binding default/pinned op=CREATE nodes=4 known=True old-mode=None",
        "GT900: Job default/job op=CREATE nodes=4 known=True old-mode=None",
    ]
    without = runner.invoke(main, ["check", "-f", "json", str(manifests)])
    assert without.exit_code == 1  # GN004: the new cgpu node shows no ECS provider ID (stateless)
    rules = {f["rule"] for f in json.loads(without.output)["findings"]}
    assert "GN004" in rules and not rules & {probe, "GN006", "GB001", "GB002", "GB003", "GB004", "GB005"}


def test_node_manifests_are_judged_with_and_without_a_snapshot(tmp_path):
    node = _objects()[0]
    node["metadata"]["annotations"] = {"gpushare.io/exempt": "GS001"}
    path = write_yaml(tmp_path / "node.yaml", node)
    for args in ([], ["--snapshot", SNAPSHOT]):
        done = run_gpushare("check", "--fail-on", "warn", *args, path)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"warn GE001: Node {KNOWN_NODE}: gpushare.io/exempt=GS001 has no gpushare.io/exempt-reason" in (
            done.stdout)


def test_a_bad_snapshot_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "snap.yaml"
    bad.write_text("items: [\n")
    done = run_gpushare("check", "--snapshot", bad, SEED_JOBS)
    assert done.returncode == 2
    assert done.stderr.startswith(f"gpushare: error: {bad}:") and len(done.stderr.splitlines()) == 1
    missing = run_gpushare("check", "--snapshot", tmp_path / "absent.yaml", SEED_JOBS)
    assert missing.returncode == 2 and "cannot read snapshot" in missing.stderr
