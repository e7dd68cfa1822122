"""Which nodes are ECS instances, read from ``spec.providerID``.

Alibaba's cloud controller identifies a node as ``<REGION_ID>.<ECS_ID>``, e.g.
``cn-hangzhou.i-bp16uimj7fl6ze8q5rf3`` (kubernetes/cloud-provider-alibaba-cloud,
docs/getting-started.md, "hostname and provider id"); its ``NodeFromProviderID`` also accepts
the same id behind an ``alicloud://`` prefix. Both are ECS; ``aws:///…``, ``gce://…``,
``kind://…`` or no provider ID are not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True, slots=True)
class EcsInstance:
    region: str
    instance: str


@lru_cache(maxsize=8)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def ecs_instance(provider_id: str, pattern: str) -> EcsInstance | None:
    """The region and instance id of an ECS provider ID; None for any other provider ID."""
    found = _compiled(pattern).fullmatch(provider_id) if provider_id else None
    if found is None:
        return None
    return EcsInstance(found.group("region"), found.group("instance"))
