"""The webhooks' matchConditions: generated from what each rule and mutation declares relevant,
shipped exactly as generated, and sending exactly the objects some rule or mutation judges.

The shipped CEL is evaluated with cel-python on generated objects (in the shapes the API server
admits: extended resources' requests equal their limits), and held against the engine itself:
every object on which any rule finds something, or any mutation patches something, is sent; and
what is sent is exactly what the declarations describe (``Triggers.sends``), each of which some
rule needs (``test_every_trigger_is_needed``).
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import celpy
import helm_python as helm
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.admission.engine import EXISTING, Engine
from policies.generate.match_conditions import SCOPES, match_conditions, scope_sends, triggers
from policies.model.workload_sites import pod_sites
from policies.rules.base import REGISTRY, rule
from policies.rules.relevance import Relevance
from tests.support.check_helpers import run_gpushare
from tests.support.cluster_builders import gpu_node, gpu_pod, snapshot
from tests.support.near_miss_cases import NEAR_MISSES
from tests.support.profiles import examples
from tests.support.resource_keys import CORE, COUNT, GPU_NAMES, MEM, RESOURCE_KEYS, TOPOLOGY, WHOLE
from tests.support.workload_cases import CASES
from webhook.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE_FILE = ROOT / "deploy" / "kustomize" / "match-conditions.yaml"
CHART = ROOT / "deploy" / "helm" / "gpushare-webhook"
HELM_FILE = CHART / "files" / "match-conditions.yaml"
COMPONENT_FILE = ROOT / "deploy" / "kustomize" / "components" / "custom-workloads" / "webhook.yaml"
EXAMPLES = examples(120)

# An expired grant in team-a covers every object there, so GE001 has news for some of them.
SETTINGS = Settings(exemptions={"grants": [{"name": "old", "namespace": "team-a", "names": "*", "rules": ["GS003"],
                                            "reason": "vendor image", "expires": "2020-01-01"}],
                                "annotation_namespaces": ["team-b"]})
ENGINE = Engine(SETTINGS)
_ENV = celpy.Environment()
TRIGGERS = {scope.name: triggers(scope, SETTINGS) for scope in SCOPES}
POD_VALIDATE, POD_MUTATE = "pods.validate.gpushare.io", "pods.mutate.gpushare.io"
CONTROLLED_VALIDATE = "controlled-pods.validate.gpushare.io"
SCOPE = {scope.name: scope for scope in SCOPES}
DAEMONSETS = "gpushare-daemonsets.mutate.gpushare.io"
WORKLOADS, CRONJOBS = "workloads.validate.gpushare.io", "cronjobs.validate.gpushare.io"
NODES = "nodes.validate.gpushare.io"
DEBUG = "debug-containers.validate.gpushare.io"

# A cluster with every mode: the placement rules judge pods created with spec.nodeName against it.
STATIC = {"gpushare.io/cpu-manager-policy": "static"}
NODE_OBJECTS = [gpu_node("share-1", "share"), gpu_node("cgpu-1", "cgpu"), gpu_node("core-1", "core_mem"),
                gpu_node("topo-1", "topology"), gpu_node("excl-1", "default"),
                gpu_node("static-1", "cgpu", labels=STATIC)]
STATE = snapshot(*NODE_OBJECTS, gpu_pod("running", "cgpu-1", mem=10), names=SETTINGS.names)
NODE_NAMES = [n["metadata"]["name"] for n in NODE_OBJECTS]


@functools.cache
def conditions() -> dict[str, list[dict[str, Any]]]:
    """The matchConditions generated for SETTINGS (worked out when a test first needs them, not as
    every xdist worker imports this module)."""
    return match_conditions(SETTINGS)


@functools.cache
def program(webhook: str) -> Any:
    """The webhook's condition compiled with cel-python."""
    return _ENV.program(_ENV.compile(conditions()[webhook][0]["expression"]))


@functools.cache
def compiled(expression: str) -> Any:
    """A condition's expression compiled with cel-python (once: the large ones take a while)."""
    return _ENV.program(_ENV.compile(expression))


def created_pod_sent(expression: str, pod: dict[str, Any]) -> bool:
    """A pod webhook's condition (its expression) on the CREATE of ``pod``."""
    request = celpy.json_to_cel({"operation": "CREATE", "resource": {"resource": "pods"}})
    return bool(compiled(expression).evaluate({"object": celpy.json_to_cel(pod), "request": request}))


def sent(webhook: str, obj: dict[str, Any], *, resource: str = "pods", operation: str = "CREATE",
         old: dict[str, Any] | None = None) -> bool:
    """The webhook's matchCondition on ``obj``, as the API server would evaluate it."""
    request = {"operation": operation, "resource": {"group": "", "version": "v1", "resource": resource}}
    result = program(webhook).evaluate({"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
                                        "request": celpy.json_to_cel(request)})
    assert isinstance(result, celpy.celtypes.BoolType), f"CEL evaluation failed: {result!r}"
    return bool(result)


