"""The few fields of Nodes and Pods the rules read, as typed decoders of raw API JSON.

A list page or a watch event is decoded by ``msgspec`` straight into plain dicts that hold
only these fields; everything else (managedFields, volumes, probes...) is skipped in C
without ever becoming a Python object. That is what keeps 150,000 pods fast and small.
The dicts have the shapes of the full objects, so ``node_from_manifest`` and
``pod_from_manifest`` read them exactly like a snapshot file's objects.
"""

from __future__ import annotations

from typing import Any, Generic, TypedDict, TypeVar

import msgspec


class PodMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    annotations: dict[str, str]
    # A pod past its deletion's grace period is no longer charged to a ResourceQuota (QuotaV1Pod).
    deletionTimestamp: str
    deletionGracePeriodSeconds: int


class NodeMeta(TypedDict, total=False):
    name: str
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]


# "continue" is a Python keyword: the functional TypedDict form can still name it.
ListMeta = TypedDict("ListMeta", {"resourceVersion": str, "continue": str}, total=False)


class Resources(TypedDict, total=False):
    limits: dict[str, Any]
    requests: dict[str, Any]


class EnvVar(msgspec.Struct):
    """An env entry. A struct, not a dict: pods list dozens and a struct costs a fifth as much to decode;
    the live state turns the few entries GS010 and GS011 judge into dicts (``webhook/state/live.py``)."""

    name: str = ""
    value: str = ""
    # Its source's kind is all that is read (GS010, GS011: a value set from it is known at run time only).
    valueFrom: dict[str, Any] | None = None


class EnvFromSource(TypedDict, total=False):
    prefix: str
    configMapRef: dict[str, Any]
    secretRef: dict[str, Any]


class Container(TypedDict, total=False):
    name: str
    resources: Resources
    # Always on an init container: a sidecar, which quotas charge beside the app containers (PodRequests).
    restartPolicy: str
    # GS010 and GS011 judge a few names (the audit reports running pods that set them).
    env: list[EnvVar]
    envFrom: list[EnvFromSource]


class PodSpec(TypedDict, total=False):
    nodeName: str
    schedulerName: str
    # Read for pods not bound yet (``explain``): their hard node constraints.
    nodeSelector: dict[str, Any]
    affinity: dict[str, Any]
    containers: list[Container]
    initContainers: list[Container]
    # kubectl debug's containers (GS010, GS011 judge their env) and whether service links are given
    # (what a $(VAR) in a judged value may read).
    ephemeralContainers: list[Container]
    enableServiceLinks: bool
    # Charged to quotas on top of the containers (PodRequests).
    overhead: dict[str, Any]


class PodStatus(TypedDict, total=False):
    phase: str


class Pod(TypedDict, total=False):
    metadata: PodMeta
    spec: PodSpec
    status: PodStatus
    # A watch ERROR event carries a Status in place of the object.
    code: int
    reason: str
    message: str


class Taint(TypedDict, total=False):
    key: str
    effect: str


class NodeSpec(TypedDict, total=False):
    providerID: str
    taints: list[Taint]


class NodeAddress(TypedDict, total=False):
    type: str
    address: str


class NodeSystemInfo(TypedDict, total=False):
    kubeletVersion: str
    containerRuntimeVersion: str
    osImage: str
    bootID: str


class NodeCondition(TypedDict, total=False):
    type: str
    status: str
    lastTransitionTime: str


class NodeStatus(TypedDict, total=False):
    addresses: list[NodeAddress]
    # Signs of a kubelet restart (boot ID, Ready transitions) for the opt-in /configz reader.
    conditions: list[NodeCondition]
    allocatable: dict[str, Any]
    capacity: dict[str, Any]
    nodeInfo: NodeSystemInfo


class Node(TypedDict, total=False):
    metadata: NodeMeta
    spec: NodeSpec
    status: NodeStatus
    code: int
    reason: str
    message: str


class NamespaceMeta(TypedDict, total=False):
    name: str
    resourceVersion: str
    labels: dict[str, str]


class Namespace(TypedDict, total=False):
    metadata: NamespaceMeta
    code: int
    reason: str
    message: str


T = TypeVar("T")


class ObjectList(TypedDict, Generic[T], total=False):
    metadata: ListMeta
    items: list[T]


class WatchEvent(TypedDict, Generic[T], total=False):
    type: str
    object: T


class Decoders:
    """A list decoder and a watch-event decoder for one kind."""

    def __init__(self, item: type) -> None:
        self.list = msgspec.json.Decoder(ObjectList[item])  # type: ignore[valid-type]
        self.event = msgspec.json.Decoder(WatchEvent[item])  # type: ignore[valid-type]


NODE_DECODERS = Decoders(Node)
POD_DECODERS = Decoders(Pod)
NAMESPACE_DECODERS = Decoders(Namespace)
# Quota objects are few and read whole (policies/quota/quota_objects.py reads what it needs of them).
RAW_DECODERS = Decoders(dict)
DecodeError = msgspec.DecodeError
