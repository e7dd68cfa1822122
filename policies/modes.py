"""The GPU scheduling modes a node's ``ack.node.gpu.schedule`` label names (ACK "GPU node scheduling
labels"). A module of its own so that the node rules read them without loading placement."""

from __future__ import annotations

SHARED_MODES = frozenset({"cgpu", "core_mem", "share", "mps"})
ALL_MODES = frozenset({"default", "topology"}) | SHARED_MODES
# The modes built on cGPU: cgpu and core_mem (ACK "Manage the shared GPU scheduling component"),
# and mps, "NVIDIA MPS isolation technology combined with Alibaba Cloud cGPU technology" (ACK "GPU
# node scheduling labels"). What the first page states for cGPU (ECS only, the
# memory-isolation regions, the version matrix, 20 pods per card) applies to all three.
CGPU_MODES = frozenset({"cgpu", "core_mem", "mps"})