def judged_by(kind: str, obj: dict[str, Any], namespace: str, *, operation: str = "CREATE",
              old: dict[str, Any] | None = None, sub_resource: str = "") -> set[str]:
    """Every rule that finds something on ``obj`` as the webhooks judge it (with and without the cluster)
    and every mutation that patches it. On an UPDATE, only what the change brings: a finding the old
    object had as well, word for word, is not the change's, and such an UPDATE need not be sent
    (docs/design.md, "What an UPDATE is judged on")."""
    found: set[str] = set()
    for state in (None, STATE):
        def findings(judged: dict[str, Any], state: Any = state) -> set[tuple[str, str]]:
            subject = ENGINE.subject(kind, judged, namespace=namespace, state=state, operation=operation, old=old,
                                     sub_resource=sub_resource, admission=True)
            verdict = ENGINE.validate(subject)
            return {(f.rule, f.message.removesuffix(EXISTING)) for f in [*verdict.findings, *verdict.exempted]}
        before = findings(old) if operation == "UPDATE" and isinstance(old, dict) else set()
        found |= {rule for rule, message in findings(obj) - before}
    subject = ENGINE.subject(kind, obj, namespace=namespace, operation=operation, old=old, sub_resource=sub_resource,
                             admission=True)
    return found | set(ENGINE.mutate(subject).patch_ids)


# -- generated objects, in the shapes the API server admits -------------------------------------------

VALUES = {MEM: ["1", "2", "8", "40", "0", "1k", "2Gi"], CORE: ["5", "30", "33", "100", "0"], WHOLE: ["1", "2"],
          TOPOLOGY: ["1", "2"], COUNT: ["2"]}
# Each kind of key about as often: the shared-GPU names, other real resources, known near misses,
# and keys built like near misses (most of them are not).
KEYS = st.one_of(st.sampled_from([MEM, CORE]), st.sampled_from([*(n for n in GPU_NAMES if n not in (MEM, CORE)),
                                                                 "cpu", "memory",
                                                                 "aliyun.com/fpga", "alibabacloud.com/gpu-mem"]),
                 st.sampled_from([key for key, _, _ in NEAR_MISSES]), RESOURCE_KEYS.filter(lambda k: k.strip() != ""))
ENV_NAMES = ["ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_SCHD_WEIGHT", "NVIDIA_VISIBLE_DEVICES", "CGPU_DISABLE",
             "CUDA_MPS_PIPE_DIRECTORY", "PATH", "LANG"]
# Values the kubelet expands too ($(PATH), $$), and CGPU_DISABLE spellings cGPU does not document (on).
ENV_VALUES: list[dict[str, Any]] = [{"value": v} for v in ("1", "2", "all", "none", "true", "on", "$(LANG)",
                                                           "$(PATH)", "$$(PATH)")] + [
    {"valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
ANNOTATIONS = [{}, {"gpushare.io/exempt": "GS003"}, {"gpushare.io/exempt": "GS003", "gpushare.io/exempt-reason": "r"},
               {"gpushare.io/exempt": ""}, {"example.com/note": "x"}]


@st.composite
def containers(draw: st.DrawFn, prefix: str, least: int) -> list[dict[str, Any]]:
    out = []
    for index in range(draw(st.integers(least, 2))):
        container: dict[str, Any] = {"name": f"{prefix}-{index}", "image": "cuda:12"}
        limits = {key: draw(st.sampled_from(VALUES.get(key, ["1"]))) for key in draw(st.lists(KEYS, max_size=3))}
        if limits:
            # The API server defaults requests from limits; extended resources' must equal them.
            container["resources"] = {"limits": limits, "requests": dict(limits)} if draw(st.booleans()) \
                else {"limits": limits}
        elif draw(st.booleans()):
            container["resources"] = {}
        if draw(st.integers(0, 3)) == 0:
            container["env"] = [{"name": n, **draw(st.sampled_from(ENV_VALUES))}
                                for n in draw(st.lists(st.sampled_from(ENV_NAMES), max_size=2))]
        if draw(st.integers(0, 4)) == 0:  # names hidden in a ConfigMap (GS010 warns beside GPU resources)
            container["envFrom"] = draw(st.sampled_from([[], [{"configMapRef": {"name": "c"}}],
                                                         [{"prefix": "APP_", "secretRef": {"name": "s"}}]]))
        out.append(container)
    return out


@st.composite
def pod_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(containers("main", 1))}
    init = draw(containers("init", 0))
    if init:
        spec["initContainers"] = init
    if draw(st.booleans()):
        spec["schedulerName"] = draw(st.sampled_from(["default-scheduler", "ack-co-scheduler", "volcano"]))
    return spec


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    spec = draw(pod_specs())
    if draw(st.integers(0, 2)) == 0:
        spec["nodeName"] = draw(st.sampled_from(NODE_NAMES))
    meta: dict[str, Any] = {"name": "p", "namespace": draw(st.sampled_from(["team-a", "team-b", "team-c"]))}
    annotations = draw(st.sampled_from(ANNOTATIONS))
    if annotations:
        meta["annotations"] = annotations
    owner = draw(st.sampled_from([None, "gpushare-device-plugin-ds", "other-ds"]))
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner, "uid": "u",
                                    "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def as_deployment(pod: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = {"metadata": {"labels": {"app": "x"}, **({"annotations": pod["metadata"][
        "annotations"]} if "annotations" in pod["metadata"] else {})}, "spec": pod["spec"]}
    template["spec"] = {k: v for k, v in template["spec"].items() if k != "nodeName"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": pod["metadata"]["namespace"]},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template}}


def as_cronjob(pod: dict[str, Any]) -> dict[str, Any]:
    deployment = as_deployment(pod)
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {**deployment["metadata"], "name": "c"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": deployment["spec"]["template"]}}}}


# -- the property tests -------------------------------------------------------------------------------

@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods())
def test_every_pod_a_rule_or_mutation_judges_is_sent_and_what_is_sent_is_what_the_rules_declare(pod):
    namespace = pod["metadata"]["namespace"]
    judged = judged_by("Pod", pod, namespace)
    bare, controlled = sent(POD_VALIDATE, pod), sent(CONTROLLED_VALIDATE, pod)
    validated, mutated = bare or controlled, sent(POD_MUTATE, pod)
    assert not (bare and controlled), "a pod is sent to one validating pod webhook at most"
    for name, verdict in ((POD_VALIDATE, bare), (CONTROLLED_VALIDATE, controlled), (POD_MUTATE, mutated)):
        assert verdict == scope_sends(SCOPE[name], TRIGGERS[name], "Pod", pod, SETTINGS), name
    rules = {r for r in judged if r in REGISTRY}
    assert validated or not rules, f"judged by {sorted(rules)} but not sent"
    assert mutated or not judged & {"GM001", "GM003"}, f"patched by {sorted(judged)} but not sent"
    # GM002 patches the GPU-sharing DaemonSets' pods; its narrow webhook sends exactly those.
    owned = [o["name"] for o in pod["metadata"].get("ownerReferences", [])] == ["gpushare-device-plugin-ds"]
    assert sent(DAEMONSETS, pod) == owned == TRIGGERS[DAEMONSETS].sends("Pod", pod, SETTINGS)
    assert owned or "GM002" not in judged


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods())
def test_every_template_a_rule_judges_is_sent_and_only_what_the_rules_declare(pod):
    for webhook, workload, resource in ((WORKLOADS, as_deployment(pod), "deployments"),
                                        (CRONJOBS, as_cronjob(pod), "cronjobs")):
        verdict = sent(webhook, workload, resource=resource)
        assert verdict == TRIGGERS[webhook].sends(workload["kind"], workload, SETTINGS)
        rules = {r for r in judged_by(workload["kind"], workload, workload["metadata"]["namespace"]) if r in REGISTRY}
        assert verdict or not rules, f"{workload['kind']} judged by {sorted(rules)} but not sent"


