"""One read of nodes and pods from the API server (for ``inspect``; no watch).

Lists are paged (``limit``/``continue``) and read as raw JSON: a big cluster's pods never
become a list of client model objects, only the small records the state keeps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from policies.cluster import ClusterSnapshot
from policies.settings import Names
from webhook.state.snapshot import snapshot_from_objects

PAGE_SIZE = 500


def _paged(list_call: Callable[..., Any], kind: str, page_size: int) -> Iterator[dict[str, Any]]:
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": page_size, "_preload_content": False}
        if token:
            kwargs["_continue"] = token
        page = json.loads(list_call(**kwargs).data)
        for item in page.get("items") or []:
            item.setdefault("kind", kind)  # list items come without their kind
            yield item
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def read_cluster(api_client: Any, names: Names, page_size: int = PAGE_SIZE) -> ClusterSnapshot:
    """Nodes and GPU pods of the whole cluster, as a snapshot."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    nodes = _paged(core.list_node, "Node", page_size)
    pods = _paged(core.list_pod_for_all_namespaces, "Pod", page_size)
    return snapshot_from_objects([*nodes, *pods], names)
