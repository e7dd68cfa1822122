"""What a pod charges GPU quotas, counted as the quotas' enforcers count it, and those charges summed
per namespace (kept current pod by pod by the cluster snapshot, so a review adds up namespaces).

ResourceQuota (the API server's quota admission, kubernetes ``pkg/quota/v1/evaluator/core/pods.go``):
- a pod is charged unless ``QuotaV1Pod`` says no: a pod in phase Succeeded or Failed is not, nor is one
  whose deletionTimestamp plus deletionGracePeriodSeconds has passed (stuck terminating, "a node is lost");
- what it is charged is ``PodRequests`` (kubernetes ``pkg/api/v1/resource/helpers.go``, now
  ``k8s.io/component-helpers/resource``): the larger of the app containers plus every sidecar
  (an init container with restartPolicy Always) and the peak of initialisation (each init container plus
  the sidecars started before it), plus the pod's overhead (``spec.overhead``), under
  ``requests.<resource>``.

Capacity scheduling (ElasticQuotaTree) counts the pods placed (bound to a node, not finished). The
quotas' limits, and what is left under them, are policies/quota/quota_usage.py. Nothing here reads
the clock or the cluster: callers pass both."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from policies.model.quantity import QuantityError, parse_quantity
from policies.model.resources import ContainerRequest, effective_request

FINISHED = ("Succeeded", "Failed")


def pod_requests(containers: Sequence[ContainerRequest], overhead: Mapping[str, Any] | None, resource: str) -> int:
    """``PodRequests`` of one whole-number resource: the effective request plus the pod's overhead."""
    total = effective_request(containers, resource)
    if overhead and resource in overhead:
        try:
            extra = parse_quantity(overhead[resource])
        except QuantityError:
            extra = Decimal(0)
        total += max(int(extra), 0)
    return total


def deletion_deadline(meta: Mapping[str, Any]) -> float | None:
    """deletionTimestamp plus deletionGracePeriodSeconds, in seconds since the epoch; None when the pod is
    not being deleted or either is missing (QuotaV1Pod needs both)."""
    stamp, grace = meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds")
    if not isinstance(stamp, str) or not isinstance(grace, int) or isinstance(grace, bool):
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.timestamp() + grace


def charged(phase: str, deadline: float | None, now: float) -> bool:
    """``QuotaV1Pod``: whether a pod counts against a ResourceQuota at ``now``."""
    if phase in FINISHED:
        return False
    return deadline is None or not now > deadline


@dataclass(frozen=True, slots=True)
class PodUsage:
    """What one pod of the cluster holds, as the quotas count it."""

    namespace: str
    phase: str
    node_name: str
    deadline: float | None
    mem: int
    core: int


class UsageIndex:
    """The pods' usage summed per namespace, so that a review adds up namespaces, not pods: what a
    ResourceQuota charges (``QuotaV1Pod``; the few pods being deleted kept apart and judged at ``now``) and
    what capacity scheduling counts (placed, not finished). Index 0 is GPU memory, 1 compute."""

    def __init__(self, pods: Iterable[PodUsage] = ()) -> None:
        self.charged: dict[str, list[int]] = {}
        self.deleting: dict[str, list[PodUsage]] = {}
        self.placed: dict[str, list[int]] = {}
        for p in pods:
            self.add(p, 1)

    def add(self, p: PodUsage, sign: int) -> None:
        """Count a pod in (``sign`` 1) or out (-1): the cluster state keeps its index current this way."""
        if p.phase in FINISHED or not (p.mem or p.core):
            return
        if p.deadline is None:
            total = self.charged.setdefault(p.namespace, [0, 0])
            total[0] += sign * p.mem
            total[1] += sign * p.core
        elif sign > 0:
            self.deleting.setdefault(p.namespace, []).append(p)
        else:
            deleting = self.deleting.get(p.namespace, [])
            if p in deleting:
                deleting.remove(p)  # one of them: two pods may look alike
        if p.node_name:
            total = self.placed.setdefault(p.namespace, [0, 0])
            total[0] += sign * p.mem
            total[1] += sign * p.core

    def copy(self) -> UsageIndex:
        found = UsageIndex()
        found.charged = {k: list(v) for k, v in self.charged.items()}
        found.deleting = {k: list(v) for k, v in self.deleting.items() if v}
        found.placed = {k: list(v) for k, v in self.placed.items()}
        return found

    def charged_usage(self, namespace: str, index: int, now: float) -> int:
        fixed = self.charged.get(namespace, (0, 0))[index]
        return fixed + sum((p.mem, p.core)[index] for p in self.deleting.get(namespace, ())
                           if charged(p.phase, p.deadline, now))

    def placed_usage(self, namespaces: Iterable[str], index: int) -> int:
        return sum(self.placed.get(n, (0, 0))[index] for n in namespaces)


def usage_of(pods: Iterable[Any]) -> list[PodUsage]:
    """The quota view of the cluster's pods (policies.model.cluster.PodInfo records)."""
    return [PodUsage(p.namespace, p.phase, p.node_name, p.deletion_deadline, p.quota_mem, p.quota_core)
            for p in pods if p.quota_mem or p.quota_core]


def usage_index(pods: Iterable[Any]) -> UsageIndex:
    """The per-namespace index of the cluster's pods (policies.model.cluster.PodInfo records)."""
    return UsageIndex(usage_of(pods))


def pod_usage(pod: Any) -> PodUsage:
    """The quota view of one pod (a policies.model.cluster.PodInfo record)."""
    return PodUsage(pod.namespace, pod.phase, pod.node_name, pod.deletion_deadline, pod.quota_mem, pod.quota_core)