@st.composite
def debug_updates(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """kubectl debug's UPDATE of pods/ephemeralcontainers: the old pod (perhaps debugged before) and the
    same pod with one or two debug containers more. The earlier ones are re-sent unchanged, as the API
    server requires; none has resources (Kubernetes forbids them)."""
    old = draw(pods())
    def debuggers(prefix: str, least: int) -> list[dict[str, Any]]:
        found = []
        for container in draw(containers(prefix, least)):
            container.pop("resources", None)
            found.append({**container, "image": "busybox:1.36", "targetContainerName": "main-0"})
        return found
    earlier = debuggers("debugger-old", 0)
    if earlier:
        old["spec"]["ephemeralContainers"] = earlier
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = earlier + debuggers("debugger-new", 1)
    return new, old


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(update=debug_updates())
def test_every_debug_container_a_rule_judges_is_sent_and_only_what_the_rules_declare(update):
    new, old = update
    verdict = sent(DEBUG, new, operation="UPDATE", old=old)
    assert verdict == TRIGGERS[DEBUG].sends("Pod", new, SETTINGS, operation="UPDATE", old=old,
                                            sub_resource="ephemeralcontainers")
    rules = judged_by("Pod", new, new["metadata"]["namespace"], operation="UPDATE", old=old,
                      sub_resource="ephemeralcontainers")
    assert verdict or not rules, f"debug container judged by {sorted(rules)} but not sent"
    # What the debug containers added before set is never sent again, nor judged.
    resent = copy.deepcopy(new)
    assert not sent(DEBUG, resent, operation="UPDATE", old=new)
    assert judged_by("Pod", resent, new["metadata"]["namespace"], operation="UPDATE", old=new,
                     sub_resource="ephemeralcontainers") == set()


MODES = ["cgpu", "core_mem", "share", "mps", "topology", "default", "exclusive", ""]


@st.composite
def node_updates(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any] | None]:
    def node() -> dict[str, Any]:
        obj = gpu_node(draw(st.sampled_from(["share-1", "cgpu-1", "new-1"])), draw(st.sampled_from(MODES[:6])))
        labels = obj["metadata"]["labels"]
        for key in ("ack.node.gpu.schedule", "ack.node.gpu.placement"):
            choice = draw(st.one_of(st.sampled_from(["keep", "drop"]), st.sampled_from([*MODES, "binpack", "spread"])))
            if choice == "drop":
                labels.pop(key, None)
            elif choice != "keep":
                labels[key] = choice
        if draw(st.integers(0, 4)) == 0:
            obj["metadata"]["annotations"] = draw(st.sampled_from(ANNOTATIONS[1:]))
        return obj

    new = node()
    old = node() if draw(st.booleans()) else None
    if old is not None:
        old["metadata"]["name"] = new["metadata"]["name"]
    return new, old


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(update=node_updates())
def test_every_node_a_rule_judges_is_sent_and_only_what_the_rules_declare(update):
    new, old = update
    operation = "UPDATE" if old is not None else "CREATE"
    verdict = sent(NODES, new, resource="nodes", operation=operation, old=old)
    assert verdict == TRIGGERS[NODES].sends("Node", new, SETTINGS, operation=operation, old=old)
    rules = judged_by("Node", new, "", operation=operation, old=old)
    assert verdict or not rules, f"node judged by {sorted(rules)} but not sent"


