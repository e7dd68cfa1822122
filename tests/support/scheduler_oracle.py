"""A test oracle: what the GPU-sharing scheduler counts on each card, written from its documented
allocation and independent of the project's own placement code (policies/).

Facts, each from its source (read for the facts, written afresh here):

- A node shares GPU when its *capacity* of ``aliyun.com/gpu-mem`` is above 0, and has ``capacity
  aliyun.com/gpu-count`` cards of ``gpu-mem / gpu-count`` each (AliyunContainerService/
  gpushare-scheduler-extender, pkg/utils/node.go and pkg/cache/nodeinfo.go, NewNodeInfo). No
  label is needed (the extender never reads one); ACK's mode labels narrow which nodes take which
  pods ("GPU node scheduling labels").
- A pod asks for the sum of its *app* containers' ``aliyun.com/gpu-mem`` limits; init containers
  are not counted (pkg/utils/pod.go, GetGPUMemoryFromPodResource).
- A card holds what the pods recorded on it hold: ACK's per-container allocation annotation
  ``scheduler.framework.gpushare.allocation`` ({container index: {card: GiB}}), or the extender's
  ``ALIYUN_COM_GPU_MEM_IDX`` (the whole pod on one card). A pod with no usable record is on no
  card (the extender's device cache adds only pods with a card index: pkg/cache/nodeinfo.go,
  addOrUpdatePod); finished pods hold nothing (pkg/cache/deviceinfo.go, GetUsedGPUMemory), and
  neither do pods being deleted: pkg/utils/pod.go ``IsCompletePod`` is true for a pod with a
  deletionTimestamp as for one Succeeded or Failed, and pkg/gpushare/controller.go (``syncPod``,
  ``updatePodInCache``) removes such a pod from the cache.
- A pod fits a node when some card has at least its GiB free (pkg/cache/nodeinfo.go, Assume and
  allocateGPUID: the whole pod on one card). A pod labelled ``aliyun.com/gpu-count: M`` needs M
  cards of one node with N/M free each (ACK "Use cGPU to achieve GPU sharing based on multiple
  GPUs"). On the cGPU modes (cgpu, core_mem, mps) a card takes at most 20 pods (ACK "Manage the
  shared GPU scheduling component"); compute (``gpu-core.percentage``) is a percentage of one
  card (ACK "Allocate computing power by scheduling shared GPU").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

MEM, COUNT, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-count", "aliyun.com/gpu-core.percentage"
ALLOCATION, CORE_ALLOCATION = "scheduler.framework.gpushare.allocation", "gpushare.alibabacloud.com/core-percentage"
LEGACY = "ALIYUN_COM_GPU_MEM_IDX"
SCHEDULE, SPREAD = "ack.node.gpu.schedule", "aliyun.com/gpu-count"
SHARED = {"cgpu", "core_mem", "share", "mps"}
CGPU = {"cgpu", "core_mem", "mps"}
PODS_PER_CARD = 20


@dataclass
class OracleCard:
    total: int
    used: int = 0
    core: int = 0
    pods: set[str] = field(default_factory=set)


@dataclass
class OracleNode:
    name: str
    mode: str  # the label, or "share"/"core_mem" for a node that shares GPU without one
    cards: list[OracleCard]
    unrecorded: int = 0  # GiB of pods on the node but on no card

    @property
    def total(self) -> int:
        return sum(c.total for c in self.cards)

    @property
    def held(self) -> int:
        return sum(c.used for c in self.cards) + self.unrecorded


def _limits(container: dict[str, Any]) -> dict[str, Any]:
    return (container.get("resources") or {}).get("limits") or {}


def app_memory(pod: dict[str, Any]) -> list[int]:
    """Each app container's gpu-mem (0 without)."""
    return [int(_limits(c).get(MEM, 0)) for c in pod["spec"]["containers"]]


def _key(pod: dict[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}"


def oracle_node(node: dict[str, Any], pods: list[dict[str, Any]]) -> OracleNode:
    capacity = node["status"]["capacity"]
    count, total = int(capacity.get(COUNT, 0)), int(capacity.get(MEM, 0))
    labels = node["metadata"].get("labels", {})
    mode = labels.get(SCHEDULE) or (("core_mem" if int(capacity.get(CORE, 0)) else "share") if total else "")
    out = OracleNode(node["metadata"]["name"], mode, [OracleCard(total // count) for _ in range(count)])
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue  # IsCompletePod
        annotations = pod["metadata"].get("annotations") or {}
        memory = app_memory(pod)
        key = _key(pod)
        allocation = json.loads(annotations[ALLOCATION]) if ALLOCATION in annotations else None
        cores = json.loads(annotations[CORE_ALLOCATION]) if CORE_ALLOCATION in annotations else {}
        legacy = annotations.get(LEGACY, "")
        for index, gib in enumerate(memory):
            if not gib:
                continue
            if allocation is not None:
                shares = {int(card): amount for card, amount in allocation.get(str(index), {}).items()}
            elif legacy.isdigit():
                shares = {int(legacy): gib}
            else:
                shares = {}
            if not shares or any(card >= count for card in shares):
                out.unrecorded += gib
                continue
            for card, amount in shares.items():
                out.cards[card].used += amount
                out.cards[card].pods.add(key)
            for card, percent in cores.get(str(index), {}).items():
                out.cards[int(card)].core += percent
    return out


def finds_room(node: OracleNode, pod: dict[str, Any]) -> bool:
    """Whether the scheduler finds room for the (pending) pod on the node."""
    memory = sum(app_memory(pod))
    core = sum(int(_limits(c).get(CORE, 0)) for c in pod["spec"]["containers"])
    if not memory:
        return False
    wanted = {"core_mem"} if core else SHARED  # compute is allocated on core_mem nodes only
    if node.mode not in wanted:
        return False
    spread = int((pod["metadata"].get("labels") or {}).get(SPREAD, "1"))
    each = memory // spread
    roomy = [c for c in node.cards
             if c.total - c.used >= each and (not core or 100 - c.core >= core)
             and (node.mode not in CGPU or len(c.pods) < PODS_PER_CARD)]
    return len(roomy) >= spread
