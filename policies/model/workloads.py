"""Custom resources that hold pod templates: training jobs, Ray, inference services, workflows.

Operators create the pods of a PyTorchJob or a RayCluster, so a mistake in one replica's template
shows only later, pod by pod, in the cluster. The table below says, per kind, where its pod
templates (or pod specs, or containers) are, through maps and lists of replicas; the rules judge
every one of them. Each path was checked against the project's published CRD schema (the release
named in ``source``; the trimmed schemas are vendored under tests/data/workload-crds and every
path is tested against them). Users add their own kinds in the configuration (``workloads.kinds``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from policies.model.field_paths import EVERY_ITEM, EVERY_VALUE, Pattern, parse_pattern, render_pattern
from policies.model.resources import ContainerRequest, Path, ShapeError, read_values, render_path, watched_resources
from policies.model.settings import Names, PolicySettings, WorkloadKindSettings


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


# -- what an object holds -----------------------------------------------------------------------------

@dataclass(slots=True)
class ContainerSite:
    """One container of a workload's pod (or the ResourceRequirements standing for one)."""

    group: str  # "containers", "initContainers", or "resources" (a ResourceRequirements)
    index: int
    path: Path
    container: dict[str, Any]
    name: str
    resources_path: Path  # where its resources map is


@dataclass(slots=True)
class PodSite:
    """One pod template (or pod spec, or container set) of a workload, at a concrete path."""

    path: Path
    location: Location
    spec: dict[str, Any] | None
    spec_path: Path
    meta: dict[str, Any] | None
    containers: list[ContainerSite] = field(default_factory=list)


class WorkloadConfigError(ValueError):
    """A configured path holds something else than the configuration says (not a malformed object:
    the API server validated it against its CRD)."""

    def __init__(self, kind: WorkloadKind, location: Location, path: Path, message: str) -> None:
        super().__init__(f"configuration {kind.configured} ({kind.name}) path {location.text} "
                         f"(holds: {location.shape.name}): {render_path(path) or '(the object)'} {message}; "
                         f"fix the path or what it holds")
        self.path = path


def _type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


class _Reader:
    """Walks one location of one kind. Strict (the engine): a value of the wrong type is a ShapeError,
    or for a configured kind a WorkloadConfigError. Lenient (what the webhooks' matchConditions see):
    it holds nothing."""

    def __init__(self, kind: WorkloadKind, location: Location, strict: bool = True) -> None:
        self.kind, self.location, self.strict = kind, location, strict

    def fits(self, path: Path, value: Any, wanted: type, what: str) -> bool:
        """Whether ``value`` is a ``wanted``; if not, strict readers raise."""
        if isinstance(value, wanted):
            return True
        if not self.strict:
            return False
        if self.kind.configured:
            raise WorkloadConfigError(self.kind, self.location, path, f"is {_type(value)}, not {what}")
        raise ShapeError(path, f"must be {what}, got {type(value).__name__}")

    def expand(self, node: Any, pattern: Pattern, path: Path) -> Iterator[tuple[Path, Any]]:
        """Every value the pattern reaches in ``node`` (a missing field reaches nothing)."""
        if not pattern:
            yield path, node
            return
        part, rest = pattern[0], pattern[1:]
        if part == EVERY_ITEM:
            if self.fits(path, node, list, "a list"):
                for index, item in enumerate(node):
                    if item is not None:
                        yield from self.expand(item, rest, (*path, index))
        elif not self.fits(path, node, dict, "an object"):
            return
        elif part == EVERY_VALUE:
            for key, value in node.items():
                if value is not None:
                    yield from self.expand(value, rest, (*path, str(key)))
        elif node.get(part) is not None:
            yield from self.expand(node[part], rest, (*path, part))

    def one(self, node: dict[str, Any], rel: Pattern, path: Path) -> tuple[dict[str, Any] | None, Path]:
        for at, value in self.expand(node, rel, path):
            return (value if self.fits(at, value, dict, "an object") else None), at
        return None, (*path, *rel)

    def pod(self, node: Any, path: Path) -> PodSite:
        shape = self.location.shape
        what = "a pod template (metadata and spec)" if shape is TEMPLATE else f"a {shape.name}"
        if not self.fits(path, node, dict, what):
            return PodSite(path, self.location, None, path, None)
        if self.strict and self.kind.configured and shape.keys is not None and not set(node) <= shape.keys:
            extra = ", ".join(sorted(set(node) - shape.keys)[:3])
            raise WorkloadConfigError(self.kind, self.location, path, f"has {extra}, so it is not {what}")
        spec, spec_path = self.one(node, shape.spec, path) if shape.spec is not None else (None, path)
        meta = self.one(node, shape.meta, path)[0] if shape.meta is not None else None
        site = PodSite(path, self.location, spec, spec_path, meta)
        for holder in shape.holders:
            for at, value in self.expand(node, holder.field, path):
                self._containers(holder, at, value, site.containers)
        return site

    def _containers(self, holder: Holder, at: Path, value: Any, out: list[ContainerSite]) -> None:
        group = "resources" if holder.resources else "initContainers" if holder.init else "containers"
        if holder.many and not self.fits(at, value, list, "a list of containers"):
            return
        for index, container in enumerate(value) if holder.many else ((0, value),):
            where = (*at, index) if holder.many else at
            if not self.fits(where, container, dict, "an object"):
                continue
            if holder.resources:
                out.append(ContainerSite(group, 0, at, {"resources": container}, str(at[-1]), at))
                continue
            if holder.resources_field:  # env and the like as written, resources from their own field
                view = {k: v for k, v in container.items() if k != "resources"}
                if container.get(holder.resources_field) is not None:
                    view["resources"] = container[holder.resources_field]
                out.append(ContainerSite(group, 0, at, view, holder.name, (*at, holder.resources_field)))
                continue
            name = container.get("name")
            label = str(name) if name is not None else holder.name or (
                f"{at[-1]}[{index}]" if holder.many else str(at[-1]))
            out.append(ContainerSite(group, index, where, container, label, (*where, "resources")))


