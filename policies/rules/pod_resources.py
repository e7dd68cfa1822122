"""GS001-GS007: stateless checks of shared-GPU requests in pods and workload templates."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import cast

from policies.model.gpu_memory import memory_problem
from policies.model.near_miss import NearMiss, near_misses, near_misses_in
from policies.model.resources import (
    CUSTOM_WORKLOADS,
    POD_SPEC_PATHS,
    ContainerRequest,
    ResourceValue,
    cards_per_container,
)
from policies.model.settings import Names, NearMissSettings, ResourceNames
from policies.model.subject import Subject
from policies.rules.base import Found, rule
from policies.rules.relevance import Relevance

# What sends an object to the webhook for each family (policies/rules/relevance.py).
NAMES_GPU_CORE = Relevance(resources=("gpu_core",))
NAMES_SHARED_GPU = Relevance(resources=("gpu_mem", "gpu_core"))

# Kubernetes' own kinds with a pod spec, and the custom workloads (training jobs, Ray, inference services).
POD_KINDS = (*POD_SPEC_PATHS, CUSTOM_WORKLOADS)

CORE_STEP, CORE_MIN, CORE_MAX = 5, 5, 100

# Extended resources: "request and limit must be equal if both are present" (Kubernetes docs).
K8S_RESOURCES = 'Kubernetes documentation: "Resource Management for Pods and Containers"'


def _raw(value: ResourceValue) -> str:
    return str(value.raw)


def _judged_value(container: ContainerRequest, resource: str) -> ResourceValue | None:
    """The value a value rule judges: the limit, else the request. A request beside a limit is
    GS004's (it must equal the limit), so a rule never suggests a request GS004 then contradicts."""
    return container.limits.get(resource) or container.requests.get(resource)


# Family tests: a rule whose test fails would find nothing, so the engine skips it. Most pods
# in a cluster ask for no GPU at all, and most GPU pods ask for memory only.
def requests_gpu_resources(subject: Subject) -> bool:
    """Whether any container asks for a GPU resource (GS004 judges how it is asked)."""
    return bool(subject.containers)


def asks_gpu_core(subject: Subject) -> bool:
    """Whether any container names the compute percentage (GS001, GS002, GS005 judge it)."""
    return subject.names.resources.gpu_core in subject.asked


def asks_gpu_memory(subject: Subject) -> bool:
    """Whether any container names GPU memory (GS003 judges its value)."""
    return subject.names.resources.gpu_mem in subject.asked


def asks_whole_gpus(subject: Subject) -> bool:
    """Whether any container names whole GPUs, exclusive or topology-aware (GS006 judges the mix)."""
    r = subject.names.resources
    return r.gpu_exclusive in subject.asked or r.gpu_topology in subject.asked


