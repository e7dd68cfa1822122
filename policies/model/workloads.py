"""Custom resources that hold pod templates: training jobs, Ray, inference services, workflows.

Operators create the pods of a PyTorchJob or a RayCluster, so a mistake in one replica's template
shows only later, pod by pod, in the cluster. The table below says, per kind, where its pod
templates (or pod specs, or containers) are, through maps and lists of replicas; the rules judge
every one of them. Each path was checked against the project's published CRD schema (the release
named in ``source``; the trimmed schemas are vendored under tests/data/workload-crds and every
path is tested against them). Users add their own kinds in the configuration (``workloads.kinds``).
What an object of a kind holds, read through this table, is policies/model/workload_sites.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.model.field_paths import Pattern, parse_pattern, render_pattern
from policies.model.resources import Path, render_path
from policies.model.settings import PolicySettings, WorkloadKindSettings


@dataclass(frozen=True, slots=True)
class Holder:
    """Where containers sit relative to a pod location."""

    field: Pattern
    many: bool  # a list of containers, else one container
    init: bool = False  # init containers (named so in messages)
    resources: bool = False  # the field is itself a ResourceRequirements
    name: str = ""  # the container's name in the pod when the manifest gives none
    # The object stands for a container whose resources are kept in this field instead of
    # ``resources`` (a TrainJob's trainer: env beside resourcesPerNode).
    resources_field: str = ""


@dataclass(frozen=True, slots=True)
class Shape:
    """What a location holds: where its containers are, where its pod-spec fields (nodeSelector,
    affinity, schedulerName) and its pods' labels and annotations are."""

    name: str
    holders: tuple[Holder, ...]
    spec: Pattern | None = None
    meta: Pattern | None = None
    # The only keys a value of this shape has (a pod template: metadata and spec); checked for
    # configured kinds, where a path that holds something else is a configuration error.
    keys: frozenset[str] | None = None


_POD_SPEC_HOLDERS = (Holder(("containers",), True), Holder(("initContainers",), True, init=True))
TEMPLATE = Shape("template", tuple(Holder(("spec", *h.field), h.many, h.init) for h in _POD_SPEC_HOLDERS),
                 spec=("spec",), meta=("metadata",), keys=frozenset({"metadata", "spec"}))
POD_SPEC = Shape("podSpec", _POD_SPEC_HOLDERS, spec=())
CONTAINER = Shape("container", (Holder((), False),))
CONTAINERS = Shape("containers", (Holder((), True),))
RESOURCES = Shape("resources", (Holder((), False, resources=True),))
SHAPES = {s.name: s for s in (TEMPLATE, POD_SPEC, CONTAINER, CONTAINERS, RESOURCES)}

# KServe (serving.kserve.io/v1beta1, pkg/apis/serving/v1beta1): a component inlines a PodSpec and
# its labels/annotations (ComponentExtensionSpec); a predictor adds one container per model format
# (PredictorExtensionSpec inlines corev1.Container), an explainer the ART one. All in one pod.
_KSERVE_FORMATS = ("sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface", "pmml",
                   "lightgbm", "paddle", "model")
# The model format's container is the pod's kserve-container (pkg/constants: InferenceServiceContainerName).
KSERVE_PREDICTOR = Shape("kserve-predictor", (*_POD_SPEC_HOLDERS, *(Holder((f,), False, name="kserve-container")
                                                                    for f in _KSERVE_FORMATS)),
                         spec=(), meta=())
