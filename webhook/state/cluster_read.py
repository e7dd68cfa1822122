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
from webhook.state.paging import list_pages
from webhook.state.snapshot import snapshot_from_objects

PAGE_SIZE = 500


def _items(list_call: Callable[..., Any], kind: str, page_size: int) -> Iterator[dict[str, Any]]:
    for page in list_pages(list_call, json.loads, page_size):
        for item in page.get("items") or []:
            item.setdefault("kind", kind)  # list items come without their kind
            yield item


def read_cluster(api_client: Any, names: Names, page_size: int = PAGE_SIZE) -> ClusterSnapshot:
    """Nodes and GPU pods of the whole cluster, as a snapshot."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    nodes = _items(core.list_node, "Node", page_size)
    pods = _items(core.list_pod_for_all_namespaces, "Pod", page_size)
    return snapshot_from_objects([*nodes, *pods], names)
