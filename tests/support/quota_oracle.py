"""A test oracle: what GPU quotas charge a namespace, written from the enforcers' source and independent
of the project's own counting (policies/quota/quota_usage.py).

Facts, each from its source (read for the facts, written afresh here):

- ResourceQuota charges a pod ``PodRequests`` (kubernetes pkg/api/v1/resource/helpers.go, now
  k8s.io/component-helpers/resource): the app containers' requests added up, plus every restartable init
  container (a sidecar, ``restartPolicy: Always``); during initialisation each init container in turn, beside
  the sidecars declared before it (a sidecar itself counts as the running sum of sidecars up to it); the pod
  is charged the larger of the two, plus ``spec.overhead``. A request left out is the limit (the API
  server's defaulting of extended resources).
- It charges only pods ``QuotaV1Pod`` accepts (pkg/quota/v1/evaluator/core/pods.go): not Failed or
  Succeeded, and not past ``deletionTimestamp + deletionGracePeriodSeconds``.
- Extended resources are counted only under ``requests.<name>`` (same file, isExtendedResourceNameForQuota).
- ACK's ElasticQuotaTree limits a quota node's usage by its max: the pods the scheduler placed in the
  namespaces of its leaves ("Work with capacity scheduling").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

MEM = "aliyun.com/gpu-mem"


def _amount(container: dict[str, Any], resource: str) -> int:
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    value = requests.get(resource, limits.get(resource, 0))
    return int(value)


def pod_requests(pod: dict[str, Any], resource: str = MEM) -> int:
    spec = pod["spec"]
    running = sum(_amount(c, resource) for c in spec.get("containers", []))
    sidecars = 0
    init_peak = 0
    for container in spec.get("initContainers", []):
        amount = _amount(container, resource)
        if container.get("restartPolicy") == "Always":
            sidecars += amount
            during = sidecars
        else:
            during = amount + sidecars
        init_peak = max(init_peak, during)
    total = max(running + sidecars, init_peak)
    return total + int((spec.get("overhead") or {}).get(resource, 0))


def charged(pod: dict[str, Any], now: float) -> bool:
    if pod.get("status", {}).get("phase") in ("Failed", "Succeeded"):
        return False
    meta = pod["metadata"]
    if "deletionTimestamp" in meta and "deletionGracePeriodSeconds" in meta:
        deleted = datetime.fromisoformat(meta["deletionTimestamp"].replace("Z", "+00:00")).timestamp()
        if now > deleted + meta["deletionGracePeriodSeconds"]:
            return False
    return True


def resource_quota_used(pods: list[dict[str, Any]], namespace: str, now: float, resource: str = MEM) -> int:
    return sum(pod_requests(p, resource) for p in pods if p["metadata"]["namespace"] == namespace and charged(p, now))


def tree_used(pods: list[dict[str, Any]], namespaces: set[str], resource: str = MEM) -> int:
    return sum(pod_requests(p, resource) for p in pods if p["metadata"]["namespace"] in namespaces
               and p["spec"].get("nodeName") and p.get("status", {}).get("phase") not in ("Failed", "Succeeded"))
