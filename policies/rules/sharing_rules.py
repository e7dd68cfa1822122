"""GS008-GS009: GPU memory the GPU-sharing scheduler and device plugin would not count as written.

- GS008: gpu-mem on an init container. The scheduler places ``spec.containers`` alone on cards
  (AliyunContainerService/gpushare-scheduler-extender, pkg/utils/pod.go,
  GetGPUMemoryFromPodResource), and the device plugin, asked by the kubelet for an init
  container's devices, looks for a pod whose app containers ask for that same amount
  (gpushare-device-plugin, pkg/gpu/nvidia/allocate.go and podutils.go). An init container asking
  for anything else gets no GPU on a node of more than one card. Native sidecars
  (``restartPolicy: Always``) are init containers to both. Warned, not denied: on a node of one
  card, or when the amounts match, it runs.
- GS009: the multi-GPU pod label (ACK "Use cGPU to achieve GPU sharing based on multiple GPUs"):
  an application asks for N GiB over M cards and gets N/M on each; "the value of N/M must be an
  integer".
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.model.resources import POD_SPEC_PATHS, Path, cards_per_container
from policies.model.subject import Subject, SubjectPod
from policies.rules.base import Found, rule
from policies.rules.pod_resources import POD_KINDS
from policies.rules.relevance import Relevance

EXTENDER = "source code: github.com/AliyunContainerService/gpushare-scheduler-extender, gpushare-device-plugin"


def init_asks_gpu_memory(subject: Subject) -> bool:
    """Whether an init container names GPU memory (GS008 judges it)."""
    mem = subject.names.resources.gpu_mem
    return mem in subject.asked and any(not c.is_app and c.has(mem) for c in subject.containers)


def labels_multi_gpu(subject: Subject) -> bool:
    """Whether a pod carries the multi-GPU label and asks for GPU memory (GS009 judges the two)."""
    key = subject.names.labels.pod_gpu_count
    return subject.names.resources.gpu_mem in subject.asked and any(key in pod.labels for pod in subject.pods)


# Both judge pods asking for GPU memory (an init container's, or the app containers' with the label).
ASKS_GPU_MEMORY = Relevance(resources=("gpu_mem",))


@rule("GS008", severity="warn", seed=EXTENDER, kinds=POD_KINDS, applies=init_asks_gpu_memory, relevance=ASKS_GPU_MEMORY,
      title="GPU memory on init containers is on no card",
      doc="The GPU-sharing scheduler places the app containers (spec.containers) on cards and counts "
          "nothing else; the device plugin gives an init container (or a native sidecar) a GPU only when "
          "its gpu-mem equals the sum of the app containers'. Ask for GPU memory in an app container.")
def init_memory_on_no_card(subject: Subject) -> Iterator[Found]:
    names = subject.names
    mem = names.resources.gpu_mem
    for pod in subject.pods:
        cards = cards_per_container(pod.labels, names) or 1
        app_sum = sum(c.memory(names, cards) or 0 for c in pod.containers if c.is_app)
        for container in pod.containers:
            count = container.memory(names, cards)
            if container.is_app or count is None or count == app_sum:
                continue
            sidecar = " (a sidecar)" if container.sidecar else ""
            yield Found(f"{subject.where(container)}{sidecar}: {mem}={count} holds no card: the scheduler counts "
                        f"app containers only, and the device plugin gives it a GPU only if it equals their sum "
                        f"({app_sum}); move it to an app container", container.path)


@rule("GS009", severity="deny", seed="005", kinds=POD_KINDS, applies=labels_multi_gpu, relevance=ASKS_GPU_MEMORY,
      title="GPU memory spread over several cards divides evenly",
      doc="A pod labelled aliyun.com/gpu-count: M gets each container's gpu-mem N as N/M GiB on M cards of "
          "one node; M is a whole number of 1 or more and N/M must be an integer.")
def spread_divides_evenly(subject: Subject) -> Iterator[Found]:
    names = subject.names
    key, mem = names.labels.pod_gpu_count, names.resources.gpu_mem
    for pod in subject.pods:
        shown = pod.labels.get(key)
        if shown is None:
            continue
        spread = cards_per_container(pod.labels, names)
        if spread is None:
            yield Found(f"{pod.label}: label {key}={shown!r} is not a number of cards; use a whole number, "
                        f"1 or more", _label_path(subject, pod, key))
            continue
        for container in pod.containers:
            count = container.memory(names, spread)
            if not container.is_app or count is None or count % spread == 0:
                continue
            rounded_up = (count // spread + 1) * spread  # never less memory than asked for
            yield Found(f"{subject.where(container)}: {mem}={count} over {spread} cards ({key}={spread}) is "
                        f"{count / spread:g} a card, not a whole number; use {rounded_up}", container.path)


def _label_path(subject: Subject, pod: SubjectPod, key: str) -> Path:
    """Where a pod's label is written: a Pod's or a Kubernetes workload's template's metadata, or a
    custom workload's pod template at its site."""
    base = POD_SPEC_PATHS[subject.kind][:-1] if subject.workload is None else \
        (pod.site.path if pod.site is not None else ())
    return (*base, "metadata", "labels", key)
