"""The cluster snapshot: an in-memory, thread-safe store of nodes, pods, namespaces and quota objects
that the live watch and snapshot files both fill, with the change log that lets per-node data be
refreshed for just the nodes that changed."""

from __future__ import annotations

import threading
from bisect import bisect_right
from contextlib import AbstractContextManager
from typing import Any

from policies.model.cluster import USABLE, Availability, NodeInfo, PodInfo
from policies.model.cluster_manifests import mapping_or_empty


class ClusterSnapshot:
    """An in-memory, thread-safe ClusterState; the live watch and snapshot files both fill one.

    Every change bumps a generation counter, records it on the node it touches and in a
    bounded change log, so derived per-node data (card occupancy for scoring) can be
    cached and refreshed for just the nodes that changed.
    """

    CHANGE_LOG = 65_536  # changes remembered; a reader further behind starts over

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}
        self._by_node: dict[str, dict[str, PodInfo]] = {}
        # Pods without GPUs are known by key only: a binding for one
        # is then "nothing to check", not "pod not seen yet".
        self._other: set[str] = set()
        self._generation = 0
        self._node_generation: dict[str, int] = {}
        self._log_generations: list[int] = []
        self._log_nodes: list[str] = []
        self._log_floor = 0  # changes after this generation are all in the log
        # Namespace labels (who allows annotation exemptions); None until Namespaces were seen.
        self._namespaces: dict[str, dict[str, str]] | None = None
        # GPU quota objects (ResourceQuota, ElasticQuotaTree, ClusterQueue) by (kind, namespace, name).
        self._quotas: dict[tuple[str, str, str], dict[str, Any]] = {}
        # Increases with every change to a quota object (the metrics refresh when it moves).
        self.quota_generation = 0
        # Increases with every pod stored or dropped, bound or not (``generation`` follows nodes' changes
        # only; quotas charge pending pods too): what GQ005's usage is kept for.
        self.pod_generation = 0
        # What quotas charge, summed per namespace and kept current pod by pod (policies/model/pod_usage.py),
        # so that a review adds up namespaces rather than every pod; built on first use.
        self._quota_usage: Any = None

    def _touch(self, node: str) -> None:
        self._generation += 1
        self._node_generation[node] = self._generation
        self._log_generations.append(self._generation)
        self._log_nodes.append(node)
        if len(self._log_generations) > self.CHANGE_LOG:
            half = self.CHANGE_LOG // 2
            self._log_floor = self._log_generations[half - 1]
            del self._log_generations[:half], self._log_nodes[:half]

    def changes_since(self, generation: int) -> list[str] | None:
        """Names of the nodes changed (themselves or their pods) after ``generation``, or None
        when the log no longer reaches that far back."""
        with self._lock:
            if generation < self._log_floor:
                return None
            start = bisect_right(self._log_generations, generation)
            return self._log_nodes[start:]

    @property
    def generation(self) -> int:
        """Increases with every change to any node or pod."""
        return self._generation

    def writes_held(self) -> AbstractContextManager[Any]:
        """Holds every change off while in use: a moment when no writer is half-way through one
        (the server forks its audit process inside it)."""
        return self._lock

    def node_generation(self, name: str) -> int:
        """The generation of the last change to this node or to the pods on it."""
        return self._node_generation.get(name, 0)

    def availability(self) -> Availability:
        return USABLE

    def record_pod(self, pod: PodInfo) -> None:
        """Keep a pod as the rules need it: in full when it asks for GPUs (finished ones too, which
        rules skip and ``inspect`` shows) or sets what GS010 or GS011 report, else by key only."""
        key = pod.key
        if pod.kept:
            with self._lock:
                self._other.discard(key)
                self.upsert_pod(pod)
            return
        with self._lock:
            if key in self._pods:
                self._drop_pod(key)
            self._other.add(key)

    def upsert_node(self, node: NodeInfo) -> None:
        with self._lock:
            self._nodes[node.name] = node
            self._touch(node.name)

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._nodes.pop(name, None)
            self._touch(name)

    def upsert_pod(self, pod: PodInfo) -> None:
        with self._lock:
            self.pod_generation += 1
            self._drop_pod(pod.key)
            self._pods[pod.key] = pod
            if self._quota_usage is not None and (pod.quota_mem or pod.quota_core):
                from policies.model.pod_usage import pod_usage

                self._quota_usage.add(pod_usage(pod), 1)
            if pod.node_name:
                self._by_node.setdefault(pod.node_name, {})[pod.key] = pod
                self._touch(pod.node_name)

    def remove_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self._drop_pod(f"{namespace}/{name}")
            self._other.discard(f"{namespace}/{name}")

    def has_pod(self, namespace: str, name: str) -> bool:
        key = f"{namespace}/{name}"
        return key in self._pods or key in self._other

    def pod_keys(self) -> set[str]:
        """Every pod the snapshot knows, with or without GPUs."""
        with self._lock:
            return set(self._pods) | self._other

    def _drop_pod(self, key: str) -> None:
        old = self._pods.pop(key, None)
        if old is not None:
            self.pod_generation += 1
            if self._quota_usage is not None and (old.quota_mem or old.quota_core):
                from policies.model.pod_usage import pod_usage

                self._quota_usage.add(pod_usage(old), -1)
        if old is not None and old.node_name:
            self._touch(old.node_name)
            on_node = self._by_node.get(old.node_name)
            if on_node is not None:
                on_node.pop(key, None)
                if not on_node:
                    del self._by_node[old.node_name]

    def upsert_namespace(self, name: str, labels: dict[str, str]) -> None:
        with self._lock:
            if self._namespaces is None:
                self._namespaces = {}
            self._namespaces[name] = labels

    def remove_namespace(self, name: str) -> None:
        with self._lock:
            if self._namespaces is not None:
                self._namespaces.pop(name, None)

    def upsert_quota(self, kind: str, obj: dict[str, Any]) -> None:
        """Keep a quota object as read (they are few: one per team and namespace)."""
        meta = mapping_or_empty(obj.get("metadata"))
        with self._lock:
            self._quotas[(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = obj
            self.quota_generation += 1

    def remove_quota(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            self._quotas.pop((kind, namespace, name), None)
            self.quota_generation += 1

    def quota_objects(self) -> list[tuple[str, dict[str, Any]]]:
        """(kind, object) of every quota object held, in a stable order."""
        with self._lock:
            return [(key[0], obj) for key, obj in sorted(self._quotas.items())]

    def quota_usage(self) -> Any:
        """A copy of what quotas charge per namespace (``policies.model.pod_usage.UsageIndex``)."""
        with self._lock:
            if self._quota_usage is None:
                from policies.model.pod_usage import usage_index

                self._quota_usage = usage_index(self._pods.values())
            return self._quota_usage.copy()

    def namespace_names(self) -> set[str]:
        with self._lock:
            return set(self._namespaces or ())

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """The namespace's labels; None when no Namespaces were given or this one does not exist."""
        namespaces = self._namespaces
        return None if namespaces is None else namespaces.get(namespace)

    def get_node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            return list(self._nodes.values())

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        return self._pods.get(f"{namespace}/{name}")

    def pods(self) -> list[PodInfo]:
        with self._lock:
            return list(self._pods.values())

    def pods_on_node(self, node: str) -> list[PodInfo]:
        with self._lock:
            return list(self._by_node.get(node, {}).values())

    def counts(self) -> tuple[int, int]:
        """Nodes and GPU pods held in full."""
        return len(self._nodes), len(self._pods)