KSERVE_EXPLAINER = Shape("kserve-explainer", (*_POD_SPEC_HOLDERS, Holder(("art",), False)), spec=(), meta=())
# Argo (argoproj.io/v1alpha1 Template): one pod per template, its main container from container,
# script or containerSet, beside init containers and sidecars; pod fields at the template's level.
# The main container is named main (workflow/common: MainContainerName).
# KServe ServingRuntime / ClusterServingRuntime (serving.kserve.io/v1alpha1 ServingRuntimePodSpec): the
# pod fields, labels and annotations inline in spec (and in spec.workerSpec for multi-node runtimes).
# The predictor merges the runtime's container named kserve-container with its own
# (pkg/controller/v1beta1/inferenceservice/utils/utils.go, MergeServingRuntimeAndInferenceServiceSpecs:
# the runtime container is found by that name), so the names in messages are the pod's.
KSERVE_RUNTIME = Shape("kserve-runtime", (Holder(("containers",), True),), spec=(), meta=())  # no init containers
# Kubeflow Trainer (trainer.kubeflow.org/v1alpha1 Trainer): image, command, args and env of the training
# container, named node in the runtime's node job (pkg/constants: Node), and resourcesPerNode, its
# resources. A TrainJob's pods come from its runtime; these fields override the runtime's container.
TRAINER = Shape("trainer", (Holder((), False, name="node", resources_field="resourcesPerNode"),))
# The initializers' env (DatasetInitializer, ModelInitializer) goes to their containers, named
# dataset-initializer and model-initializer (pkg/constants).
DATASET_INITIALIZER = Shape("container", (Holder((), False, name="dataset-initializer"),))
MODEL_INITIALIZER = Shape("container", (Holder((), False, name="model-initializer"),))
# A TrainJob's runtime patch of a pod template (PodTemplatePatch): labels, annotations and containers
# patched by name into the runtime's pods; no pod of its own (no spec read: dry-run shows none).
RUNTIME_PATCH = Shape("runtime-patch", TEMPLATE.holders, spec=None, meta=("metadata",))
ARGO_TEMPLATE = Shape("argo-template", (Holder(("container",), False, name="main"),
                                        Holder(("script",), False, name="main"),
                                        Holder(("containerSet", "containers"), True),
                                        Holder(("initContainers",), True, init=True), Holder(("sidecars",), True)),
                      spec=(), meta=("metadata",))


@dataclass(frozen=True, slots=True)
class Location:
    pattern: Pattern
    shape: Shape

    @property
    def text(self) -> str:
        return render_pattern(self.pattern)


@dataclass(frozen=True, slots=True)
class SchedulerField:
    """Where a kind names the scheduler of the pods it creates, and what its admission sets there when
    it is empty (a pod template's own schedulerName wins)."""

    pattern: Pattern
    default: str = ""


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    group: str
    kind: str
    plural: str
    versions: tuple[str, ...]
    locations: tuple[Location, ...]
    source: str  # the CRD the paths were checked against: repository, path, release
    scheduler: SchedulerField | None = None
    # Pod spec patches written as strings (Argo's podSpecPatch): applied by the controller, unjudgeable here.
    patches: tuple[Pattern, ...] = ()
    namespaced: bool = True
    # For kinds from the configuration: where (workloads.kinds[N]); a path there that holds something
    # else than it says is a configuration error, not a malformed object.
    configured: str = ""

    @property
    def name(self) -> str:
        """kind.group, as kubectl names a resource type: PyTorchJob.kubeflow.org."""
        return f"{self.kind}.{self.group}"


def _kind(group: str, kind: str, plural: str, versions: tuple[str, ...], source: str,
          locations: tuple[tuple[str, Shape], ...], **more: Any) -> WorkloadKind:
    return WorkloadKind(group, kind, plural, versions, tuple(Location(parse_pattern(p), s) for p, s in locations),
                        source, **more)


def _under(prefix: str, locations: tuple[tuple[str, Shape], ...]) -> tuple[tuple[str, Shape], ...]:
    return tuple((f"{prefix}.{p}", s) for p, s in locations)


_KUBEFLOW_V1 = "kubeflow/trainer manifests/base/crds/kubeflow.org_{}.yaml, release v1.9.4"
_TRAINER = "kubeflow/trainer manifests/base/crds/trainer.kubeflow.org_{}.yaml, release v2.3.0"
_RAY = "ray-project/kuberay ray-operator/config/crd/bases/ray.io_{}.yaml, release v1.7.0"
_ARGO = "argoproj/argo-workflows manifests/base/crds/full/argoproj.io_{}.yaml, release v4.1.2"
_VOLCANO = "volcano-sh/volcano config/crd/volcano/bases/batch.volcano.sh_{}.yaml, release v1.15.1"

# A (Cluster)TrainingRuntime holds a JobSet template.
_RUNTIME = (("spec.template.spec.replicatedJobs[].template.spec.template", TEMPLATE),)
# A RayClusterSpec (a RayCluster's spec, a RayJob's rayClusterSpec, a RayService's rayClusterConfig).
_RAY_CLUSTER = (("headGroupSpec.template", TEMPLATE), ("workerGroupSpecs[].template", TEMPLATE),
                # KubeRay's own sidecars (the autoscaler in the head pod, the history collector)
                ("autoscalerOptions", CONTAINER), ("historyServerOptions.collectorOptions", CONTAINER))
# A WorkflowSpec (a Workflow's or (Cluster)WorkflowTemplate's spec, a CronWorkflow's workflowSpec).
_ARGO_WORKFLOW = (("templates[]", ARGO_TEMPLATE), ("templateDefaults", ARGO_TEMPLATE),
                  ("executorPlugins[].spec.sidecar.container", CONTAINER))
