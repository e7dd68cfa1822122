"""The custom workload samples (tests/data/workloads, each with its origin in its header) and the
mistake each test makes in them: a shared-GPU request in a replica after the first."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from policies.model.resources import Path as FieldPath
from policies.model.workloads import BUILT_IN, WorkloadKind, group_of
from tests.support.helpers import DATA
from tests.support.resource_keys import ASKED, MEM

WORKLOADS = DATA / "workloads"
GPU_RESOURCES = ASKED  # every resource a container asks for (ResourceNames)


@dataclass(frozen=True)
class Case:
    file: str
    # The container the test breaks (a TrainJob's trainer, whose resources are resourcesPerNode): a
    # replica after the first wherever the kind has more than one.
    broken: FieldPath

    @property
    def path(self) -> Path:
        return WORKLOADS / self.file

    def manifest(self) -> dict[str, Any]:
        """A fresh copy of the sample (parsed once per test process)."""
        return copy.deepcopy(_parsed(self.path))

    @property
    def kind(self) -> WorkloadKind:
        obj = self.manifest()
        return next(k for k in BUILT_IN if (k.group, k.kind) == (group_of(obj), obj["kind"]))

    @property
    def resources(self) -> FieldPath:
        """Where the broken container's limits and requests are."""
        return (*self.broken, "resourcesPerNode" if self.file == "trainjob.yaml" else "resources")

    def with_mistake(self) -> dict[str, Any]:
        """The sample with aliyun.com/gpu-mem written as a size (2Gi) in the broken replica."""
        obj = self.manifest()
        node: Any = obj
        for part in self.resources:
            node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
        node.setdefault("limits", {})[MEM] = "2Gi"
        return obj

    def without_gpus(self) -> dict[str, Any]:
        """The sample without any GPU resource."""
        return strip_gpus(self.manifest())


@cache
def _parsed(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=yaml.CSafeLoader)


def strip_gpus(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: strip_gpus(v) for k, v in obj.items() if k not in GPU_RESOURCES}
    if isinstance(obj, list):
        return [strip_gpus(v) for v in obj]
    return copy.deepcopy(obj)


def _t(*parts: str | int) -> FieldPath:
    return parts


CASES = [
    Case("pytorchjob.yaml", _t("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers", 0)),
    Case("tfjob.yaml", _t("spec", "tfReplicaSpecs", "Worker", "template", "spec", "containers", 0)),
    Case("mpijob.yaml", _t("spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers", 0)),
    Case("xgboostjob.yaml", _t("spec", "xgbReplicaSpecs", "Worker", "template", "spec", "containers", 0)),
    Case("paddlejob.yaml", _t("spec", "paddleReplicaSpecs", "Worker", "template", "spec", "containers", 0)),
    Case("jaxjob.yaml", _t("spec", "jaxReplicaSpecs", "Worker", "template", "spec", "containers", 0)),
    Case("trainjob.yaml", _t("spec", "trainer")),
    Case("trainingruntime.yaml", _t("spec", "template", "spec", "replicatedJobs", 2, "template", "spec", "template",
                                    "spec", "containers", 0)),
    Case("clustertrainingruntime.yaml", _t("spec", "template", "spec", "replicatedJobs", 2, "template", "spec",
                                           "template", "spec", "containers", 0)),
    Case("jobset.yaml", _t("spec", "replicatedJobs", 1, "template", "spec", "template", "spec", "containers", 0)),
    Case("leaderworkerset.yaml", _t("spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0)),
    Case("raycluster.yaml", _t("spec", "workerGroupSpecs", 0, "template", "spec", "containers", 0)),
    Case("rayjob.yaml", _t("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template", "spec", "containers", 0)),
    Case("rayservice.yaml", _t("spec", "rayClusterConfig", "workerGroupSpecs", 0, "template", "spec", "containers",
                               0)),
    Case("inferenceservice.yaml", _t("spec", "transformer", "containers", 0)),
    Case("servingruntime.yaml", _t("spec", "containers", 0)),
    Case("clusterservingruntime.yaml", _t("spec", "workerSpec", "containers", 0)),
    Case("workflow.yaml", _t("spec", "templates", 1, "container")),
    Case("workflowtemplate.yaml", _t("spec", "templates", 0, "containerSet", "containers", 1)),
    Case("clusterworkflowtemplate.yaml", _t("spec", "templates", 1, "container")),
    Case("cronworkflow.yaml", _t("spec", "workflowSpec", "templates", 1, "container")),
    Case("volcanojob.yaml", _t("spec", "tasks", 1, "template", "spec", "containers", 0)),
    Case("volcanocronjob.yaml", _t("spec", "jobTemplate", "spec", "tasks", 1, "template", "spec", "containers", 0)),
]
