"""A rule family's test (``applies``) only ever skips checks that would have found nothing.

The engine skips a rule when its family test fails (GS001 when no container names the compute
percentage, GB001-GB005 when nothing is placed, ...). Here every rule's check also runs on
random pods and workloads, with the demo cluster state, and whatever a check finds must be
in the engine's verdict: the shortcut never hides a finding.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from policies.admission.engine import Engine
from policies.model.subject import StateUnavailable
from policies.rules.base import REGISTRY
from tests.support.profiles import examples
from webhook.settings import load_settings
from webhook.state.snapshot import load_demo_snapshot

SETTINGS = load_settings()
ENGINE = Engine(SETTINGS)
STATE = load_demo_snapshot(SETTINGS.names)
R = SETTINGS.names.resources
VALUES: list[Any] = [0, 1, 4, 5, 15, 33, 100, "1", "4", "30", "2Gi", "2500m", "-1", "x", 1.5, None]
ENV_NAMES = ["ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_MEM_DEV", "NVIDIA_VISIBLE_DEVICES", "CGPU_DISABLE",
             "CUDA_MPS_PIPE_DIRECTORY", "PATH"]
ENV_VALUES: list[dict[str, Any]] = [{"value": v} for v in ("1", "4", "all", "none", "void", "", "true")] + [
    {"valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
TEMPLATE_PATHS = {"Pod": (), "Deployment": ("spec", "template"), "Job": ("spec", "template"),
                  "CronJob": ("spec", "jobTemplate", "spec", "template")}


@st.composite
def containers(draw: st.DrawFn) -> dict[str, Any]:
    container: dict[str, Any] = {"name": draw(st.sampled_from(["a", "b", "c"])), "image": "x"}
    resources: dict[str, Any] = {}
    for section in ("limits", "requests"):
        if draw(st.booleans()):
            chosen = draw(st.lists(st.sampled_from([R.gpu_mem, R.gpu_core, R.gpu_exclusive, R.gpu_topology, "cpu"]),
                                   unique=True, max_size=3))
            resources[section] = {name: draw(st.sampled_from(VALUES)) for name in chosen}
    if resources:
        container["resources"] = resources
    if draw(st.integers(0, 2)) == 0:  # the variables GS010 and GS011 judge, and others
        container["env"] = [{"name": draw(st.sampled_from(ENV_NAMES)), **draw(st.sampled_from(ENV_VALUES))}
                            for _ in range(draw(st.integers(1, 3)))]
    if draw(st.integers(0, 4)) == 0:
        prefix = draw(st.sampled_from([{}, {"prefix": "APP_"}]))
        container["envFrom"] = [{"configMapRef": {"name": "gpu-env"}, **prefix}]
    return container


@st.composite
def subjects(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(st.sampled_from(list(TEMPLATE_PATHS)))
    spec: dict[str, Any] = {"containers": draw(st.lists(containers(), min_size=1, max_size=3))}
    if draw(st.booleans()):
        spec["initContainers"] = draw(st.lists(containers(), max_size=2))
    if kind == "Pod" and draw(st.booleans()):
        spec["nodeName"] = draw(st.sampled_from([n.name for n in STATE.nodes()] + ["missing-node"]))
    template: dict[str, Any] = {"metadata": {}, "spec": spec}
    if draw(st.integers(0, 4)) == 0:
        template["metadata"]["annotations"] = {SETTINGS.names.exempt_annotation: "GS001,GS003",
                                               SETTINGS.names.exempt_reason_annotation: "test"}
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "p", "namespace": "default"}}
    holder = obj
    path = TEMPLATE_PATHS[kind]
    for part in path[:-1]:
        holder = holder.setdefault(part, {})
    if path:
        holder[path[-1]] = template
    else:
        obj["metadata"].update(template["metadata"])
        obj["spec"] = spec
    return kind, obj


def _found_by_every_check(kind: str, obj: dict[str, Any]) -> set[str]:
    """Rule ids whose check finds something, ignoring every family test."""
    subject = ENGINE.subject(kind, obj, namespace="default", state=STATE)
    found = set()
    for rule in REGISTRY.values():
        if kind not in rule.kinds or "CREATE" not in rule.operations:
            continue
        try:
            if any(True for _ in rule.check(subject)):
                found.add(rule.id)
        except StateUnavailable:
            found.add(rule.id)
    return found


@hyp_settings(max_examples=examples(300), deadline=None)
@given(subjects())
def test_family_tests_never_hide_a_finding(case: tuple[str, dict[str, Any]]) -> None:
    kind, obj = case
    verdict = ENGINE.validate(ENGINE.subject(kind, obj, namespace="default", state=STATE))
    reported = {f.rule for f in verdict.findings + verdict.exempted}
    for finding in verdict.findings:  # a StateUnavailable finding names all the rules it stands for
        reported.update(part.strip() for part in finding.message.split(":", 1)[0].split(","))
    assert _found_by_every_check(kind, obj) <= reported


def test_the_family_tests_do_skip_checks():
    """The shortcut is real: a mem-only pod runs neither the compute nor the whole-GPU rules."""
    calls: list[str] = []
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "a", "resources": {"limits": {R.gpu_mem: "4"}}}]}}
    plan = ENGINE._plan("Pod", "CREATE")
    subject = ENGINE.subject("Pod", pod, namespace="default", state=STATE)
    skipped: list[str] = []
    for applies, run in plan:
        if applies is None or applies(subject):
            calls += [active.id for active in run]
        else:
            skipped += [active.id for active in run]
    # What runs and what is skipped, each named: over the rules named (every pod rule but those added
    # later, which the generic test above holds) this is the whole list of what ran, and a new rule
    # needs no line here.
    ran = ["GC001", "GE001", "GS003", "GS004"]  # GC001: needs state, asks gpu-mem
    not_run = ["GB001", "GB002", "GB003", "GB004", "GB005", "GS001", "GS002", "GS005", "GS006", "GS007", "GS008",
               "GS009", "GS010", "GS011"]
    assert [c for c in calls if c in {*ran, *not_run}] == ran
    assert [c for c in skipped if c in {*ran, *not_run}] == not_run
