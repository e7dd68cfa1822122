"""GS010-GS011: what a pod sets in the environment variables the GPU-sharing device plugin and cGPU own.

- GS010 (deny): a pod does not forge what the device plugin sets. The open-source device plugin
  (AliyunContainerService/gpushare-device-plugin, pkg/gpu/nvidia/allocate.go) sets
  NVIDIA_VISIBLE_DEVICES, ALIYUN_COM_GPU_MEM_IDX, _POD, _CONTAINER and _DEV, and with --mps the
  CUDA_MPS_* variables (pkg/gpu/nvidia/const.go names them all); cGPU sizes a container's memory from
  _DEV and _CONTAINER (ACK "Configure GPU sharing without GPU memory isolation"), picks its cards
  from ALIYUN_COM_GPU_VISIBLE_DEVICES (Elastic GPU Service "Install and use cGPU by using Docker") and
  weights its compute by ALIYUN_COM_GPU_SCHD_WEIGHT (ACK "Configure Shared GPU Scheduling cGPU
  Computing Power Scheduling Policy"). A container's own value comes after the device plugin's and
  wins, so it may not set them; ALIYUN_COM_GPU_MEM_CONTAINER equal to what GM003 writes passes (a
  validating webhook sees the mutated pod). NVIDIA_VISIBLE_DEVICES is judged by value in a container
  that uses GPUs. envFrom there is warned (``isolation.env_from: deny`` refuses it).
- GS011 (warn): lifting isolation is an admin's decision. CGPU_DISABLE=true is ACK's own way to switch
  memory isolation off for one container ("Disable the memory isolation capability of cGPU"), and
  GPU-free containers of the NVIDIA device plugin and monitoring DaemonSets set
  NVIDIA_VISIBLE_DEVICES=all; so both warn, and a cluster that wants them only where admins grant
  them sets GS011 to deny and grants those namespaces (exemptions.grants).

The reading and the judging are in policies/model/isolation.py, shared with the cluster state's records
(the audit judges running pods alike); docs/isolation.md lists every variable with its source.
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.model.isolation import (
    EPHEMERAL_SUBRESOURCE,
    EnvProblem,
    added_ephemeral_envs,
    container_envs,
    envs_of,
    service_links,
)
from policies.model.isolation_findings import env_problems, may_run_on_mps
from policies.model.settings import ResourceNames
from policies.model.subject import Subject
from policies.rules.base import Found, rule
from policies.rules.pod_resources import POD_KINDS
from policies.rules.relevance import Relevance

_MEMO = "isolation"
GPU_RESOURCES = ResourceNames.asked_fields()
# A container that sets a judged name, or takes envFrom beside a GPU resource (policies/rules/relevance.py).
SETS_ISOLATION_ENV = Relevance(env_names=("device_plugin", "mps", "visible_devices", "disable_isolation"),
                               env_from=GPU_RESOURCES)
DEVICE_PLUGIN = "source code: github.com/AliyunContainerService/gpushare-device-plugin"
CGPU_DOCS = ('ACK documentation: "Configure Shared GPU Scheduling cGPU Computing Power Scheduling Policy", '
             'Elastic GPU Service documentation: "Install and use cGPU by using Docker"')
NVIDIA_TOOLKIT = 'NVIDIA Container Toolkit documentation: "Specialized Configurations with Docker"'
DISABLE_PAGE = 'ACK documentation: "Disable the memory isolation capability of cGPU"'


def problems(subject: Subject) -> list[EnvProblem]:
    """What the pods the object makes set that GS010 and GS011 report, worked out once for both."""
    memo = subject.memo.get(_MEMO)
    if memo is not None:
        return memo  # type: ignore[return-value]
    names = subject.names
    if subject.sub_resource == EPHEMERAL_SUBRESOURCE:  # kubectl debug: the ephemeral containers it adds
        spec, base = subject.pod_spec
        pods = [(added_ephemeral_envs(spec, subject.old, base, names), subject.containers, subject.pod_labels, spec)]
    elif subject.workload is None:
        spec, base = subject.pod_spec
        pods = [(container_envs(spec, base, names), subject.containers, subject.pod_labels, spec)]
    else:  # a custom workload: each pod it makes, its containers wherever they are kept
        pods = [(envs_of(((c.group, c.index, c.container, c.path, c.name) for c in pod.site.containers
                          if c.group != "resources"), names, service_links(pod.spec)), pod.containers, pod.labels,
                 pod.spec)
                for pod in subject.pods if pod.site is not None]
    found: list[EnvProblem] = []
    for containers, requests, labels, spec in pods:
        if containers:
            found.extend(env_problems(containers, requests, labels, may_run_on_mps(spec, names), names))
    if subject.admission:  # what the webhooks are never sent, they do not judge either
        found = [p for p in found if not p.offline]
    subject.memo[_MEMO] = found
    return found


def sets_isolation_env(subject: Subject) -> bool:
    """Whether any container sets something GS010 or GS011 judges (their family test)."""
    return bool(problems(subject))


def _found(subject: Subject, problem: EnvProblem, advisory: bool = False) -> Found:
    container = problem.container
    path = container.path
    path = (*path, "env", problem.entry.index) if problem.entry is not None else (*path, "envFrom")
    return Found(f"{subject.naming(container.group, container.name, container.path)}: {problem.text}", path,
                 advisory or problem.advisory)


@rule("GS010", severity="deny", seed=f"004, {DEVICE_PLUGIN}, {CGPU_DOCS}, {NVIDIA_TOOLKIT}", kinds=POD_KINDS,
      applies=sets_isolation_env, relevance=SETS_ISOLATION_ENV, subresources=(EPHEMERAL_SUBRESOURCE,),
      title="Pods do not set what the GPU-sharing device plugin sets",
      doc="A container may not set ALIYUN_COM_GPU_MEM_DEV, ALIYUN_COM_GPU_MEM_CONTAINER (unless it equals "
          "what GM003 writes), ALIYUN_COM_GPU_MEM_IDX, ALIYUN_COM_GPU_MEM_POD, ALIYUN_COM_GPU_VISIBLE_DEVICES, "
          "ALIYUN_COM_GPU_SCHD_WEIGHT (names.env.device_plugin), nor, asking for gpu-mem where it may run on "
          "mps nodes, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PIPE_DIRECTORY: its own value overrides "
          "the device plugin's. NVIDIA_VISIBLE_DEVICES exposing GPUs (all, indices, UUIDs; a valueFrom) is "
          "refused in a container that uses GPUs; none, void and empty pass. envFrom in such a container is "
          "warned (isolation.env_from: deny refuses it). Values are judged as the kubelet expands $(VAR) in "
          "them; ephemeral containers (kubectl debug) are judged as the ephemeralcontainers subresource adds "
          "them.")
def device_plugin_values(subject: Subject) -> Iterator[Found]:
    advisory = subject.settings is None or subject.settings.isolation.env_from == "warn"
    for problem in problems(subject):
        if not problem.lifts:
            yield _found(subject, problem, advisory and problem.entry is None)


@rule("GS011", severity="warn", seed=f"{DISABLE_PAGE}, {NVIDIA_TOOLKIT}", kinds=POD_KINDS,
      applies=sets_isolation_env, relevance=SETS_ISOLATION_ENV, subresources=(EPHEMERAL_SUBRESOURCE,),
      title="Lifting GPU isolation is an admin's decision",
      doc="CGPU_DISABLE=true (or 1, or a valueFrom) in a container asking for gpu-mem switches cGPU's memory "
          "isolation off for it; NVIDIA_VISIBLE_DEVICES exposing GPUs in a container that requests none gives "
          "it the node's GPUs outside any accounting. Warned by default (ACK documents the first, and the "
          "NVIDIA device plugin and monitoring DaemonSets need the second); rules: {GS011: {severity: deny}} "
          "refuses both except where an admin grants them (exemptions.grants, or the annotation where "
          "allowed). A CGPU_DISABLE value cGPU does not document (neither true, 1, false nor 0) is warned, and "
          "check and the audit warn of envFrom in a GPU-free container (never sent to the webhooks).")
def isolation_lifted(subject: Subject) -> Iterator[Found]:
    for problem in problems(subject):
        if problem.lifts:
            yield _found(subject, problem)
