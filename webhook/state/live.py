"""Live cluster state: list + watch of Nodes and Pods with the official ``kubernetes`` client.

Each resource has a reflector thread (webhook/state/reflector.py): a paged list
(``limit``/``continue``) fills the snapshot, then a watch from the list's resourceVersion keeps it
current. Responses are read
raw (``_preload_content=False``) and decoded by ``kube_schema`` into only the fields the
rules read; pods without GPUs are kept by key only. A watch that ends is resumed from the
last resourceVersion (bookmarks keep it fresh); ``410 Gone`` (an HTTP status or an ERROR
event) means the history is compacted, so the reflector lists again and drops what
vanished; a dropped connection or an API error is retried with jittered exponential
backoff. The state is *synced* once both first lists completed, and *stale* while a watch
has been disconnected for longer than ``state.stale_after_seconds``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
from kubernetes import client as k8s

from policies.model.cluster import USABLE, Availability, NodeInfo, PodInfo
from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.model.isolation import ENV_GROUPS, judged_names
from policies.model.resources import watched_resources
from policies.model.settings import Names, StateSettings
from policies.quota.quota_objects import RESOURCE_QUOTA
from webhook.state.kube_client import KubeConfigError, api_client
from webhook.state.kube_schema import (
    NAMESPACE_DECODERS,
    NODE_DECODERS,
    POD_DECODERS,
    RAW_DECODERS,
)
from webhook.state.kubelet_config import Fetch, KubeletConfigReader, kubelet_signature
from webhook.state.reflector import Reflector, Resource
from webhook.state.status import ConfigzStatus, StateStatus

# The custom quota kinds the live state watches (kind, group, version, plural): ACK's ElasticQuotaTree
# and Kueue's ClusterQueue and LocalQueue at the version Kueue has served longest (v1beta1).
WATCHED_CUSTOM_QUOTAS = (("ElasticQuotaTree", "scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees"),
                         ("ClusterQueue", "kueue.x-k8s.io", "v1beta1", "clusterqueues"),
                         ("LocalQueue", "kueue.x-k8s.io", "v1beta1", "localqueues"))


class StateSourceError(KubeConfigError):
    """The cluster cannot be reached with the given configuration (bad kubeconfig, no in-cluster config)."""


def core_api(kubeconfig: Path | None) -> tuple[k8s.CoreV1Api, str]:
    """A CoreV1Api from the kubeconfig file, else from the in-cluster service account; and its server URL."""
    try:
        # The reflectors and the leader election retry with back-off of their own.
        client = api_client(kubeconfig, retries=False)
    except KubeConfigError as exc:
        raise StateSourceError(str(exc)) from None
    return k8s.CoreV1Api(client), client.configuration.host


class LiveClusterState:
    """A ClusterState kept current by list + watch; starts its threads on ``start()``."""

    def __init__(self, api: k8s.CoreV1Api, names: Names, settings: StateSettings,
                 clock: Callable[[], float] = time.monotonic, status: StateStatus | None = None,
                 configz: Fetch | None = None, quotas: bool = False) -> None:
        self.snapshot = ClusterSnapshot()
        self.status = status
        self.names = names
        self._watched = watched_resources(names)
        self._judged_env = judged_names(names.env)
        self.settings = settings
        self._clock = clock
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # A node's record is replaced by the watch and by the /configz reader: one at a time.
        self._node_lock = threading.Lock()
        self.kubelet: KubeletConfigReader | None = None
        if configz is not None:
            configz_status = ConfigzStatus()
            if status is not None:
                status.configz = configz_status
            self.kubelet = KubeletConfigReader(configz, names, settings.kubelet_configz, self._kubelet_read,
                                               configz_status, clock)
        self.nodes_reflector = Reflector(Resource(
            "nodes", api.list_node, NODE_DECODERS, self._apply_node,
            lambda: {n.name for n in self.snapshot.nodes()},
            lambda obj: (obj.get("metadata") or {}).get("name", ""), self.snapshot.remove_node,
        ), settings, self._stop, clock, self._changed)
        self.pods_reflector = Reflector(Resource(
            "pods", api.list_pod_for_all_namespaces, POD_DECODERS, self._apply_pod, self.snapshot.pod_keys,
            _pod_key, lambda key: self.snapshot.remove_pod(*key.split("/", 1)),
        ), settings, self._stop, clock, self._changed)
        # Namespace labels say where annotation exemptions are allowed (policies/model/grants.py).
        self.namespaces_reflector = Reflector(Resource(
            "namespaces", api.list_namespace, NAMESPACE_DECODERS, self._apply_namespace,
            self.snapshot.namespace_names, lambda obj: (obj.get("metadata") or {}).get("name", ""),
            self.snapshot.remove_namespace,
        ), settings, self._stop, clock, self._changed)

        # GPU quotas (docs/quotas.md), for GQ005 and the quota views: each kind its own reflector. They are
        # not part of ``synced`` or ``availability``: a cluster without the ElasticQuotaTree or Kueue CRDs
        # answers 404 and the reflector keeps retrying (with backoff) until one is installed.
        self.quota_reflectors: tuple[Reflector, ...] = ()
        if quotas:
            custom = k8s.CustomObjectsApi(api.api_client)
            self.quota_reflectors = (
                self._quota_reflector("resourcequotas", RESOURCE_QUOTA, api.list_resource_quota_for_all_namespaces),
                *(self._quota_reflector(plural, kind, partial(custom.list_cluster_custom_object, group, version,
                                                              plural))
                  for kind, group, version, plural in WATCHED_CUSTOM_QUOTAS),
            )

    def _quota_reflector(self, name: str, kind: str, call: Callable[..., Any]) -> Reflector:
        def apply(event: str, obj: dict[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            if event == "DELETED":
                self.snapshot.remove_quota(kind, meta.get("namespace") or "", meta.get("name", ""))
            else:
                obj.setdefault("kind", kind)
                self.snapshot.upsert_quota(kind, obj)

        def keys() -> set[str]:
            return {f"{(o.get('metadata') or {}).get('namespace') or ''}/{(o.get('metadata') or {}).get('name', '')}"
                    for k, o in self.snapshot.quota_objects() if k == kind}

        def key_of(obj: dict[str, Any]) -> str:
            meta = obj.get("metadata") or {}
            return f"{meta.get('namespace') or ''}/{meta.get('name', '')}"

        return Reflector(Resource(name, call, RAW_DECODERS, apply, keys, key_of,
                                  lambda key: self.snapshot.remove_quota(kind, *key.split("/", 1))),
                         self.settings, self._stop, self._clock, self._changed)

    def quota_objects(self) -> list[tuple[str, dict[str, Any]]]:
        return self.snapshot.quota_objects()

    @property
    def quota_generation(self) -> int:
        return self.snapshot.quota_generation

    @property
    def pod_generation(self) -> int:
        return self.snapshot.pod_generation

    def quota_usage(self) -> Any:
        return self.snapshot.quota_usage()

    def _changed(self) -> None:
        """A list completed or a watch event was applied: what /metrics reports."""
        if self.status is not None:
            self.status.event()
            if not self.status.is_synced and self.synced():
                self.status.synced()

    @property
    def reflectors(self) -> tuple[Reflector, Reflector, Reflector]:
        return self.nodes_reflector, self.pods_reflector, self.namespaces_reflector

    @property
    def placement_reflectors(self) -> tuple[Reflector, Reflector]:
        """What the stateful rules read (availability); Namespaces only gate exemptions."""
        return self.nodes_reflector, self.pods_reflector

    # -- applying objects ------------------------------------------------------------------
    def _apply_node(self, kind: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        kubelet = self.kubelet
        if kind == "DELETED":
            self.snapshot.remove_node(name)
            if kubelet is not None:
                kubelet.forget(name)
            return
        node = node_from_manifest(obj, self.names)
        if kubelet is None:
            self.snapshot.upsert_node(node)
            return
        kubelet.observe(node, kubelet_signature(obj))
        with self._node_lock:
            self.snapshot.upsert_node(replace(node, kubelet_cpu_manager_policy=kubelet.policy(name)))

    def _kubelet_read(self, name: str, policy: str) -> None:
        """The /configz reader learnt (or lost) a node's policy: the node's record shows it."""
        with self._node_lock:
            node = self.snapshot.get_node(name)
            if node is not None and node.kubelet_cpu_manager_policy != policy:
                self.snapshot.upsert_node(replace(node, kubelet_cpu_manager_policy=policy))

    def _apply_namespace(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if kind == "DELETED":
            self.snapshot.remove_namespace(meta.get("name", ""))
        else:
            self.snapshot.upsert_namespace(meta.get("name", ""), dict(meta.get("labels") or {}))

    def _apply_pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if kind == "DELETED":
            self.snapshot.remove_pod(meta.get("namespace") or "default", meta.get("name", ""))
            return
        spec = obj.get("spec") or {}
        if not _mentions(spec, self._watched, self._judged_env):
            # Most pods ask for no GPU and set no GPU variable: known by key, without parsing a quantity.
            self.snapshot.record_pod(PodInfo(meta.get("namespace") or "default", meta.get("name", ""), "", "", "",
                                             (), _NO_ANNOTATIONS))
            return
        # Thousands of pods share a node name and a namespace: keep one copy of each string.
        if spec.get("nodeName"):
            spec["nodeName"] = sys.intern(spec["nodeName"])
        if meta.get("namespace"):
            meta["namespace"] = sys.intern(meta["namespace"])
        _judged_env_only(spec, self._judged_env)
        self.snapshot.record_pod(pod_from_manifest(obj, self.names))

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self.kubelet is not None:
            self.kubelet.start()
        for reflector in (*self.reflectors, *self.quota_reflectors):
            thread = threading.Thread(target=reflector.run, name=f"watch-{reflector.resource.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for reflector in (*self.reflectors, *self.quota_reflectors):
            reflector.interrupt()
        for thread in self._threads:
            thread.join(timeout)
        if self.kubelet is not None:
            self.kubelet.stop(timeout)

    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    def wait_synced(self, timeout: float) -> bool:
        deadline = self._clock() + timeout
        return all(r.synced.wait(max(0.0, deadline - self._clock())) for r in self.reflectors)

    # -- ClusterState ----------------------------------------------------------------------
    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """Labels of a listed namespace; None before the first Namespace list (nothing allowed yet)."""
        if not self.namespaces_reflector.synced.is_set():
            return None
        return self.snapshot.namespace_labels(namespace)

    def availability(self) -> Availability:
        waiting = [r.resource.name for r in self.placement_reflectors if not r.synced.is_set()]
        if waiting:
            return Availability(False, f"not synced yet: the first list of {' and '.join(waiting)} has not "
                                       f"completed ({self.pods_reflector.last_error})")
        bound = self.settings.stale_after_seconds
        for reflector in self.placement_reflectors:
            stale = reflector.stale_for()
            if stale > bound:
                return Availability(False, f"stale: the {reflector.resource.name} watch has been disconnected "
                                           f"for {stale:.0f}s (bound {bound:.0f}s): {reflector.last_error}")
        return USABLE

    def get_node(self, name: str) -> NodeInfo | None:
        return self.snapshot.get_node(name)

    def nodes(self) -> list[NodeInfo]:
        return self.snapshot.nodes()

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        return self.snapshot.get_pod(namespace, name)

    def has_pod(self, namespace: str, name: str) -> bool:
        return self.snapshot.has_pod(namespace, name)

    def pods_on_node(self, node: str) -> list[PodInfo]:
        return self.snapshot.pods_on_node(node)

    def pods(self) -> list[PodInfo]:
        return self.snapshot.pods()

    def counts(self) -> tuple[int, int]:
        return self.snapshot.counts()

    def writes_held(self) -> contextlib.AbstractContextManager[Any]:
        """No watch event is applied while in use (see ``ClusterSnapshot.writes_held``)."""
        return self.snapshot.writes_held()

    # The snapshot's change log, so the scorer refreshes only the nodes that changed.
    @property
    def generation(self) -> int:
        return self.snapshot.generation

    def changes_since(self, generation: int) -> list[str] | None:
        return self.snapshot.changes_since(generation)

    def node_generation(self, name: str) -> int:
        return self.snapshot.node_generation(name)


_NO_ANNOTATIONS: dict[str, str] = {}


_NAME = attrgetter("name")


def _mentions(spec: dict[str, Any], watched: frozenset[str], judged_env: frozenset[str]) -> bool:
    """Whether any container names a GPU resource in its limits or requests, or sets an environment
    variable GS010 or GS011 judge (the audit reports such pods too)."""
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or ():
            resources = container.get("resources") or {}
            for block in (resources.get("limits"), resources.get("requests")):
                if block and not watched.isdisjoint(block):
                    return True
            env = container.get("env")
            if env and not judged_env.isdisjoint(map(_NAME, env)):  # in C: pods list dozens of entries
                return True
    return False


def _judged_env_only(spec: dict[str, Any], judged_env: frozenset[str]) -> None:
    """Each container's env as the entries GS010 and GS011 judge, as dicts (the decoder's structs,
    ``kube_schema.EnvVar``): the record keeps nothing else of it, unless a judged value has a "$" the
    kubelet may expand (then every entry, which the expansion reads)."""
    for group in ENV_GROUPS:
        for container in spec.get(group) or ():
            env = container.get("env")
            if env:
                judged = [e for e in env if e.name in judged_env]
                kept = env if any("$" in e.value for e in judged) else judged
                container["env"] = [msgspec.structs.asdict(e) for e in kept]


def _pod_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
