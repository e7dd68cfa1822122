"""A small cluster that breaks every audit invariant once, and a Pending pod to explain.

Built from the same object helpers as the other cluster tests (tests/support/cluster_objects.py);
written as `kubectl get nodes,pods -A -o yaml` output for snapshots, or served by the fake
API server for the live runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from tests.support.cluster_objects import gpu_pod, node

CORE_NODE = "cn-beijing.10.0.0.1"  # core_mem, 2 x 15 GiB: over-committed GPU0, mixed job types
CGPU_NODE = "cn-beijing.10.0.0.2"  # cgpu, 1 x 31 GiB: 21 pods on its card
PLAIN_NODE = "cn-beijing.10.0.0.3"  # exclusive mode (default): a shared pod runs there anyway
EDGE_NODE = "cn-beijing.10.0.0.4"  # cgpu, 2 x 15 GiB: a card index past the cards, stale and foreign pods
PENDING = ("research", "needs-20")
OLD_NS = str(10**18)  # 2001-09-09 in Unix nanoseconds: long ago

EXPECTED = {  # (rule, object) the audit must report, and nothing else of these rules
    ("GA001", f"Node {CORE_NODE}"),
    ("GA002", f"Node {CGPU_NODE}"),
    ("GA003", f"Node {CORE_NODE}"),
    ("GA004", "Pod default/stray"),
    ("GA005", "Pod default/index-past"),
    ("GA006", "Pod default/never-assigned"),
    ("GA007", "Pod default/foreign"),
    ("GS001", "Pod default/core-33"),
}
CONFIG = "audit:\n  expected_scheduler: ack-co-scheduler\n  unassigned_after_seconds: 600\n"


def _annotated(pod: dict[str, Any], **annotations: str) -> dict[str, Any]:
    pod["metadata"]["annotations"] = dict(annotations)
    return pod


def objects() -> list[dict[str, Any]]:
    now_ns = str(time.time_ns())
    items: list[dict[str, Any]] = [
        node(CORE_NODE, mode="core_mem", cards=2, card_gib=15),
        node(CGPU_NODE, mode="cgpu", cards=1, card_gib=31),
        node(PLAIN_NODE, mode="default", cards=1, card_gib=15),
        node(EDGE_NODE, mode="cgpu", cards=2, card_gib=15),
        # GA001 + GA003 on the core_mem node: 10 + 8 GiB recorded on GPU0 (15 GiB), and a mem-only pod.
        _annotated(gpu_pod("big-a", mem=10, core=30, node_name=CORE_NODE),
                   **{"scheduler.framework.gpushare.allocation": '{"0": {"0": 10}}'}),
        _annotated(gpu_pod("big-b", mem=8, core=30, node_name=CORE_NODE),
                   **{"scheduler.framework.gpushare.allocation": '{"0": {"0": 8}}'}),
        gpu_pod("mem-only", mem=2, node_name=CORE_NODE, namespace="team-b"),
        # GS001 (a rule, judged on the record): 33 % compute.
        gpu_pod("core-33", mem=1, core=33, node_name=CORE_NODE),
        # GA004: a shared-GPU pod on an exclusive node.
        gpu_pod("stray", mem=2, node_name=PLAIN_NODE),
        # GA005: recorded on GPU5 of a two-card node.
        _annotated(gpu_pod("index-past", mem=2, node_name=EDGE_NODE), ALIYUN_COM_GPU_MEM_IDX="5"),
        # GA006: assigned=false since 2001 (open-source names); a fresh one (ACK names) is fine.
        _annotated(gpu_pod("never-assigned", mem=2, node_name=EDGE_NODE),
                   ALIYUN_COM_GPU_MEM_ASSIGNED="false", ALIYUN_COM_GPU_MEM_ASSUME_TIME=OLD_NS,
                   ALIYUN_COM_GPU_MEM_IDX="1"),
        _annotated(gpu_pod("just-bound", mem=2, node_name=EDGE_NODE),
                   **{"scheduler.framework.gpushare.assigned": "false",
                      "scheduler.framework.gpushare.assume-time": now_ns,
                      "scheduler.framework.gpushare.allocation": '{"0": {"1": 2}}'}),
        # GA007: scheduled by default-scheduler while ack-co-scheduler is configured.
        gpu_pod("foreign", mem=1, node_name=EDGE_NODE),
        # Pending: 20 GiB fits no card anywhere (the largest card is 31 GiB with 21 GiB held).
        gpu_pod(PENDING[1], mem=20, namespace=PENDING[0]),
    ]
    items[-2]["spec"]["schedulerName"] = "default-scheduler"
    # GA002: 21 pods of 1 GiB recorded on the cgpu node's one card.
    items += [_annotated(gpu_pod(f"small-{i:02d}", mem=1, node_name=CGPU_NODE, namespace="batch"),
                         **{"scheduler.framework.gpushare.allocation": '{"0": {"0": 1}}'}) for i in range(21)]
    return items


def write_snapshot(directory: Path) -> tuple[Path, Path]:
    """The snapshot file and a config file naming the expected scheduler."""
    snapshot = directory / "cluster.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects()}, sort_keys=False))
    config = directory / "gpushare.yaml"
    config.write_text(CONFIG)
    return snapshot, config
