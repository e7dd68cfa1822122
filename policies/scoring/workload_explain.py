"""Why a workload's pods are missing or waiting: the quota that refused them or holds them back.

A pod a ResourceQuota refuses is never created, so there is no pod to explain: the refusal is an event
on the object that tried to create it. The ReplicaSet and Job controllers create pods through
``RealPodControl.createPods`` and record a failure as a Warning event with reason ``FailedCreate`` and
message ``Error creating: <error>`` (kubernetes ``pkg/controller/controller_utils.go``,
``FailedCreatePodReason``); the API server's quota admission words the error
``exceeded quota: <quota>, requested: <r>=<v>, used: <r>=<v>, limited: <r>=<v>`` (kubernetes
``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``, ``checkRequest``
and ``prettyPrint``), inside ``pods "<name>" is forbidden: ...``. A Deployment creates no pods itself:
its ReplicaSets do, so a Deployment is followed to its ReplicaSets.

Kueue keeps a Job that names a LocalQueue in the label ``kueue.x-k8s.io/queue-name`` suspended
(``spec.suspend: true``) until it admits the Job's Workload (Kueue documentation: "Troubleshooting
Jobs"); a suspended Job's controller creates no pods (Kubernetes KEP-2232, "Suspend Job"). Pods of a
workload that exist but wait on an ElasticQuotaTree are said by ``policies.scoring.explain.quota_holds``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policies.model.cluster import ClusterState
from policies.model.settings import Names
from policies.scoring.explain import pending, quota_holds

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
FAILED_CREATE = "FailedCreate"
# The quota admission's words (resourcequota/controller.go): the quota's name, then three lists of
# "resource=quantity" joined by ",".
EXCEEDED = re.compile(r"exceeded quota: (?P<quota>[^,]+), requested: (?P<requested>.*?), used: (?P<used>.*?), "
                      r"limited: (?P<limited>[^\s]*)")
# The kinds explain follows to the objects that create their pods.
WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "Job")


@dataclass
class WorkloadView:
    """A workload as read from a snapshot or the live cluster: the object, the objects that create its
    pods (a Deployment's ReplicaSets; the workload itself otherwise), the events on each of them and the
    names of the pods they own."""

    kind: str
    obj: dict[str, Any]
    creators: list[dict[str, Any]] = field(default_factory=list)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # creator name -> its events
    pods: list[str] = field(default_factory=list)


@dataclass
class WorkloadExplanation:
    workload: str  # "Deployment team-a/serve"
    headline: str
    refused: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """The headline and every reason, in one line."""
        return ": ".join([self.headline, "; ".join((*self.refused, *self.waiting))]) \
            if self.refused or self.waiting else self.headline

    def as_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "summary": self.summary, "refused": self.refused,
                "waiting": self.waiting}


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """An object's metadata, or nothing when a hand-written snapshot holds something else there."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _field(obj: Mapping[str, Any], *path: str) -> Any:
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _count(value: Any) -> int:
    try:
        return int(value) if value is not None else 0
    except (TypeError, ValueError):
        return 0


def quota_refusal(event: Mapping[str, Any]) -> str | None:
    """The quota admission's refusal in a ``FailedCreate`` event, from "exceeded quota" on; None for any
    other event (a refusal for another reason is not the quota's)."""
    if event.get("reason") != FAILED_CREATE:
        return None
    found = EXCEEDED.search(str(event.get("message") or ""))
    return found.group(0) if found else None


def owned_by(obj: Mapping[str, Any], kind: str, name: str) -> bool:
    refs = meta_of(obj).get("ownerReferences")
    return isinstance(refs, list) and any(isinstance(r, Mapping) and r.get("kind") == kind
                                          and r.get("name") == name for r in refs)


def events_for(events: Iterable[Mapping[str, Any]], namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    """The events whose involvedObject is that object (what ``--field-selector involvedObject.kind=,
    involvedObject.name=`` lists)."""
    return [dict(e) for e in events
            if _field(e, "involvedObject", "kind") == kind and _field(e, "involvedObject", "name") == name
            and (_field(e, "involvedObject", "namespace") or meta_of(e).get("namespace")) == namespace]


def _missing(creator: Mapping[str, Any]) -> tuple[int, int]:
    """(pods wanted, pods the controller has): a ReplicaSet's replicas, a Job's parallelism."""
    if creator.get("kind") == "Job":
        wanted = _count(_field(creator, "spec", "parallelism") or 1)
        completions = _field(creator, "spec", "completions")
        if completions is not None:
            wanted = min(wanted, _count(completions) - _count(_field(creator, "status", "succeeded")))
        return wanted, _count(_field(creator, "status", "active"))
    replicas = _field(creator, "spec", "replicas")
    return _count(1 if replicas is None else replicas), _count(_field(creator, "status", "replicas"))


def explain_workload(view: WorkloadView, state: ClusterState, names: Names) -> WorkloadExplanation:
    """Whether quota refused the workload's pods, holds it suspended in a Kueue ClusterQueue, or holds
    its Pending pods on an ElasticQuotaTree; or that quota is not what it waits on."""
    meta = meta_of(view.obj)
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    label = f"{view.kind} {namespace}/{name}"
    refused = []
    for creator in view.creators:
        c_name = str(meta_of(creator).get("name") or "")
        refusals = [(r, e) for e in view.events.get(c_name, []) if (r := quota_refusal(e)) is not None]
        if not refusals:
            continue
        refusals.sort(key=lambda found: str(found[1].get("lastTimestamp") or found[1].get("eventTime") or ""))
        last = refusals[-1][0]
        quota = EXCEEDED.search(last)
        times = sum(max(_count(e.get("count")), 1) for _, e in refusals)
        wanted, has = _missing(creator)
        if wanted <= has:  # refused once, whole now (or an old ReplicaSet scaled to 0): history, not the reason
            continue
        short = f"{wanted - has} of {wanted} pods are missing"
        who = f"ResourceQuota {namespace}/{quota.group('quota') if quota else '?'}"
        refused.append(f"{creator.get('kind')} {namespace}/{c_name}: {short}: {who} refused {times} "
                       f"attempt{'s' if times != 1 else ''} to create them, the last with \"{last}\"; "
                       f"the controller keeps trying and creates them once the quota has room")
    waiting = _kueue_wait(view, namespace, state, names) + _tree_wait(view, namespace, state, names)
    if refused:
        headline = f"{label}: quota refused to create some of its pods"
    elif waiting:
        headline = f"{label} waits on quota"
    else:
        headline = (f"{label}: no event records a quota refusing its pods (events are kept about an hour), "
                    f"and quota holds none of them back")
    return WorkloadExplanation(label, headline, refused, waiting)


def _kueue_wait(view: WorkloadView, namespace: str, state: ClusterState, names: Names) -> list[str]:
    """A Job Kueue keeps suspended: which ClusterQueue it waits for, with what the queue has left."""
    labels = meta_of(view.obj).get("labels")
    queue = labels.get(QUEUE_LABEL) if isinstance(labels, Mapping) else None
    if view.kind != "Job" or not queue or _field(view.obj, "spec", "suspend") is not True:
        return []
    import time

    from policies.quota.quota_objects import LOCAL_QUEUE
    from policies.quota.quota_usage import quota_limits

    objects = getattr(state, "quota_objects", None)
    quotas = objects() if objects is not None else []
    local = next((obj for kind, obj in quotas if kind == LOCAL_QUEUE and meta_of(obj).get("namespace") == namespace
                  and meta_of(obj).get("name") == queue), None)
    target = _field(local, "spec", "clusterQueue") if local is not None else None
    if not target:
        return [f"it is suspended and names LocalQueue {namespace}/{queue}, which the cluster state does not "
                f"hold: Kueue admits it only once that queue exists"]
    said = f"it is suspended, waiting for quota in ClusterQueue {target} (LocalQueue {namespace}/{queue})"
    figures = []
    for limit in quota_limits(namespace, quotas, [], names, time.time(), queue=queue):
        unit = names.memory_unit if limit.resource == names.resources.gpu_mem else "%"
        figures.append(f"{limit.key} {limit.hard} {unit}, {limit.used} reserved, {limit.left} left")
    return [said + (f": {'; '.join(figures)}" if figures else "") + "; Kueue starts it whole when the queue has room"]


def _tree_wait(view: WorkloadView, namespace: str, state: ClusterState, names: Names) -> list[str]:
    """The workload's Pending pods an ElasticQuotaTree holds back (``quota_holds``)."""
    said = []
    for pod_name in view.pods:
        pod = state.get_pod(namespace, pod_name)
        if pod is None or not pending(pod):
            continue
        said += [f"pod {pod.key} waits on its quota: {held}" for held in quota_holds(pod, state, names)]
    return said