_ARGO_PATCHES = ("podSpecPatch", "templates[].podSpecPatch", "templateDefaults.podSpecPatch")
_KSERVE = (("spec.predictor", KSERVE_PREDICTOR), ("spec.predictor.workerSpec", POD_SPEC),
           ("spec.transformer", POD_SPEC), ("spec.explainer", KSERVE_EXPLAINER),
           ("spec.canary[].predictor", KSERVE_PREDICTOR), ("spec.canary[].predictor.workerSpec", POD_SPEC))
# Volcano's job controller gives a task's pods the Job's schedulerName when their template names none
# (pkg/controllers/job/job_controller_util.go), and its admission webhook sets the Job's to its own
# name, volcano by default, when empty (pkg/webhooks/admission/jobs/mutate/mutate_job.go,
# cmd/webhook-manager/app/options/options.go), release v1.15.1.
_VOLCANO_SCHEDULER = "volcano"
# Argo: a template's schedulerName, else the workflow's (workflow/controller/workflowpod.go), no default.


def _argo(kind: str, plural: str, spec: str = "spec", **more: Any) -> WorkloadKind:
    return _kind("argoproj.io", kind, plural, ("v1alpha1",), _ARGO.format(plural), _under(spec, _ARGO_WORKFLOW),
                 scheduler=SchedulerField(parse_pattern(f"{spec}.schedulerName")),
                 patches=tuple(parse_pattern(f"{spec}.{p}") for p in _ARGO_PATCHES), **more)


BUILT_IN: tuple[WorkloadKind, ...] = (
    *(_kind("kubeflow.org", kind, f"{short.lower()}jobs", ("v1",), _KUBEFLOW_V1.format(f"{short.lower()}jobs"),
            ((f"spec.{field}ReplicaSpecs.*.template", TEMPLATE),))
      for kind, short, field in (("PyTorchJob", "PyTorch", "pytorch"), ("TFJob", "TF", "tf"),
                                 ("XGBoostJob", "XGBoost", "xgb"), ("PaddleJob", "Paddle", "paddle"),
                                 ("JAXJob", "JAX", "jax"))),
    # MPIJob v1 (Training Operator) and v2beta1 (kubeflow/mpi-operator manifests/base/kubeflow.org_mpijobs.yaml,
    # release v0.8.0) keep their replicas at the same path.
    _kind("kubeflow.org", "MPIJob", "mpijobs", ("v1", "v2beta1"),
          _KUBEFLOW_V1.format("mpijobs") + "; kubeflow/mpi-operator manifests/base/kubeflow.org_mpijobs.yaml, "
                                           "release v0.8.0",
          (("spec.mpiReplicaSpecs.*.template", TEMPLATE),)),
    # A TrainJob's pods come from its (Cluster)TrainingRuntime; it sets their trainer container's env and
    # GPU requests per node, its initializers' env, and patches the runtime's pod templates (a runtime
    # patch's containers carry env, no resources: pkg/apis/trainer/v1alpha1 ContainerPatch).
    _kind("trainer.kubeflow.org", "TrainJob", "trainjobs", ("v1alpha1",), _TRAINER.format("trainjobs"),
          (("spec.trainer", TRAINER), ("spec.initializer.dataset", DATASET_INITIALIZER),
           ("spec.initializer.model", MODEL_INITIALIZER),
           ("spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[].template.spec.template",
            RUNTIME_PATCH))),
    _kind("trainer.kubeflow.org", "TrainingRuntime", "trainingruntimes", ("v1alpha1",),
          _TRAINER.format("trainingruntimes"), _RUNTIME),
    _kind("trainer.kubeflow.org", "ClusterTrainingRuntime", "clustertrainingruntimes", ("v1alpha1",),
          _TRAINER.format("clustertrainingruntimes"), _RUNTIME, namespaced=False),
    _kind("jobset.x-k8s.io", "JobSet", "jobsets", ("v1alpha2",),
          "kubernetes-sigs/jobset config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml, release v0.12.0",
          (("spec.replicatedJobs[].template.spec.template", TEMPLATE),)),
    _kind("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", ("v1",),
          "kubernetes-sigs/lws config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml, release v0.10.0",
          (("spec.leaderWorkerTemplate.leaderTemplate", TEMPLATE),
           ("spec.leaderWorkerTemplate.workerTemplate", TEMPLATE))),
    _kind("ray.io", "RayCluster", "rayclusters", ("v1", "v1alpha1"), _RAY.format("rayclusters"),
          _under("spec", _RAY_CLUSTER)),
    _kind("ray.io", "RayJob", "rayjobs", ("v1", "v1alpha1"), _RAY.format("rayjobs"),
          (*_under("spec.rayClusterSpec", _RAY_CLUSTER), ("spec.submitterPodTemplate", TEMPLATE))),
    _kind("ray.io", "RayService", "rayservices", ("v1", "v1alpha1"), _RAY.format("rayservices"),
          _under("spec.rayClusterConfig", _RAY_CLUSTER)),
    _kind("serving.kserve.io", "InferenceService", "inferenceservices", ("v1beta1",),
          "kserve/kserve config/crd/full/serving.kserve.io_inferenceservices.yaml, release v0.20.0", _KSERVE),
    *(_kind("serving.kserve.io", kind, f"{kind.lower()}s", ("v1alpha1",),
            f"kserve/kserve config/crd/full/serving.kserve.io_{kind.lower()}s.yaml, release v0.20.0",
            (("spec", KSERVE_RUNTIME), ("spec.workerSpec", KSERVE_RUNTIME)), namespaced=kind == "ServingRuntime")
      for kind in ("ServingRuntime", "ClusterServingRuntime")),
    _argo("Workflow", "workflows"),
    _argo("WorkflowTemplate", "workflowtemplates"),
    _argo("ClusterWorkflowTemplate", "clusterworkflowtemplates", namespaced=False),
    _argo("CronWorkflow", "cronworkflows", "spec.workflowSpec"),
    _kind("batch.volcano.sh", "Job", "jobs", ("v1alpha1",), _VOLCANO.format("jobs"),
          (("spec.tasks[].template", TEMPLATE),),
          scheduler=SchedulerField(parse_pattern("spec.schedulerName"), _VOLCANO_SCHEDULER)),
    _kind("batch.volcano.sh", "CronJob", "cronjobs", ("v1alpha1",), _VOLCANO.format("cronjobs"),
          (("spec.jobTemplate.spec.tasks[].template", TEMPLATE),),
          scheduler=SchedulerField(parse_pattern("spec.jobTemplate.spec.schedulerName"), _VOLCANO_SCHEDULER)),
)