# -- each trigger is needed, and what no rule judges is not sent -----------------------------------------

def _pod(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-c"},
            "spec": {"containers": [{"name": "app", "image": "cuda:12", **container}], **spec}}


NEEDED = [  # (what only this pod shows, the pod, a rule or mutation that judges it)
    ("gpu-mem", _pod({"resources": {"limits": {MEM: "2"}}}), "GM003"),
    ("gpu-core alone", _pod({"resources": {"limits": {CORE: "30"}}}), "GS002"),
    ("a near miss", _pod({"resources": {"limits": {"aliyun.com/gpu-memory": "2"}}}), "GS007"),
    ("whole GPUs on a topology node", _pod({"resources": {"limits": {WHOLE: "1"}}}, nodeName="topo-1"), "GB002"),
    ("the exemption annotation", {**_pod({}), "metadata": {"name": "p", "namespace": "team-c", "annotations": {
        "gpushare.io/exempt": "GS003"}}}, "GE001"),
    ("a device-plugin variable", _pod({"env": [{"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "16"}]}), "GS010"),
    ("GPUs exposed to a GPU-free container", _pod({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}),
     "GS011"),
    ("envFrom beside whole GPUs", _pod({"resources": {"limits": {WHOLE: "1"}}, "envFrom": [
        {"configMapRef": {"name": "c"}}]}), "GS010"),
]


@pytest.mark.parametrize(("what", "pod", "judge"), NEEDED, ids=[n[0] for n in NEEDED])
def test_every_trigger_is_needed(what, pod, judge):
    assert judge in judged_by("Pod", pod, "team-c")
    assert sent(POD_VALIDATE, pod) or sent(POD_MUTATE, pod)


NOT_SENT = [
    ("no resources", _pod({})),
    ("cpu and memory", _pod({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}})),
    ("whole GPUs, scheduled", _pod({"resources": {"limits": {WHOLE: "1"}}})),
    ("topology GPUs, scheduled", _pod({"resources": {"limits": {TOPOLOGY: "2"}}})),
    ("other real resources", _pod({"resources": {"limits": {"aliyun.com/fpga": "1", "alibabacloud.com/gpu-mem": "4",
                                                            "nvidia.com/gpumem": "4000"}}})),
    ("a CPU pod created on a node", _pod({"resources": {"limits": {"cpu": "1"}}}, nodeName="cgpu-1")),
    ("envFrom without GPUs", _pod({"envFrom": [{"configMapRef": {"name": "c"}}], "env": [
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}]})),
    ("an unrelated annotation", {**_pod({}), "metadata": {"name": "p", "namespace": "team-a", "annotations": {
        "example.com/note": "gpu-mem"}}}),
]


@pytest.mark.parametrize(("what", "pod"), NOT_SENT, ids=[n[0] for n in NOT_SENT])
def test_pods_no_rule_judges_are_not_sent(what, pod):
    assert judged_by("Pod", pod, pod["metadata"]["namespace"]) == set()
    for webhook in (POD_VALIDATE, POD_MUTATE, DAEMONSETS):
        assert not sent(webhook, pod), webhook


def _debugged(*env: dict[str, Any], before: list[dict[str, Any]] | None = None) -> tuple[dict, dict]:
    old = _pod({"resources": {"limits": {MEM: "2"}}})
    if before:
        old["spec"]["ephemeralContainers"] = before
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [*(before or []), {"name": "debugger-x", "image": "busybox:1.36",
                                                            **({"env": list(env)} if env else {})}]
    return new, old


DEBUG_NOT_SENT = [
    ("a plain kubectl debug", _debugged()),
    ("unjudged variables", _debugged({"name": "TERM", "value": "xterm"})),
    ("CGPU_DISABLE, which no GPU-free container is judged for", _debugged({"name": "CGPU_DISABLE", "value": "true"})),
    ("an earlier debug container re-sent", _debugged(before=[{"name": "debugger-a", "image": "busybox:1.36", "env": [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}])),
]


@pytest.mark.parametrize(("what", "update"), DEBUG_NOT_SENT, ids=[n[0] for n in DEBUG_NOT_SENT])
def test_debug_containers_no_rule_judges_are_not_sent(what, update):
    new, old = update
    assert judged_by("Pod", new, "team-c", operation="UPDATE", old=old, sub_resource="ephemeralcontainers") == set()
    assert not sent(DEBUG, new, operation="UPDATE", old=old)


def test_a_debug_container_exposing_gpus_is_sent():
    new, old = _debugged({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    assert judged_by("Pod", new, "team-c", operation="UPDATE", old=old, sub_resource="ephemeralcontainers") == {"GS011"}
    assert sent(DEBUG, new, operation="UPDATE", old=old)


# -- generated, shipped as generated ---------------------------------------------------------------------

def exported(target: str, cwd: Path, config: dict[str, Any] | None = None) -> str:
    args = ["policy", "export", "--webhooks", target]
    if config is not None:
        (cwd / "config.yaml").write_text(yaml.safe_dump(config))
        args += ["--config", "config.yaml"]
    done = run_gpushare(*args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def stale(cwd: Path, config: dict[str, Any] | None = None) -> list[str]:
    """The checked-in generated files that differ from what the generator gives now."""
    return [str(path.relative_to(ROOT)) for target, path in (("kustomize", KUSTOMIZE_FILE), ("helm", HELM_FILE),
                                                             ("custom-workloads", COMPONENT_FILE))
            if exported(target, cwd, config) != path.read_text()]


@pytest.mark.processes
def test_the_checked_in_conditions_are_what_the_generator_gives(tmp_path):
    assert stale(tmp_path) == [], "stale: run `gpushare generate`"


def test_the_checked_in_conditions_are_what_the_generator_gives_in_this_process():
    from webhook.cli.policy import webhook_conditions_text

    stale = [str(path.relative_to(ROOT)) for target, path in (("kustomize", KUSTOMIZE_FILE), ("helm", HELM_FILE),
                                                             ("custom-workloads", COMPONENT_FILE))
             if webhook_conditions_text(Settings(), target, "yaml") != path.read_text()]
    assert stale == [], "stale: run `gpushare generate`"


@pytest.mark.processes
def test_a_new_resource_name_changes_the_conditions_and_the_check_fails_until_they_are_regenerated(tmp_path):
    renamed = {"names": {"resources": {"gpu_mem": "example.com/gpu-memory"}}}
    assert stale(tmp_path, renamed) == [str(p.relative_to(ROOT)) for p in (KUSTOMIZE_FILE, HELM_FILE, COMPONENT_FILE)]
    text = exported("kustomize", tmp_path, renamed)
    assert "'example.com/gpu-memory'" in text and "'aliyun.com/gpu-mem'" not in text.split("matches(")[0]


def test_a_new_rule_is_carried_by_its_declaration_alone():
    before = match_conditions(Settings())
    rule("GX901", severity="warn", seed="test", kinds=("Pod",), title="t", doc="d",
         relevance=Relevance(resources=("gpu_exclusive",), env=("MY_GPU_SETTING",)))(lambda subject: iter(()))
    try:
        after = match_conditions(Settings())
    finally:
        del REGISTRY["GX901"]
    assert after[POD_MUTATE] == before[POD_MUTATE] and after[WORKLOADS] == before[WORKLOADS]
    sends = functools.partial(created_pod_sent, after[POD_VALIDATE][0]["expression"])

    assert sends(_pod({"resources": {"limits": {WHOLE: "1"}}}))
    assert sends(_pod({"env": [{"name": "MY_GPU_SETTING", "value": "1"}]}))
    assert not sends(_pod({"env": [{"name": "OTHER", "value": "1"}]}))


def test_a_rule_or_mutation_reaches_only_the_webhooks_of_its_kinds_and_operations():
    from policies.rules.mutations import MUTATIONS, Mutation

    before = match_conditions(Settings())
    # A rule judging only a pod's UPDATE, a workload rule, and a mutation of nodes: none is the pod webhooks'.
    rule("GX903", severity="warn", seed="test", kinds=("Pod",), operations=("UPDATE",), title="t", doc="d",
         relevance=Relevance(env=("MY_UPDATE_SETTING",)))(lambda subject: iter(()))
    rule("GX904", severity="warn", seed="test", kinds=("Deployment",), title="t", doc="d",
         relevance=Relevance(env=("MY_WORKLOAD_SETTING",)))(lambda subject: iter(()))
    MUTATIONS["GM904"] = Mutation("GM904", "t", "d", "test", frozenset({"Node"}),
                                  Relevance(env=("MY_NODE_SETTING",)))
    try:
        after = match_conditions(Settings())
    finally:
        del REGISTRY["GX903"], REGISTRY["GX904"], MUTATIONS["GM904"]
    for webhook in (POD_VALIDATE, CONTROLLED_VALIDATE, POD_MUTATE, DAEMONSETS):
        assert after[webhook] == before[webhook], webhook
    assert "MY_WORKLOAD_SETTING" in after[WORKLOADS][0]["expression"]


def test_a_rule_judging_env_names_alone_still_has_its_pods_sent():
    # GS010 and GS011 declare env names only: with every other rule off, the pod webhook's condition
    # is that container test alone.
    settings = Settings(rules={rule_id: {"enabled": False} for rule_id in EVERY_ID
                               if rule_id not in ("GS010", "GS011")})
    sends = functools.partial(created_pod_sent, match_conditions(settings)[POD_VALIDATE][0]["expression"])

    assert sends(_pod({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}))
    assert not sends(_pod({"env": [{"name": "PATH", "value": "/bin"}]}))
    assert not sends(_pod({"resources": {"limits": {MEM: "2"}}}))


def test_a_rule_that_judges_objects_must_say_what_makes_them_relevant():
    with pytest.raises(ValueError, match=r"GX902 judges .* but declares no relevance"):
        rule("GX902", severity="warn", seed="test", kinds=("Pod",), title="t", doc="d")(lambda subject: iter(()))
    assert "GX902" not in REGISTRY
    with pytest.raises(ValueError, match="unknown settings fields"):
        Relevance(resources=("gpu_memory",))


@pytest.mark.processes
def test_the_chart_refuses_a_config_that_renames_what_the_conditions_test(tmp_path):
    renamed = {"names": {"resources": {"gpu_mem": "example.com/gpu-memory"}}}
    values = {"scheduler": "none", "config": renamed}
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(Exception, match="policy export --webhooks helm"):
        chart.render(values, name="gpushare", namespace="gpushare-system")
    generated = yaml.safe_load(exported("helm", tmp_path, renamed))
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render({**values, **generated}, name="gpushare", namespace="gpushare-system")
    objects = [d for text in manifests.values() for d in yaml.safe_load_all(text) if d]
    validating = next(o for o in objects if o["kind"] == "ValidatingWebhookConfiguration")
    pods = next(w for w in validating["webhooks"] if w["name"] == POD_VALIDATE)
    assert "'example.com/gpu-memory'" in pods["matchConditions"][0]["expression"]


# -- custom workloads: training jobs, Ray, KServe, Argo, Volcano, LeaderWorkerSet ---------------------------

CUSTOM = "custom-workloads.validate.gpushare.io"
POD_SPEC_PATCH_WORKFLOW = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
spec:
  templates:
  - name: hello-world
    podSpecPatch: '{"containers":[{"name":"main","resources":{"limits":{"aliyun.com/gpu-mem":"{{inputs.m}}"}}}]}'
    container: {image: busybox}
"""


def custom_sent(obj: dict[str, Any], operation: str = "CREATE") -> bool:
    """The custom workloads' condition on ``obj``, as the API server evaluates it (request.kind set)."""
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    request = {"operation": operation, "kind": {"group": group, "version": version, "kind": obj.get("kind", "")},
               "resource": {"group": group, "version": version, "resource": "x"}}
    result = program(CUSTOM).evaluate({"object": celpy.json_to_cel(obj), "request": celpy.json_to_cel(request)})
    assert isinstance(result, celpy.celtypes.BoolType), f"CEL evaluation failed: {result!r}"
    return bool(result)


def custom_judged(obj: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for state in (None, STATE):
        verdict = ENGINE.validate(ENGINE.subject(obj["kind"], obj, namespace=obj["metadata"].get("namespace", "team-c"),
                                                state=state))
        found |= {f.rule for f in [*verdict.findings, *verdict.exempted]}
    return found


@st.composite
def custom_workloads(draw: st.DrawFn) -> dict[str, Any]:
    """A sample of each kind (tests/data/workloads) with every container's GPU requests drawn anew, some
    exemption annotations, and for Argo a pod spec patch that may mention the shared-GPU names."""
    case = draw(st.sampled_from(CASES))
    obj = case.without_gpus()
    obj["metadata"]["namespace"] = draw(st.sampled_from(["team-a", "team-b", "team-c"]))
    annotations = draw(st.sampled_from(ANNOTATIONS))
    if annotations:
        obj["metadata"]["annotations"] = annotations
    for pod in pod_sites(case.kind, obj):
        for site in pod.containers:
            drawn = draw(containers("x", 1))[0]
            if site.group == "resources":  # a TrainJob's resourcesPerNode: the node itself
                site.container["resources"].clear()
                site.container["resources"].update(drawn.get("resources") or {})
            elif "resources" in drawn:
                site.container["resources"] = drawn["resources"]
            else:
                site.container.pop("resources", None)
    for pattern in case.kind.patches:
        if draw(st.booleans()):
            patch = json.dumps({"containers": [{"name": "main", "resources": {"limits": {
                draw(st.sampled_from([MEM, "cpu"])): "2"}}}]})
            node = obj
            for part in pattern[:-1]:
                node = node[0] if part == "[]" else node.setdefault(part, {})
            if isinstance(node, dict):
                node[pattern[-1]] = patch
    return obj


CUSTOM_EXAMPLES = examples(40)  # each evaluates the whole condition (every kind's branch) in pure Python


@settings(max_examples=CUSTOM_EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(obj=custom_workloads())
def test_every_custom_workload_a_rule_judges_is_sent_and_only_what_the_rules_declare(obj):
    verdict = custom_sent(obj)
    assert verdict == TRIGGERS[CUSTOM].sends(obj["kind"], obj, SETTINGS)
    rules = {r for r in custom_judged(obj) if r in REGISTRY}
    assert verdict or not rules, f"{obj['kind']} judged by {sorted(rules)} but not sent"


JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.text(max_size=3)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.sampled_from(
                                                       ["spec", "containers", "resources", "limits", MEM, "template",
                                                        "templates", "container", "x"]), inner, max_size=3)),
                           max_leaves=12)


@settings(max_examples=CUSTOM_EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_shape_makes_the_custom_workload_condition_fail(data):
    # Argo's and KServe's "minimal" CRDs keep any field: whatever stands where the table expects a pod
    # template, a list or a container, the condition answers (an error would refuse the object).
    case = data.draw(st.sampled_from(CASES))
    obj = case.manifest()
    location = data.draw(st.sampled_from(case.kind.locations))
    cut = data.draw(st.integers(1, len(location.pattern)))
    node: Any = obj
    for part in location.pattern[:cut - 1]:
        if part == "[]":
            node = node[0] if isinstance(node, list) and node else None
        elif isinstance(node, dict):
            node = node.get(part) if part != "*" else next(iter(node.values()), None)
        if not isinstance(node, dict | list):
            break
    else:
        if isinstance(node, dict):
            node[location.pattern[cut - 1] if location.pattern[cut - 1] not in ("*", "[]") else "x"] = \
                data.draw(JSON_VALUES)
    assert custom_sent(obj) == TRIGGERS[CUSTOM].sends(obj["kind"], obj, SETTINGS)


def _custom(case_file: str, resources: dict[str, Any], **meta: Any) -> dict[str, Any]:
    case = next(c for c in CASES if c.file == case_file)
    obj = case.without_gpus()
    obj["metadata"].update(meta)
    node: Any = obj
    for part in case.resources:
        node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
    node.clear()
    node.update(resources)
    return obj


CUSTOM_NEEDED = [
    ("gpu-mem in a later replica", _custom("pytorchjob.yaml", {"limits": {MEM: "2Gi"}}), "GS003"),
    ("whole GPUs requested apart from their limit", _custom("raycluster.yaml", {"limits": {WHOLE: "1"},
                                                                             "requests": {WHOLE: "2"}}), "GS004"),
    ("a near miss in a TrainJob", _custom("trainjob.yaml", {"limits": {"aliyun.com/gpu-memory": "4"}}), "GS007"),
    ("the exemption annotation", _custom("jobset.yaml", {}, annotations={"gpushare.io/exempt": "GS003"}), "GE001"),
    ("a pod spec patch", {**yaml.safe_load(POD_SPEC_PATCH_WORKFLOW), "metadata": {"name": "w", "namespace": "t"}},
     "GW002"),
]


@pytest.mark.parametrize(("what", "obj", "judge"), CUSTOM_NEEDED, ids=[n[0] for n in CUSTOM_NEEDED])
def test_every_custom_workload_trigger_is_needed(what, obj, judge):
    assert judge in custom_judged(obj)
    assert custom_sent(obj)


CUSTOM_NOT_SENT = [
    ("whole GPUs as limits", _custom("mpijob.yaml", {"limits": {WHOLE: "1"}})),
    ("cpu and memory", _custom("leaderworkerset.yaml", {"limits": {"cpu": "1", "memory": "1Gi"}})),
    ("other real resources", _custom("inferenceservice.yaml", {"limits": {"alibabacloud.com/gpu-mem": "4"}})),
    ("a namesake of another group", {**_custom("pytorchjob.yaml", {"limits": {MEM: "2Gi"}}),
                                     "apiVersion": "example.com/v1"}),
]


@pytest.mark.parametrize(("what", "obj"), CUSTOM_NOT_SENT, ids=[n[0] for n in CUSTOM_NOT_SENT])
def test_custom_workloads_no_rule_judges_are_not_sent(what, obj):
    assert custom_judged(obj) == set()
    assert not custom_sent(obj)


def test_the_custom_workloads_condition_stays_far_below_the_parsers_limit():
    # cel-go refuses expressions over 100,000 code points by default (cel.ParserExpressionSizeLimit).
    assert len(conditions()[CUSTOM][0]["expression"]) < 50_000


# -- what the configuration turns off is not sent ----------------------------------------------------------

EVERY_ID = [*sorted(REGISTRY), "GM001", "GM002", "GM003"]
GPU_POD = {**_pod({"resources": {"limits": {MEM: "2", "aliyun.com/gpu-memory": "1"}}, "env": [
    {"name": "CGPU_DISABLE", "value": "true"}]}), "metadata": {"name": "gpushare-device-plugin-ds", "namespace": "x",
                                                               "annotations": {"gpushare.io/exempt": "GS003"}}}
QUOTA = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "x"},
         "spec": {"hard": {f"requests.{MEM}": "8"}}}
SAMPLES = {"Pod": GPU_POD, "Node": gpu_node("share-1", "share"), "ResourceQuota": QUOTA}


@pytest.mark.parametrize("scope", SCOPES, ids=[s.name for s in SCOPES])
def test_a_webhook_whose_rules_are_all_disabled_is_sent_nothing(scope):
    settings = Settings(rules={rule_id: {"enabled": False} for rule_id in EVERY_ID})
    (condition,) = match_conditions(settings)[scope.name]
    obj = SAMPLES.get(scope.kinds[0], as_deployment(GPU_POD))
    for operation, old in (("CREATE", None), ("UPDATE", {**obj, "metadata": {"name": "old"}})):
        request = {"operation": operation, "kind": {"group": "", "kind": obj["kind"]}, "subResource": scope.subresource,
                   "resource": {"resource": "daemonsets" if scope.daemonsets else "resourcequotas"}}
        verdict = _ENV.program(_ENV.compile(condition["expression"])).evaluate({
            "object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
            "request": celpy.json_to_cel(request)})
        assert verdict is not True and bool(verdict) is False, scope.name
    if scope.subresource:  # nothing a debug container sets is judged
        assert condition["expression"] == "false"
    # and with every rule on, each of these samples is sent to its webhooks
    assert sent(POD_VALIDATE, GPU_POD) and sent(POD_MUTATE, GPU_POD)
    assert sent("quotas.validate.gpushare.io", QUOTA, resource="resourcequotas")


def test_the_custom_workloads_component_is_registered_where_it_is_told():
    from policies.generate.match_conditions import custom_workloads_patch

    patch = custom_workloads_patch(Settings(), namespace="gpu-admission", excluded=("kube-system",))
    (webhook,) = patch["webhooks"]
    assert webhook["clientConfig"]["service"]["namespace"] == "gpu-admission"
    assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]
    assert webhook["matchConditions"] == match_conditions(Settings())[CUSTOM]
    assert {("kubeflow.org", "pytorchjobs"), ("ray.io", "rayclusters")} <= {
        (rule["apiGroups"][0], rule["resources"][0]) for rule in webhook["rules"]}


def test_kinds_that_keep_their_pod_spec_in_different_places_cannot_share_a_condition():
    from dataclasses import replace

    from policies.generate.match_conditions import condition

    mixed = replace(SCOPE[WORKLOADS], kinds=("Deployment", "CronJob"))
    with pytest.raises(ValueError, match="different paths"):
        condition(mixed, SETTINGS)


# metadata.ownerReferences, and whether a controller made the object: only `controller: true` says so.
OWNERS: list[tuple[Any, bool]] = [
    (None, False), ([], False), ({}, False), ("x", False), ([None], False), (["o"], False), ([{}], False),
    ([{"controller": False}], False), ([{"controller": "true"}], False), ([{"controller": None}], False),
    ([{"controller": True}], True), ([{"name": "a"}, {"controller": True}], True), ([None, {"controller": True}], True),
    ({"controller": True}, False), ([{"controller": 1}], False)]


@pytest.mark.parametrize(("owners", "made"), OWNERS, ids=[json.dumps(o) for o, _ in OWNERS])
def test_who_made_an_object_is_read_alike_in_python_and_in_the_condition(owners, made):
    from policies.generate.match_conditions import CEL_CONTROLLED, controlled

    obj = {"metadata": {"name": "p"} if owners is None else {"name": "p", "ownerReferences": owners}}
    assert controlled(obj) is made
    if isinstance(owners, list) and all(isinstance(o, dict) and isinstance(o.get("controller", False), bool)
                                        for o in owners):  # the shapes the API server admits
        cel = _ENV.program(_ENV.compile(CEL_CONTROLLED)).evaluate({"object": celpy.json_to_cel(obj)})
        assert bool(cel) is made
    assert controlled({"metadata": "x"}) is False and controlled({}) is False


def test_the_kinds_of_one_webhook_are_judged_on_the_same_parts_of_an_update():
    from policies.rules.judged import parts_for

    # The UPDATE condition is written from a webhook's first kind: it must stand for all of them.
    for scope in SCOPES:
        t = triggers(scope, SETTINGS)
        if "UPDATE" in scope.operations and not scope.daemonsets and not scope.subresource:
            texts = {parts_for(kind, t, SETTINGS).cel_changed() for kind in scope.kinds}
            assert len(texts) == 1, scope.name


def test_a_near_miss_alone_sends_a_custom_workload():
    # With GS007 the only rule on, the key test is the near-miss regexes alone (no list of names before them).
    settings = Settings(rules={rule_id: {"enabled": False} for rule_id in EVERY_ID if rule_id != "GS007"})
    program = _ENV.program(_ENV.compile(match_conditions(settings)[CUSTOM][0]["expression"]))

    def sends(key: str) -> bool:
        job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
               "spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [
                   {"name": "w", "image": "x", "resources": {"limits": {key: "1"}}}]}}}}}}
        request = {"operation": "CREATE", "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}}
        return bool(program.evaluate({"object": celpy.json_to_cel(job), "request": celpy.json_to_cel(request)}))

    assert sends("aliyun.com/gpu-memory") and not sends(MEM) and not sends("cpu")


def test_pods_gathered_at_every_depth_are_all_tested_once_wrapped_to_the_deepest():
    from types import SimpleNamespace

    from policies.generate.workload_conditions import gathered
    from policies.model.field_paths import parse_pattern

    def leaf(node: str) -> str:
        return f"(type({node}) == list ? {node} : [])"

    # Kinds keeping their container lists 0, 1, 2 and 3 maps or lists deep, at a map's values first.
    places = {"Flat": "spec.containers", "Roles": "spec.*.containers", "Nested": "spec.*.byName.*.containers",
              "Deep": "spec.groups[].roles.*.pods[].containers"}
    kinds = [SimpleNamespace(group="example.com", kind=kind) for kind in places]
    expression = gathered(kinds, lambda k: [(parse_pattern(places[k.kind]), leaf)], "c == 'hit'", "c")
    program = _ENV.program(_ENV.compile(expression))
    objects = {"Flat": lambda c: {"spec": {"containers": c}},
               "Roles": lambda c: {"spec": {"a": {"containers": ["miss"]}, "b": {"containers": c}}},
               "Nested": lambda c: {"spec": {"a": {"byName": {"x": {"containers": c}}}}},
               "Deep": lambda c: {"spec": {"groups": [{"roles": {}}, {"roles": {"r": {"pods": [{"containers": c}]}}}]}}}
    for kind, build in objects.items():
        request = celpy.json_to_cel({"kind": {"group": "example.com", "kind": kind}})
        for found in (True, False):
            obj = build(["miss", "hit"] if found else ["miss"])
            assert bool(program.evaluate({"object": celpy.json_to_cel(obj), "request": request})) is found, kind
