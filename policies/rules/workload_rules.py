"""GW001-GW002: what only a custom workload can get wrong, beside the pod rules it shares.

Its operator creates the pods, so what the webhook would do to a pod it does not do to the
workload: GM001 keeps a scheduler the pod names, and one the operator gives every pod (Volcano's)
takes the shared-GPU pods away from the GPU-sharing scheduler's card accounting (GW001). Argo can
patch a pod with a string the rules cannot read (GW002).
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.model.resources import CUSTOM_WORKLOADS, render_path
from policies.model.subject import Subject
from policies.model.workload_sites import patch_strings, workload_scheduler
from policies.rules.base import Found, rule
from policies.rules.pod_resources import asks_gpu_memory
from policies.rules.relevance import Relevance


@rule("GW001", severity="warn", kinds=(CUSTOM_WORKLOADS,), applies=asks_gpu_memory,
      relevance=Relevance(resources=("gpu_mem",)),
      seed="001, Volcano source code (github.com/volcano-sh/volcano): a Job's pods get its schedulerName; "
           "left empty it is volcano",
      title="A workload's shared-GPU pods use the GPU-sharing scheduler",
      doc="Some operators give every pod they create a scheduler of the workload's choosing: a Volcano Job "
          "names spec.schedulerName, which Volcano's admission sets to volcano when it is empty, and its pods "
          "take it unless their template names one; an Argo Workflow's spec.schedulerName is its pods' "
          "unless a template names one. The mutating webhook keeps a scheduler a pod names (GM001), so such "
          "shared-GPU pods bypass the GPU-sharing scheduler, which records the card each pod uses: warn, "
          "naming the scheduler and where it comes from.")
def pods_use_the_sharing_scheduler(subject: Subject) -> Iterator[Found]:
    workload = subject.workload
    if workload is None or workload.scheduler is None:
        return
    names = subject.names
    wanted = names.injected_scheduler or names.default_scheduler
    for pod in subject.pods:
        if pod.site is None or not any(c.has(names.resources.gpu_mem) for c in pod.containers):
            continue
        given = workload_scheduler(workload, subject.obj, pod.site)
        if given is None or given[0] in (wanted, names.default_scheduler):
            continue
        scheduler, origin, path = given
        yield Found(f"{pod.label}: its pods ask for {names.resources.gpu_mem} and will be scheduled by {scheduler} "
                    f"({origin}), which does not record the GPU card each pod uses, so the GPU-sharing device "
                    f"plugin cannot assign them one; set schedulerName: {wanted} in the pod template (or the "
                    f"workload's {workload.scheduler.pattern[-1]})", path)


def _names_a_patch(subject: Subject) -> bool:
    return subject.workload is not None and bool(subject.workload.patches)


@rule("GW002", severity="warn", kinds=(CUSTOM_WORKLOADS,), applies=_names_a_patch,
      relevance=Relevance(patch_mentions=("gpu_mem", "gpu_core")),
      seed="project choice: a pod spec patch written as a string is applied by the workflow controller and "
           "cannot be checked before it",
      title="GPU requests are not hidden in a pod spec patch",
      doc="Argo's podSpecPatch (on a workflow or a template) is a string the workflow controller merges into "
          "each pod it creates, often with parameters filled in at run time: the rules cannot judge the GPU "
          "requests it writes. A patch that mentions the shared-GPU resource names gets this warning; write "
          "the requests in the template's container resources, where they are checked.")
def gpu_requests_are_not_in_patches(subject: Subject) -> Iterator[Found]:
    workload = subject.workload
    if workload is None:
        return
    r = subject.names.resources
    for path, text in patch_strings(workload, subject.obj):
        mentioned = [name for name in (r.gpu_mem, r.gpu_core) if name in text]
        if mentioned:
            yield Found(f"{subject.label} {render_path(path)} mentions {' and '.join(mentioned)}: the pod spec "
                        f"patch is applied by the workflow controller to each pod and cannot be checked here; "
                        f"write GPU requests in the template's container resources instead", path)
