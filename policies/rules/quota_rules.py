"""GQ001-GQ004: GPU quota objects that limit nothing or contradict themselves.

A ResourceQuota, ACK's ElasticQuotaTree and Kueue's ClusterQueue are judged where they name a GPU
resource (policies/quota/quota_objects.py says how each is read and where that comes from). On UPDATE only
what the change writes is judged: a quota that already held a value is not refused for an unrelated
edit (the value is reported again only when it is written anew).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import ROUND_CEILING, Decimal
from typing import Any

from policies.model.resources import CUSTOM_WORKLOADS, WORKLOAD_KINDS, Path
from policies.model.subject import Subject, SubjectPod
from policies.quota.quota_objects import (
    CLUSTER_QUEUE,
    ELASTIC_QUOTA_TREE,
    PEBIBYTE,
    QUEUE_LABEL,
    QUOTA_KINDS,
    REQUESTS,
    RESOURCE_QUOTA,
    UNLIMITED,
    QuotaValue,
    cluster_queue_values,
    group_matches,
    quota_unit_bytes,
    resource_quota_keys,
    tree_nodes,
)
from policies.rules.base import Found, rule
from policies.rules.relevance import Relevance

NAMES_A_GPU_QUOTA = Relevance(gpu_quotas=True)
QUOTA_EVALUATOR = ("Kubernetes source code: kubernetes/kubernetes pkg/quota/v1/evaluator/core/pods.go "
                   "(isExtendedResourceNameForQuota: extended resources are counted under requests.<name> only)")
CAPACITY_SCHEDULING = 'ACK documentation: "Work with capacity scheduling"'
TREE_RULES = 'ACK documentation: "Improve resource utilization with ElasticQuotaTree and task queues"'
TREE_PAGE = 'ACK documentation: "ElasticQuotaTree"'
KUEUE = 'Kueue documentation: "Cluster Queue"'


def is_quota(subject: Subject) -> bool:
    """A quota kind of its own API group (an ElasticQuotaTree of another group is not ACK's)."""
    return subject.kind in QUOTA_KINDS and group_matches(subject.kind, subject.obj)


def _at(obj: Any, path: Path) -> Any:
    for part in path:
        if isinstance(part, int):
            obj = obj[part] if isinstance(obj, list) and 0 <= part < len(obj) else None
        else:
            obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _written(subject: Subject, *paths: Path) -> bool:
    """Whether the request writes any of ``paths``: always on CREATE, on UPDATE when a value differs."""
    if subject.operation != "UPDATE" or subject.old is None:
        return True
    return any(_at(subject.obj, p) != _at(subject.old, p) for p in paths)


def quota_label(subject: Subject) -> str:
    """How a message names the quota object: a ClusterQueue is cluster-scoped, so without a namespace."""
    return f"{CLUSTER_QUEUE} {subject.name}" if subject.kind == CLUSTER_QUEUE else subject.label


def _number(value: Decimal) -> str:
    return f"{value:,.0f}" if value == value.to_integral_value() else str(value)


@rule("GQ001", severity="deny", kinds=(RESOURCE_QUOTA,), applies=is_quota, relevance=NAMES_A_GPU_QUOTA,
      seed=QUOTA_EVALUATOR,
      title="A ResourceQuota's GPU keys are ones quota enforces",
      doc="The API server accepts any resource name in a ResourceQuota's spec.hard, but its quota admission "
          "counts an extended resource such as aliyun.com/gpu-mem only under requests.<name>: a bare "
          "aliyun.com/gpu-mem or limits.aliyun.com/gpu-mem key limits nothing, and every pod is admitted. "
          "Refused, naming the key to write instead.")
def gpu_quota_keys_are_enforced(subject: Subject) -> Iterator[Found]:
    keys = resource_quota_keys(subject.obj, subject.names)
    counted = {k.resource for k in keys if k.prefix == REQUESTS}
    for key in keys:
        if key.prefix == REQUESTS or not _written(subject, key.value.path):
            continue
        wanted = f"{REQUESTS}{key.resource}"
        fix = (f"remove it ({wanted} is there and is what quota counts)" if key.resource in counted
               else f"write {wanted}: {key.value.raw} instead")
        yield Found(f"{quota_label(subject)} {key.value.where} limits nothing: quota counts {key.resource}, an "
                    f"extended resource, only under {wanted}, so pods asking for it are admitted whatever it says; "
                    f"{fix}",
                    key.value.path)


def _memory_in_bytes(subject: Subject, value: QuotaValue) -> str | None:
    """Why a GPU memory quota value is bytes, with the fix; None when it is a count of the unit or unlimited."""
    names = subject.names
    if value.resource != names.resources.gpu_mem or value.quantity is None or value.quantity == UNLIMITED:
        return None
    per = quota_unit_bytes(names)
    if value.quantity * per < PEBIBYTE:
        return None
    unit = names.memory_unit
    wanted = int((value.quantity / per).to_integral_value(ROUND_CEILING))
    return (f"{quota_label(subject)} {value.where} is {value.raw} ({_number(value.quantity)} {unit}, more than "
            f"a pebibyte of GPU memory): it looks like bytes, but {value.resource} counts {unit}; write {wanted} "
            f"({value.raw} as {unit}, rounded up), or {UNLIMITED} for no limit")


def _quota_values(subject: Subject) -> Iterator[QuotaValue]:
    names = subject.names
    if subject.kind == RESOURCE_QUOTA:
        yield from (k.value for k in resource_quota_keys(subject.obj, names))
    elif subject.kind == ELASTIC_QUOTA_TREE:
        for node in tree_nodes(subject.obj, names):
            yield from node.min.values()
            yield from node.max.values()
    elif subject.kind == CLUSTER_QUEUE:
        yield from (value for _, value in cluster_queue_values(subject.obj, names))


@rule("GQ002", severity="deny", kinds=QUOTA_KINDS, applies=is_quota, relevance=NAMES_A_GPU_QUOTA,
      seed=f"000, {CAPACITY_SCHEDULING}, {KUEUE}",
      title="GPU memory quotas count GiB, not bytes",
      doc="aliyun.com/gpu-mem counts GiB (MiB where the device plugin runs with --memory-unit=MiB), in quotas "
          "as in pods: a quota written 16Gi is 17,179,869,184 GiB and limits nothing. A GPU memory value of a "
          "ResourceQuota, an ElasticQuotaTree's min or max, or a ClusterQueue's nominalQuota, borrowingLimit or "
          "lendingLimit above a pebibyte of GPU memory is refused, naming the count of the unit it stands for. "
          "2147483647 (the largest int32) is exempt: ACK's default ElasticQuotaTree writes it for "
          "\"unlimited\".")
def gpu_memory_quota_counts_the_unit(subject: Subject) -> Iterator[Found]:
    for value in _quota_values(subject):
        problem = _memory_in_bytes(subject, value)
        if problem is not None and _written(subject, value.path):
            yield Found(problem, value.path)


def _tree_value(value: QuotaValue) -> str:
    return f"{value.raw}"


@rule("GQ003", severity="deny", kinds=(ELASTIC_QUOTA_TREE,), applies=is_quota, relevance=NAMES_A_GPU_QUOTA,
      seed=f"{TREE_RULES}, {CAPACITY_SCHEDULING}",
      title="An ElasticQuotaTree node's GPU min does not exceed its max",
      doc="min is what a quota node is guaranteed and max the most it may use, borrowing included; ACK states "
          "that on one node min must not exceed max. A GPU resource whose min is above its max is refused, "
          "naming both.")
def tree_min_within_max(subject: Subject) -> Iterator[Found]:
    for node in tree_nodes(subject.obj, subject.names):
        for resource, low in node.min.items():
            high = node.max.get(resource)
            if high is None or low.quantity is None or high.quantity is None or low.quantity <= high.quantity:
                continue
            if not _written(subject, low.path, high.path):
                continue
            yield Found(f"{quota_label(subject)} quota node {node.name} has min {resource} {_tree_value(low)} "
                        f"above its max {_tree_value(high)}: min is guaranteed and max is the most the node may use; "
                        f"set min to at most {high.raw} or max to at least {low.raw}", low.path)


@rule("GQ004", severity="warn", kinds=(ELASTIC_QUOTA_TREE,), applies=is_quota, relevance=NAMES_A_GPU_QUOTA,
      seed=f"{TREE_PAGE}, {CAPACITY_SCHEDULING}",
      title="An ElasticQuotaTree's root has the same GPU min and max",
      doc="The root of the tree stands for what the whole cluster gives the tree: it has no parent to borrow "
          "from, and ACK's examples set its min and max to the same values. A GPU resource whose root min and "
          "max differ gets a warning, naming both.")
def tree_root_min_is_max(subject: Subject) -> Iterator[Found]:
    node = next(tree_nodes(subject.obj, subject.names), None)  # depth first: the root comes first
    if node is None:
        return
    for resource in sorted(node.min.keys() | node.max.keys()):
        low, high = node.min.get(resource), node.max.get(resource)
        if low is not None and high is not None and low.quantity is not None and low.quantity == high.quantity:
            continue
        if (low is not None and low.quantity is None) or (high is not None and high.quantity is None):
            continue
        paths = [v.path for v in (low, high) if v is not None]
        if not _written(subject, *paths):
            continue
        shown = f"min {low.raw if low else '(not set)'} and max {high.raw if high else '(not set)'}"
        target = high if high is not None else low
        assert target is not None
        yield Found(f"{quota_label(subject)} root quota node {node.name} has {resource} {shown}: the root "
                    f"stands for what the cluster gives the whole tree and has no parent to borrow from; set "
                    f"both to {target.raw}", target.path)


# -- GQ005: what the namespace's quotas will do with a workload's pods -----------------------------------

SWITCH = "quota"
# A workload's pods, not a Pod: the API server's quota admission judges each pod itself (never
# duplicated here); the workloads' pods are created later, by a controller, where nobody reads the refusal.
WORKLOAD_KINDS_JUDGED = (*sorted(WORKLOAD_KINDS - {"PodTemplate"}), CUSTOM_WORKLOADS)
PODS_HELPERS = ("Kubernetes source code: kubernetes/kubernetes pkg/api/v1/resource/helpers.go (PodRequests) and "
                "pkg/quota/v1/evaluator/core/pods.go (QuotaV1Pod)")


def asks_quota_resources(subject: Subject) -> bool:
    r = subject.names.resources
    return r.gpu_mem in subject.asked or r.gpu_core in subject.asked


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


RAY_WORKER_GROUPS = "workerGroupSpecs"  # of a RayCluster's spec (a RayJob's, a RayService's cluster spec)


def pods_made(subject: Subject, pod: SubjectPod) -> int | None:
    """How many pods the controller makes from one template at once; None when that is not known from the
    object (a DaemonSet's: one per matching node)."""
    spec: dict[str, Any] = subject.obj["spec"] if isinstance(subject.obj.get("spec"), dict) else {}
    if subject.workload is None:
        kind = subject.kind
        if kind in ("Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"):
            return _int(spec.get("replicas"), 1)
        if kind in ("Job", "CronJob"):
            job = spec if kind == "Job" else _at(spec, ("jobTemplate", "spec"))
            job = job if isinstance(job, dict) else {}
            parallel = _int(job.get("parallelism"), 1)
            completions = job.get("completions")
            return min(parallel, completions) if isinstance(completions, int) and completions >= 0 else parallel
        return None
    site = pod.site  # a custom workload's pods always have one
    # Replica specs keep their count beside the template (Kubeflow's replicas, Volcano's tasks, Ray's groups).
    if site is not None and site.path and site.path[-1] == "template":
        holder = _at(subject.obj, site.path[:-1])
        if isinstance(holder, dict):
            # Unset, a Ray worker group makes none (KubeRay's WorkerGroupSpec: "+kubebuilder:default:=0",
            # ray-operator/apis/ray/v1/raycluster_types.go), a Kubeflow replica spec one ("If unspecified,
            # defaults to 1", kubeflow/training-operator V1ReplicaSpec).
            return _int(holder.get("replicas"), 0 if RAY_WORKER_GROUPS in site.path else 1)
    return 1


def _groups(subject: Subject) -> list[tuple[SubjectPod, int, int, int]]:
    """(template, pods made, gpu-mem and gpu-core PodRequests of each) of every template asking for either."""
    from policies.model.pod_usage import pod_requests

    r = subject.names.resources
    groups = []
    for pod in subject.pods:
        if not pod.containers:
            continue
        count = pods_made(subject, pod)
        if count is None:
            return []
        overhead = pod.spec.get("overhead") if isinstance(pod.spec, dict) else None
        overhead = overhead if isinstance(overhead, dict) else None
        mem = pod_requests(pod.containers, overhead, r.gpu_mem)
        core = pod_requests(pod.containers, overhead, r.gpu_core)
        if count and (mem or core):
            groups.append((pod, count, mem, core))
    return groups


def _usage(state: Any) -> Any:
    """What quotas charge per namespace: the state keeps it current pod by pod (ClusterSnapshot.quota_usage);
    a state without it is counted here."""
    found = getattr(state, "quota_usage", None)
    if found is not None:
        return found()
    from policies.model.pod_usage import usage_index

    pods = getattr(state, "pods", None)
    return usage_index(pods() if pods is not None else [])


def _unit(subject: Subject, resource: str) -> str:
    r = subject.names.resources
    return f" {subject.names.memory_unit}" if resource == r.gpu_mem else " %" if resource == r.gpu_core else ""


@rule("GQ005", severity="warn", kinds=WORKLOAD_KINDS_JUDGED, operations=("CREATE",), stateful=True,
      applies=asks_quota_resources, relevance=Relevance(resources=("gpu_mem", "gpu_core")),
      seed=f"{PODS_HELPERS}, {CAPACITY_SCHEDULING}, {KUEUE}",
      title="A workload's pods fit what its namespace's GPU quotas have left",
      doc="A workload is admitted whatever its namespace's quotas have left; its controller then creates the "
          "pods, and what quota refuses or holds back shows only in events. A workload whose pods' GPU memory "
          "or compute passes what a ResourceQuota (requests.<resource>) or an ElasticQuotaTree quota node (max) "
          "of its namespace has left gets a warning naming the quota, what is used, what is left, what the pods "
          "need, and what happens: pods beyond a ResourceQuota are not created, pods beyond an ElasticQuotaTree "
          "max wait, and a workload naming a Kueue LocalQueue (label kueue.x-k8s.io/queue-name) whose ClusterQueue "
          "has less left than it needs waits whole (suspended). Usage is counted as quota counts it: "
          "PodRequests (the larger of the app containers plus sidecars and the peak of the init containers, "
          "plus overhead) of every pod QuotaV1Pod charges "
          "(finished pods and pods terminating past their grace period are not). Pods themselves are left to "
          "the API server's quota admission.")
def pods_fit_the_quota(subject: Subject) -> Iterator[Found]:
    groups = _groups(subject)
    if not groups:
        return
    state = subject.usable_state(SWITCH, f"{subject.label}: whether its namespace's GPU quotas hold its pods")
    from policies.quota.quota_usage import quota_limits

    quota_objects = getattr(state, "quota_objects", None)
    if quota_objects is None:
        return
    quotas = quota_objects()
    if not quotas:
        return
    labels = subject.metadata.get("labels")
    queue = labels.get(QUEUE_LABEL) if isinstance(labels, dict) else None
    limits = quota_limits(subject.namespace, quotas, _usage(state), subject.names, time.time(),
                          queue if isinstance(queue, str) else None)
    r = subject.names.resources
    total_pods = sum(count for _, count, _, _ in groups)
    for limit in limits:
        sizes = [(count, mem if limit.resource == r.gpu_mem else core) for _, count, mem, core in groups]
        need = sum(count * each for count, each in sizes)
        if need <= limit.left:
            continue
        fitting, room = 0, limit.left
        for count, each in sizes:
            for _ in range(count):
                if each > room:
                    break
                room -= each
                fitting += 1
        unit = _unit(subject, limit.resource)
        each_text = " + ".join(f"{count} x {each}" for count, each in sizes)
        said = (f"{subject.label}: {limit.label} has {limit.key} {limit.hard}{unit}, {limit.used} used, "
                f"{limit.left} left; its {total_pods} {'pods need' if total_pods != 1 else 'pod needs'} {need}{unit} "
                f"({each_text})")
        missing = total_pods if limit.mechanism == CLUSTER_QUEUE else total_pods - fitting
        happens = (f"{missing} of {total_pods} pods will not be created" if limit.mechanism == RESOURCE_QUOTA
                   else f"{missing} of {total_pods} pods will wait")
        # An admission warning past 256 characters may be cut (policies/model/warning_text.py): the short form
        # leads with what happens.
        brief = (f"{subject.label}: {happens}: {limit.label} has {limit.left} of {limit.hard}{unit} of {limit.key} "
                 f"left ({limit.used} used); the pods need {need}{unit}")
        if limit.mechanism == RESOURCE_QUOTA:
            yield Found(f"{said}: {happens} (the API server's quota admission refuses them; the controller records "
                        f"FailedCreate events)", brief=brief)
        elif limit.mechanism == CLUSTER_QUEUE:
            yield Found(f"{said}: {happens} (Kueue admits a workload whole: it stays suspended until the "
                        f"ClusterQueue has room)", brief=brief)
        else:
            yield Found(f"{said}: {happens} (Pending) until the quota node's usage falls below its max", brief=brief)
