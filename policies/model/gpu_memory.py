"""What a gpu-mem value means and, when it is refused, what to write instead (rule GS003).

Judged by **value**, never by spelling. The API server decodes a Pod and encodes it again, so a
webhook receives canonical quantities: a user's ``2000m`` arrives as ``"2"`` and a plain ``1000``
as ``"1k"`` (Kubernetes documentation, "Quantity": the canonical form; k8s.io/apimachinery
``Quantity.String``). The scheduler extender reads the value too (``Quantity.Value()``,
AliyunContainerService/gpushare-scheduler-extender, pkg/utils/pod.go). So a whole n from 1 to
the largest card passes however it is written; ``check``, the webhook and the backstop agree.

Suggestions never round a memory request down: a container given less GPU memory than it asked
for fails, one given a little more does not (``5.5`` -> "use 6"). That is also how the extender
counts a fraction: ``Value()`` rounds up.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from policies.model.resources import ResourceValue
from policies.model.settings import MIB_PER_GIB, Names

# A count at least this large in GiB is bytes someone wrote with a unit ("2Gi" is 2**31): no one
# means a million GiB. In MiB clusters anything over the largest card (2**20 MiB) is.
BYTES_FROM = 2**20
BYTES_PER = {"GiB": 2**30, "MiB": 2**20}


@dataclass(frozen=True, slots=True)
class MemoryProblem:
    """Why a gpu-mem value is refused and what to write instead."""

    why: str  # after the value: "looks like bytes, but ..."
    fix: str  # "use 2"
    accepted: str | None  # the value that fix names ("2"), None when it names a range


def ceil_whole(value: Decimal) -> int:
    return int(value.to_integral_value(ROUND_CEILING))


def memory_problem(value: ResourceValue, names: Names, cards: int = 1) -> MemoryProblem | None:
    """None when ``value`` is a whole count of ``names.memory_unit`` from 1 to the largest card times
    ``cards``: a pod labelled ``aliyun.com/gpu-count: M`` gets each container's N as N/M on each of M
    cards (ACK "Use cGPU to achieve GPU sharing based on multiple GPUs"), so the ceiling, and the MiB
    hint, are per card. (The open-source extender and device plugin read aliyun.com/gpu-count only as
    a node's number of cards, pkg/utils/node.go GetGPUCountInNode; the pod label is ACK's cGPU
    scheduler's, documented by that page alone.)"""
    unit, most = names.memory_unit, names.max_card_memory * cards
    if value.whole_count is not None and value.whole_count <= most:
        return None  # the common case, read without Decimal arithmetic
    quantity = value.quantity
    anything = f"use a whole number of {unit}, 1 or more"
    if quantity is None:
        return MemoryProblem(f"is not a quantity ({value.error})", anything, None)
    if quantity <= 0:
        return MemoryProblem(f"is not 1 or more {unit}", anything, None)
    if quantity <= most:  # a whole count up to the most was accepted above (read_values sets whole_count)
        wanted = ceil_whole(quantity)
        return MemoryProblem(f"is not a whole number of {unit}", f"use {wanted}", str(wanted))
    holds = (f"at most {names.max_card_memory} {unit}" if cards == 1 else
             f"{cards} cards hold at most {names.max_card_memory} {unit} each, {most} {unit} in all")
    bounded = f"use a whole number of {unit} up to {most}"
    if unit == "GiB" and quantity < BYTES_FROM * cards:
        # 16276 is the open-source extender's own old sample, from its MiB days.
        wanted = ceil_whole(quantity / MIB_PER_GIB)
        what = "any card holds" if cards == 1 else f"{cards} cards hold"
        return MemoryProblem(f"is more than {what} ({holds}) and looks like MiB ({wanted} GiB rounded up)",
                             f"use {wanted}, or set names.memory_unit: MiB if the device plugin counts MiB",
                             str(wanted))
    if quantity / BYTES_PER[unit] > most:  # no ceiling of 1e30 bytes: Decimal keeps 28 digits
        what = "any card holds" if cards == 1 else f"{cards} cards hold"
        return MemoryProblem(f"is more than {what} ({holds})", bounded, None)
    wanted = ceil_whole(quantity / BYTES_PER[unit])
    return MemoryProblem(f"looks like bytes, but the resource counts {unit}", f"use {wanted}", str(wanted))
