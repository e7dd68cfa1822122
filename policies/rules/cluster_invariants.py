"""GA001-GA007: invariants of a running cluster, judged by ``gpushare audit`` (policies/audit/audit.py).

They describe what the cluster already holds, so no admission request triggers them (no kinds):
they are registered here so that ``gpushare rules``, SARIF and the config file's ``rules:``
overrides (severity, enabled) treat them like every other rule.
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.model.subject import Subject
from policies.rules.base import Found, rule


def _audit_only(subject: Subject) -> Iterator[Found]:
    return iter(())


def _invariant(id: str, severity: str, seed: str, title: str, doc: str) -> None:
    rule(id, severity=severity, seed=seed, kinds=(), title=title, doc=doc)(_audit_only)  # type: ignore[arg-type]


_invariant("GA001", "deny", "001",
           "a card's assigned gpu-mem does not exceed its size",
           "The pods on a GPU card hold at most the card's memory (and, on core_mem nodes, at most 100 % "
           "compute); more means the scheduler's record and the card disagree and pods will run out of memory.")
_invariant("GA002", "deny", "002",
           "at most 20 pods share one card on cgpu and core_mem nodes",
           "cGPU creates at most 20 instances on one GPU card; a 21st pod on the card cannot start.")
_invariant("GA003", "deny", "000",
           "a node does not run mem-only and core+mem pods together",
           "Pods asking only for aliyun.com/gpu-mem and pods asking for gpu-mem with "
           "aliyun.com/gpu-core.percentage must not share a node.")
_invariant("GA004", "deny", "003",
           "pods run only on nodes whose mode takes them",
           "Shared-GPU pods need a node labelled ack.node.gpu.schedule cgpu, core_mem, share or mps "
           "(core+mem pods: core_mem), topology pods need topology, and shared GPU scheduling needs the "
           "CPU manager policy none.")
_invariant("GA005", "deny", "project choice: a card record that points at no card is a broken record",
           "a pod's recorded card index exists on its node",
           "The card a pod's allocation annotation names (scheduler.framework.gpushare.allocation or "
           "ALIYUN_COM_GPU_MEM_IDX) is below the node's card count; else the record points at no card.")
_invariant("GA006", "warn", "source code: github.com/AliyunContainerService/gpushare-scheduler-extender",
           "bound pods are assigned their card soon after binding",
           "The scheduler marks a bound pod assigned=false with its assume time; the device plugin flips it to "
           "true when the container starts. A pod still false after audit.unassigned_after_seconds was never "
           "picked up (device plugin down, or the pod stuck).")
_invariant("GA007", "warn", "001",
           "GPU pods are scheduled by the configured scheduler",
           "Pods asking for aliyun.com/gpu-mem are scheduled by audit.expected_scheduler (when set); another "
           "scheduler does not know the cards and may over-commit them.")