def pod_sites(kind: WorkloadKind, obj: dict[str, Any], strict: bool = True) -> list[PodSite]:
    """Every pod location of ``obj`` with its containers, in table order. Strict: ShapeError for a
    malformed object, WorkloadConfigError where a configured path holds something else; lenient:
    what does not have the expected shape holds nothing."""
    out: list[PodSite] = []
    for location in kind.locations:
        reader = _Reader(kind, location, strict)
        for path, node in reader.expand(obj, location.pattern, ()):
            out.append(reader.pod(node, path))
    return out


def patch_strings(kind: WorkloadKind, obj: dict[str, Any], strict: bool = True) -> list[tuple[Path, str]]:
    """The pod spec patches the object carries as strings, with their paths."""
    found: list[tuple[Path, str]] = []
    for pattern in kind.patches:
        reader = _Reader(kind, Location(pattern, CONTAINER), strict)
        found.extend((p, v) for p, v in reader.expand(obj, pattern, ()) if isinstance(v, str))
    return found


def workload_scheduler(kind: WorkloadKind, obj: dict[str, Any], pod: PodSite) -> tuple[str, str, Path] | None:
    """The scheduler the operator gives this pod from the workload, in words where that comes from (the
    field, or the kind's default), and the field's path; None when the pod's own template names one
    (its own choice) or the kind names none."""
    own = pod.spec.get("schedulerName") if pod.spec is not None else None
    field_ = kind.scheduler
    if field_ is None or (isinstance(own, str) and own):
        return None
    for path, value in _Reader(kind, Location(field_.pattern, CONTAINER)).expand(obj, field_.pattern, ()):
        if isinstance(value, str) and value:
            return value, render_path(path), path
    if field_.default:
        return field_.default, f"the default of {render_pattern(field_.pattern)} in a {kind.name}", pod.spec_path
    return None


def site_requests(sites: list[ContainerSite], names: Names) -> list[ContainerRequest]:
    """The GPU requests of every container of a workload's pod that asks for any GPU resource."""
    watched = watched_resources(names)
    out: list[ContainerRequest] = []
    for site in sites:
        resources = site.container.get("resources")
        if resources is None:
            continue
        if not isinstance(resources, dict):
            raise ShapeError(site.resources_path, f"must be an object, got {type(resources).__name__}")
        limits = read_values(resources, "limits", site.resources_path, watched)
        requests = read_values(resources, "requests", site.resources_path, watched)
        if limits or requests:
            sidecar = site.group == "initContainers" and site.container.get("restartPolicy") == "Always"
            out.append(ContainerRequest(site.name, site.group, site.index, site.path, limits, requests, sidecar))
    return out


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


def pod_locations(kind: WorkloadKind, obj: dict[str, Any]) -> Iterator[tuple[dict[str, Any] | None, int]]:
    """For each pod location of ``obj`` (leniently: what has another shape holds nothing), its pod
    spec (where nodeSelector and affinity are; None when the location has none) and how many
    containers it holds; for counting an object's size before judging it (policies/admission/budget.py)."""
    for location in kind.locations:
        reader = _Reader(kind, location, strict=False)
        shape = location.shape
        for _, node in reader.expand(obj, location.pattern, ()):
            if not isinstance(node, dict) and not (shape.holders and shape.holders[0].many):
                yield None, 0
                continue
            spec = reader.one(node, shape.spec, ())[0] if shape.spec is not None and isinstance(node, dict) else None
            containers = 0
            for holder in shape.holders:
                for _, value in reader.expand(node, holder.field, ()):
                    containers += (len(value) if isinstance(value, list) else 0) if holder.many else 1
            yield spec, containers
