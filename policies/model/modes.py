"""The values of a node's ``ack.node.gpu.schedule`` label, from ACK's own pages. A module of its own
so that the node rules read them without loading placement.

- ACK "GPU node scheduling labels" (ACK managed cluster Pro): ``default`` (exclusive, whole GPUs),
  the shared modes ``cgpu``, ``core_mem``, ``share`` and ``mps``, and ``topology``.
- ACK "Labels for enabling GPU scheduling policies": the same, and ``mig`` ("Dynamic Multi-Instance
  GPU (MIG) partitioning"; its value cannot be changed to another one).
- ACK "Schedule GPUs with DRA" (help/en/ack/ack-managed-and-ack-dedicated/user-guide/
  schedule-gpus-using-dra; ACK clusters 1.34 and later): ``disabled`` on the GPU nodes a DRA driver
  (or another device plugin) manages. The page's own text was not at hand; its value and what it
  does come from HAMi's guide "Install HAMi on Alibaba Cloud Container Service for Kubernetes",
  which cites the page: ACK's ``ack-nvidia-device-plugin`` DaemonSet selects
  ``ack.node.gpu.schedule=default`` and stops running on a ``disabled`` node.

What each means here: the shared modes take shared-GPU pods (placement, scoring and ``inspect``
count their cards, the audit judges them); ``topology`` takes topology-aware whole GPUs; ``default``,
``mig`` and ``disabled`` offer no shared GPU at all: GB002 refuses a shared-GPU pod bound there,
scoring ranks them out for shared-GPU pods, ``inspect`` lists no cards for them (ACK advertises no
``aliyun.com/gpu-mem`` there), and the audit's GA004 names a shared-GPU pod running on one. Whole
GPUs (``nvidia.com/gpu``, MIG's ``nvidia.com/mig-*``, a DRA claim) on them are the platform's own
scheduling's, not judged here.
"""

from __future__ import annotations

SHARED_MODES = frozenset({"cgpu", "core_mem", "share", "mps"})
# Modes whose nodes offer no shared GPU: MIG partitions cards in hardware, and disabled leaves the
# node's GPUs to DRA or another device plugin.
NO_SHARED_GPU_MODES = frozenset({"default", "mig", "disabled"})
ALL_MODES = frozenset({"topology"}) | NO_SHARED_GPU_MODES | SHARED_MODES
# The modes built on cGPU: cgpu and core_mem (ACK "Manage the shared GPU scheduling component"),
# and mps, "NVIDIA MPS isolation technology combined with Alibaba Cloud cGPU technology" (ACK "GPU
# node scheduling labels"). What the first page states for cGPU (ECS only, the
# memory-isolation regions, the version matrix, 20 pods per card) applies to all three.
CGPU_MODES = frozenset({"cgpu", "core_mem", "mps"})