# -- a configured path that holds something else ------------------------------------------------------

class WorkloadConfigError(ValueError):
    """A configured path holds something else than the configuration says (not a malformed object:
    the API server validated it against its CRD)."""

    def __init__(self, kind: WorkloadKind, location: Location, path: Path, message: str) -> None:
        super().__init__(f"configuration {kind.configured} ({kind.name}) path {location.text} "
                         f"(holds: {location.shape.name}): {render_path(path) or '(the object)'} {message}; "
                         f"fix the path or what it holds")
        self.path = path


# -- the table as configured ---------------------------------------------------------------------------

class WorkloadTable:
    """The built-in kinds and the configured ones (a configured kind replaces a built-in one)."""

    def __init__(self, configured: tuple[WorkloadKindSettings, ...] = ()) -> None:
        kinds = {(k.group, k.kind): k for k in BUILT_IN}
        for index, entry in enumerate(configured):
            kinds[(entry.group, entry.kind)] = WorkloadKind(
                entry.group, entry.kind, entry.plural or f"{entry.kind.lower()}s", entry.versions,
                tuple(Location(parse_pattern(p.path), SHAPES[p.holds]) for p in entry.paths),
                "configuration", namespaced=entry.namespaced, configured=f"workloads.kinds[{index}]")
        self._kinds = kinds

    def lookup(self, group: str, kind: str) -> WorkloadKind | None:
        return self._kinds.get((group, kind)) if group else None

    def kinds(self) -> list[WorkloadKind]:
        return list(self._kinds.values())


_TABLES: dict[int, tuple[object, WorkloadTable]] = {}


def workload_table(settings: PolicySettings) -> WorkloadTable:
    """The table for ``settings`` (kept per settings section: settings are frozen)."""
    section = settings.workloads
    held = _TABLES.get(id(section))
    if held is None or held[0] is not section:
        if len(_TABLES) >= 8:
            _TABLES.clear()
        held = _TABLES[id(section)] = (section, WorkloadTable(section.kinds))
    return held[1]


def group_of(obj: dict[str, Any]) -> str:
    """The API group an object's apiVersion names ("" for the core group or none)."""
    api_version = obj.get("apiVersion")
    return api_version.rpartition("/")[0] if isinstance(api_version, str) else ""