def core_suggestion(value: Decimal | None) -> str:
    """The nearest accepted compute percentages: "30 or 35", "5", "100"."""
    if value is None:
        return f"use an integer multiple of {CORE_STEP} from {CORE_MIN} to {CORE_MAX}, e.g. 30"
    if value > CORE_MAX or value < CORE_MIN:  # no division: 1e29 // 5 is past Decimal's precision
        return f"use {CORE_MAX if value > CORE_MAX else CORE_MIN}"
    lower = (value // CORE_STEP) * CORE_STEP
    candidates = sorted({min(max(int(c), CORE_MIN), CORE_MAX) for c in (lower, lower + CORE_STEP)})
    return "use " + " or ".join(str(c) for c in candidates)


def core_accepted(value: Decimal | None) -> bool:
    return (value is not None and CORE_MIN <= value <= CORE_MAX
            and value == value.to_integral_value() and int(value) % CORE_STEP == 0)


@rule("GS001", severity="deny", seed="000", kinds=POD_KINDS, applies=asks_gpu_core, relevance=NAMES_GPU_CORE,
      title="GPU core percentage is a multiple of 5 in 5..100",
      doc="aliyun.com/gpu-core.percentage must be an integer multiple of 5 from 5 to 100; "
          "any other value makes the job unschedulable.")
def core_percentage_step(subject: Subject) -> Iterator[Found]:
    core = subject.names.resources.gpu_core
    for container in subject.containers:
        value = _judged_value(container, core)
        if value is None or core_accepted(value.quantity):
            continue
        why = (f"is not a quantity ({value.error})" if value.quantity is None
               else f"is not a multiple of {CORE_STEP} in {CORE_MIN}..{CORE_MAX}")
        yield Found(f"{subject.where(container)}: {core}={_raw(value)} {why}; "
                    f"{core_suggestion(value.quantity)}", value.path)


@rule("GS002", severity="deny", seed="000", kinds=POD_KINDS, applies=asks_gpu_core, relevance=NAMES_GPU_CORE,
      title="GPU core percentage comes with GPU memory",
      doc="A container that requests aliyun.com/gpu-core.percentage must also request "
          "aliyun.com/gpu-mem: compute is allocated on the card its memory is placed on.")
def core_needs_memory(subject: Subject) -> Iterator[Found]:
    core, mem = subject.names.resources.gpu_core, subject.names.resources.gpu_mem
    for container in subject.containers:
        if container.has(core) and not container.has(mem):
            value = container.value(core)
            assert value is not None
            yield Found(f"{subject.where(container)}: {core}={_raw(value)} is requested without {mem}; "
                        f"add limits.{mem} with a whole number of {subject.names.memory_unit} (1 or more)", value.path)


@rule("GS003", severity="deny", seed="000", kinds=POD_KINDS, applies=asks_gpu_memory,
      relevance=Relevance(resources=("gpu_mem",)),
      title="GPU memory is a positive whole number of GiB",
      doc="aliyun.com/gpu-mem counts GiB (MiB with names.memory_unit: MiB) as a whole number from 1 to "
          "the largest card (1024 GiB), times the cards a pod labelled aliyun.com/gpu-count spreads it over "
          "(N over M cards is N/M on each). It is judged by value, as the API server and the scheduler "
          "read it: 2000m is 2 and passes; 2Gi is two billion GiB and is refused (use 2); 5.5 is "
          "refused (use 6: a memory request is never rounded down); 16276 looks like MiB.")
def memory_whole_gib(subject: Subject) -> Iterator[Found]:
    mem = subject.names.resources.gpu_mem
    for cards, containers in _cards_and_containers(subject):
        for container in containers:
            value = _judged_value(container, mem)
            problem = memory_problem(value, subject.names, cards) if value is not None else None
            if value is not None and problem is not None:
                yield Found(f"{subject.where(container)}: {mem}={_raw(value)} {problem.why}; {problem.fix}",
                            value.path)


def _cards_and_containers(subject: Subject) -> Iterable[tuple[int, list[ContainerRequest]]]:
    """Per pod the object makes, the cards its multi-GPU label spreads each container over (1 without
    it: ACK "Use cGPU to achieve GPU sharing based on multiple GPUs") and its GPU containers."""
    names = subject.names
    if subject.workload is None:
        return ((cards_per_container(subject.pod_labels, names) or 1, subject.containers),)
    return ((cards_per_container(pod.labels, names) or 1, pod.containers) for pod in subject.pods)


def accepted_form(value: ResourceValue, resource: str, names: Names, cards: int = 1) -> str:
    """How to write ``value`` so that its value rule accepts it: as written when it does, else
    what that rule suggests (GS004 names this, so its fix never contradicts GS001's or GS003's)."""
    r = names.resources
    if resource == r.gpu_mem:
        problem = memory_problem(value, names, cards)
        if problem is not None:
            return problem.accepted or problem.fix.removeprefix("use ")
    elif resource == r.gpu_core and not core_accepted(value.quantity):
        return core_suggestion(value.quantity).removeprefix("use ")
    return _raw(value)


@rule("GS004", severity="deny", seed=K8S_RESOURCES, kinds=POD_KINDS, applies=requests_gpu_resources,
      relevance=Relevance(custom_requests=ResourceNames.asked_fields()),
      title="GPU requests equal limits",
      doc="Kubernetes' own rule for extended resources (Kubernetes documentation, \"Managing Resources "
          "for Containers\", extended resources): they cannot be overcommitted, so a request must equal "
          "the limit, and a request needs a limit. The API server refuses such a pod, or a workload whose "
          "pod template breaks it, before validating webhooks run; the rule serves gpushare check and "
          "/dry-run, which see manifests the API server has not. A custom resource's templates (a "
          "PyTorchJob's replicas) are neither checked nor canonicalised by the API server: the webhook "
          "judges them, or their operator's pods would be refused one by one.")
def requests_equal_limits(subject: Subject) -> Iterator[Found]:
    r = subject.names.resources
    for cards, containers in _cards_and_containers(subject):
        for container in containers:
            yield from _request_against_limit(subject, container, cards, r)


def _request_against_limit(subject: Subject, container: ContainerRequest, cards: int,
                           r: ResourceNames) -> Iterator[Found]:
    for resource in r.asked():
        request = container.requests.get(resource)
        if request is None:
            continue
        limit = container.limits.get(resource)
        if limit is None:
            yield Found(f"{subject.where(container)}: requests.{resource}={_raw(request)} has no limit; "
                        f"set limits.{resource}: {accepted_form(request, resource, subject.names, cards)} "
                        f"(extended resources need a limit)", request.path)
        elif request.quantity is not None and limit.quantity is not None \
                and request.quantity != limit.quantity:
            yield Found(f"{subject.where(container)}: requests.{resource}={_raw(request)} differs from "
                        f"limits.{resource}={_raw(limit)}; set the request to "
                        f"{accepted_form(limit, resource, subject.names, cards)} or leave it out", request.path)


def _each_pod(subject: Subject) -> Iterable[tuple[str, list[ContainerRequest]]]:
    """(how messages name it, its GPU containers) of each pod the object makes; a Pod's or a Kubernetes
    workload's one pod without building a SubjectPod (this runs for every pod asking for compute)."""
    if subject.workload is None:
        return ((subject.label, subject.containers),)
    return ((pod.label, pod.containers) for pod in subject.pods)


def _names(containers: list[ContainerRequest]) -> str:
    return ", ".join(f'"{c.name}"' for c in containers)


@rule("GS005", severity="deny", seed="000", kinds=POD_KINDS, applies=asks_gpu_core, relevance=NAMES_GPU_CORE,
      title="No mem-only and core+mem containers in one pod",
      doc="cGPU cannot run jobs that request only GPU memory beside jobs that request memory "
          "and compute on one node, so one pod must not mix the two.")
def no_job_type_mixing(subject: Subject) -> Iterator[Found]:
    core, mem = subject.names.resources.gpu_core, subject.names.resources.gpu_mem
    for label, containers in _each_pod(subject):
        mem_only = [c for c in containers if c.has(mem) and not c.has(core)]
        core_mem = [c for c in containers if c.has(mem) and c.has(core)]
        if mem_only and core_mem:
            yield Found(f"{label} mixes mem-only containers ({_names(mem_only)}) with core+mem containers "
                        f"({_names(core_mem)}); give every GPU container {core} or none of them",
                        mem_only[0].path)


@rule("GS006", severity="deny", seed="003", kinds=POD_KINDS, applies=asks_whole_gpus, relevance=NAMES_SHARED_GPU,
      title="Exclusive and shared GPU resources are not mixed",
      doc="A node runs one GPU scheduling mode: a pod cannot ask for whole GPUs "
          "(nvidia.com/gpu, aliyun.com/gpu) and shared GPU resources together.")
def no_exclusive_and_shared(subject: Subject) -> Iterator[Found]:
    for label, containers in _each_pod(subject):
        yield from _exclusive_and_shared(subject, label, containers)


def _exclusive_and_shared(subject: Subject, label: str, containers: list[ContainerRequest]) -> Iterator[Found]:
    r = subject.names.resources
    whole = (r.gpu_exclusive, r.gpu_topology)
    shared = (r.gpu_mem, r.gpu_core)
    exclusive_users = [c for c in containers if not c.asked().isdisjoint(whole)]
    shared_users = [c for c in containers if not c.asked().isdisjoint(shared)]
    for container in exclusive_users:
        if container in shared_users:
            asked = [w for w in whole if container.has(w)] + [s for s in shared if container.has(s)]
            yield Found(f"{subject.where(container)}: requests {' and '.join(asked)} together; "
                        f"use whole GPUs ({' or '.join(whole)}) or shared GPU ({r.gpu_mem}), not both",
                        container.path)
    only_exclusive = [c for c in exclusive_users if c not in shared_users]
    only_shared = [c for c in shared_users if c not in exclusive_users]
    if only_exclusive and only_shared:
        yield Found(f"{label} has containers with whole GPUs ({_names(only_exclusive)}) and containers "
                    f"with shared GPU ({_names(only_shared)}); a node runs one GPU mode, so use one kind",
                    only_exclusive[0].path)


def _near_misses(subject: Subject) -> list[NearMiss]:
    if "near_misses" not in subject.memo:
        settings = subject.settings.near_miss if subject.settings is not None else NearMissSettings()
        if subject.workload is None:
            spec, base = subject.pod_spec
            found = near_misses(spec, base, subject.names, settings)
        else:
            found = near_misses_in(((c.container, c.name, c.group, c.resources_path) for pod in subject.pods
                                    if pod.site is not None for c in pod.site.containers), subject.names, settings)
        subject.memo["near_misses"] = found
    return cast("list[NearMiss]", subject.memo["near_misses"])


def names_a_near_miss(subject: Subject) -> bool:
    """Whether any container names a resource that narrowly misses a shared-GPU name (GS007)."""
    return bool(_near_misses(subject))


@rule("GS007", severity="deny", kinds=POD_KINDS, relevance=Relevance(near_miss=True),
      seed="project choice: a misspelt resource name leaves the pod Pending forever", applies=names_a_near_miss,
      title="No near miss of the shared-GPU resource names",
      doc="A resource such as aliyun.com/gpu-memory, aliyun.com/gpu_mem, alibaba.com/gpu-mem or "
          "aliyun.com/gpu-core-percentage is valid to Kubernetes but offered by no node, so the pod "
          "would stay Pending forever (project choice: deny it and name the resource meant). Real "
          "Alibaba resources (near_miss.allowed, e.g. aliyun.com/fpga) are never near misses.")
def no_near_miss_names(subject: Subject) -> Iterator[Found]:
    for miss in _near_misses(subject):
        section = miss.path[-2]
        container_path = miss.path[:-2] if miss.group == "resources" else miss.path[:-3]
        yield Found(f"{subject.naming(miss.group, miss.container, container_path)}: "
                    f"{section}.{miss.key} is not a resource any node offers, so the pod would stay Pending "
                    f"forever; did you mean {miss.meant}? (accepted: {subject.names.resources.gpu_mem}, "
                    f"{subject.names.resources.gpu_core}; a real resource of that name can be listed in "
                    f"near_miss.allowed)", miss.path)
