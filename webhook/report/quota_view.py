"""``gpushare inspect --quotas``: each GPU quota with the namespaces it covers and its used / quota / left."""

from __future__ import annotations

from typing import Any

from policies.quota.quota_usage import QuotaShare
from webhook.report.inspect_view import tabulate


def _unit(share: QuotaShare, names: Any) -> str:
    r = names.resources
    return names.memory_unit if share.limit.resource == r.gpu_mem else "%" if share.limit.resource == r.gpu_core else ""


def quota_table(shares: list[QuotaShare], names: Any) -> str:
    rows = [["NAMESPACES", "QUOTA", "LIMIT", "USED", "QUOTA", "LEFT", "UNIT"]]
    rows += [[",".join(s.namespaces) or "-", s.limit.label, s.limit.key, str(s.limit.used), str(s.limit.hard),
              str(s.limit.left), _unit(s, names)] for s in shares]
    return "\n".join(tabulate(rows)) + "\n"


def quota_json(shares: list[QuotaShare], names: Any) -> dict[str, Any]:
    return {"quotas": [{"namespaces": list(s.namespaces), "quota": s.limit.label, "mechanism": s.limit.mechanism,
                        "limit": s.limit.key, "resource": s.limit.resource, "used": s.limit.used,
                        "hard": s.limit.hard, "left": s.limit.left, "unit": _unit(s, names)} for s in shares]}
