"""GW001 and GW002 in process, word for word: which of a custom workload's pods bypass the
GPU-sharing scheduler and why, and which pod spec patches write GPU requests no rule can read.
The same cases through `check` and the real server are in tests/server/test_workloads.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.admission.engine import Engine
from tests.support.manifests import received
from webhook.settings import Settings

WORKLOADS = Path(__file__).parents[1] / "data" / "workloads"
JOB = "GW001: Job.batch.volcano.sh default/tensorflow-dist-mnist"
BYPASS = ("which does not record the GPU card each pod uses, so the GPU-sharing device plugin cannot assign them "
          "one; set schedulerName: {wanted} in the pod template (or the workload's schedulerName)")
UNCHECKED = ("the pod spec patch is applied by the workflow controller to each pod and cannot be checked here; write "
             "GPU requests in the template's container resources instead")


def findings(engine: Engine, obj: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    subject = engine.subject(received(obj["kind"]), received(obj), namespace="default")
    return [(f.rule, f.severity, f.message, f.path_text) for f in engine.validate(subject).findings]


def volcano_job() -> dict[str, Any]:
    """Volcano's dist-mnist sample (tests/data/workloads): a CPU ps task, then a gpu-mem worker task."""
    return yaml.safe_load((WORKLOADS / "volcanojob.yaml").read_text())


def bypass(task: int, wanted: str = "ack-co-scheduler") -> tuple[str, str, str, str]:
    return ("GW001", "warn", f"{JOB} spec.tasks[{task}].template: its pods ask for aliyun.com/gpu-mem and will be "
                             f"scheduled by volcano (spec.schedulerName), {BYPASS.format(wanted=wanted)}",
            "spec.schedulerName")


def test_gw001_names_only_the_tasks_whose_pods_ask_for_gpu_memory(engine):
    job = volcano_job()
    assert findings(engine, job) == [bypass(1)]
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"aliyun.com/gpu-mem": 2}}
    assert findings(engine, job) == [bypass(0), bypass(1)]


def test_gw001_without_an_injected_scheduler_asks_for_the_default_one():
    engine = Engine(Settings(names={"scheduler_name": "none"}))
    assert findings(engine, volcano_job()) == [bypass(1, "default-scheduler")]


@pytest.mark.parametrize("scheduler", ["ack-co-scheduler", "default-scheduler"])
def test_gw001_passes_the_gpu_sharing_and_the_default_scheduler(engine, scheduler):
    job = volcano_job()
    job["spec"]["schedulerName"] = scheduler
    assert findings(engine, job) == []


def test_gw001_the_default_scheduler_of_the_kind_and_a_template_s_own_choice(engine):
    job = volcano_job()
    del job["spec"]["schedulerName"]  # Volcano's admission sets it: volcano when it is empty
    assert findings(engine, job) == [(
        "GW001", "warn", f"{JOB} spec.tasks[1].template: its pods ask for aliyun.com/gpu-mem and will be scheduled by "
                         "volcano (the default of spec.schedulerName in a Job.batch.volcano.sh), "
                         f"{BYPASS.format(wanted='ack-co-scheduler')}", "spec.tasks[1].template.spec")]
    # a scheduler the template names is its own choice, as a Pod's is (GM001 keeps it too)
    job["spec"]["tasks"][1]["template"]["spec"]["schedulerName"] = "volcano"
    assert findings(engine, job) == []


def test_gw001_a_task_that_chose_its_scheduler_does_not_hide_the_next_one(engine):
    job = volcano_job()
    first = job["spec"]["tasks"][0]["template"]["spec"]
    first["containers"][0]["resources"] = {"limits": {"aliyun.com/gpu-mem": 2}}
    first["schedulerName"] = "ack-co-scheduler"
    assert findings(engine, job) == [bypass(1)]


def test_gw001_names_the_field_of_a_volcano_cronjob(engine):
    cron = yaml.safe_load((WORKLOADS / "volcanocronjob.yaml").read_text())
    assert findings(engine, cron) == [(
        "GW001", "warn", "GW001: CronJob.batch.volcano.sh default/volcano-cronjob-example "
                         "spec.jobTemplate.spec.tasks[1].template: its pods ask for aliyun.com/gpu-mem and will be "
                         "scheduled by volcano (spec.jobTemplate.spec.schedulerName), "
                         f"{BYPASS.format(wanted='ack-co-scheduler')}", "spec.jobTemplate.spec.schedulerName")]


def test_gw001_passes_a_workload_whose_kind_names_no_scheduler(engine):
    assert findings(engine, yaml.safe_load((WORKLOADS / "pytorchjob.yaml").read_text())) == []


POD_SPEC_PATCH = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  name: w
spec:
  entrypoint: hello-world
  templates:
  - name: hello-world
    podSpecPatch: '{"containers":[{"name":"main", "resources":{"limits":{"aliyun.com/gpu-mem": "{{inputs.mem}}"}}}]}'
    container:
      image: busybox
      command: [echo]
      args: ["hello world"]
"""


def test_gw002_names_each_patch_and_the_resources_it_mentions(engine):
    # argoproj/argo-workflows examples/pod-spec-patch.yaml (release v4.1.2), its cpu limit made a gpu-mem one.
    workflow = yaml.safe_load(POD_SPEC_PATCH)
    template = ("GW002", "warn", "GW002: Workflow default/w spec.templates[0].podSpecPatch mentions "
                                 f"aliyun.com/gpu-mem: {UNCHECKED}", "spec.templates[0].podSpecPatch")
    assert findings(engine, workflow) == [template]
    workflow["spec"]["podSpecPatch"] = ('{"containers":[{"name":"main","resources":{"limits":'
                                        '{"aliyun.com/gpu-core.percentage":"30","aliyun.com/gpu-mem":"4"}}}]}')
    assert findings(engine, workflow) == [
        ("GW002", "warn", "GW002: Workflow default/w spec.podSpecPatch mentions aliyun.com/gpu-mem and "
                          f"aliyun.com/gpu-core.percentage: {UNCHECKED}", "spec.podSpecPatch"), template]


def test_gw002_passes_a_patch_of_other_resources_and_names_compute_alone(engine):
    workflow = yaml.safe_load(POD_SPEC_PATCH.replace("aliyun.com/gpu-mem", "cpu"))
    assert findings(engine, workflow) == []
    workflow["spec"]["podSpecPatch"] = ('{"containers":[{"name":"main","resources":{"limits":'
                                        '{"aliyun.com/gpu-core.percentage":"30"}}}]}')
    assert findings(engine, workflow) == [
        ("GW002", "warn", "GW002: Workflow default/w spec.podSpecPatch mentions aliyun.com/gpu-core.percentage: "
                          f"{UNCHECKED}", "spec.podSpecPatch")]
