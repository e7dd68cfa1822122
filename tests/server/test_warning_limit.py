"""Admission warnings the API server passes on whole: "Warnings over 256 characters ... may be
truncated" (AdmissionResponse). Every rule that can answer an admission review is made to warn
(any rule can be configured so), on objects and a cluster with the longest names Kubernetes
allows; every warning the response carries fits, starts with the rule id and the object, and the
whole message is kept in the review's audit annotations.

The objects are the hand-written ``cases`` below and, for a rule none of them makes speak (a rule
added later), an object of the generic relevance generator (tests/deploy/test_rule_relevance.py)
on which the rule warns, renamed to the longest names: a new rule needs no case here. Only a rule
that generator cannot reach (its ``OUT_OF_REACH``) must have a hand-written case."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import pytest

from policies.admission.engine import Engine
from policies.model.resources import POD_SPEC_PATHS
from policies.model.settings import KUBERNETES_GROUPS
from policies.model.warning_text import WARNING_LIMIT, brief
from policies.rules.base import REGISTRY, Found, rule
from policies.rules.relevance import Relevance
from tests.deploy.test_match_conditions import NODE_OBJECTS
from tests.deploy.test_rule_relevance import OUT_OF_REACH, Witness, witnesses
from tests.support import cluster_builders
from tests.support.cluster_objects import binding, gpu_pod, node, state_of, with_mode
from tests.support.helpers import admission_review
from tests.support.manifests import container, pod, pod_spec
from webhook.routes.review import build_response, parse_review
from webhook.settings import Settings

MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"
NS = "n" * 63  # a namespace is a DNS label: at most 63 characters
NAME = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])  # a DNS subdomain: at most 253
NODE = ".".join(["cn-beijing", "x" * 60, "y" * 60, "z" * 60, "w" * 59])
OTHER_NODE = NODE[:-1] + "v"
C = "c" * 63  # a container name is a DNS label
# Audit-only rules (GA*) never answer a review; mutations (GM*) patch, they do not warn.
ADMISSION_RULES = sorted(r for r in REGISTRY if not r.startswith(("GA", "GM")))
SETTINGS = Settings.model_validate({"rules": {r: {"severity": "warn"} for r in ADMISSION_RULES}})


def long_pod(*limits: dict[str, Any], requests: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    containers = [container(C if i == 0 else f"{C[:-1]}{i}", lim, requests if i == 0 else None)
                  for i, lim in enumerate(limits)]
    return pod(pod_spec(*containers), name=NAME, namespace=NS, **meta)


def cases() -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(what, kind, object, subject options): together they make every admission rule speak."""
    shared = node(NODE, mode="share")
    running = gpu_pod(NAME, mem=4, node_name=NODE, namespace=NS)
    cluster = state_of(SETTINGS, [shared, node(OTHER_NODE, mode="core_mem")], [running])
    core_pod = gpu_pod(NAME, mem=2, core=30, namespace=NS)
    crowd = [gpu_pod(f"{NAME[:-3]}{i:03d}", mem=1, node_name=NODE, namespace=NS, card=0) for i in range(20)]
    static = node(NODE, mode="share", labels={"gpushare.io/cpu-manager-policy": "static"})

    quota_state = state_of(SETTINGS, [shared], [running])
    quota_state.upsert_quota("ResourceQuota", quota({f"requests.{MEM}": "10"}))
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": NAME, "namespace": NS},
                  "spec": {"replicas": 4, "template": {"spec": pod_spec(container(C, {MEM: 8}))}}}

    def bind(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], to: str = NODE) -> tuple[Any, ...]:
        return "Binding", binding(NAME, to, NS), {"state": state_of(SETTINGS, nodes, pods)}

    return [
        ("core 33", "Pod", long_pod({MEM: 2, CORE: 33}), {}),
        ("core without memory", "Pod", long_pod({CORE: 30}), {}),
        ("2Gi", "Pod", long_pod({MEM: "2Gi"}), {}),
        ("request below limit", "Pod", long_pod({MEM: 3}, requests={MEM: 2}), {}),
        ("mixed containers", "Pod", long_pod({MEM: 2}, {MEM: 2, CORE: 30}), {}),
        ("whole and shared", "Pod", long_pod({MEM: 2, "nvidia.com/gpu": 1}), {}),
        ("near miss", "Pod", long_pod({"aliyun.com/gpu-memory": 2}), {}),
        ("memory on an init container", "Pod", pod(pod_spec(container(C, {MEM: 2}), init=[container(
            f"{C[:-1]}i", {MEM: 3})]), name=NAME, namespace=NS), {}),
        ("spread that does not divide", "Pod", long_pod({MEM: 8}, labels={"aliyun.com/gpu-count": "3"}), {}),
        ("a device plugin variable set", "Pod", pod(pod_spec(container(C, {MEM: 2}, env=[
            {"name": "ALIYUN_COM_GPU_MEM_DEV", "value": "40"}])), name=NAME, namespace=NS), {}),
        ("isolation lifted", "Pod", pod(pod_spec(container(C, {MEM: 2}, env=[
            {"name": "CGPU_DISABLE", "value": "true"}])), name=NAME, namespace=NS), {}),
        ("exemption nobody allowed", "Pod", long_pod({MEM: 2}, annotations={"gpushare.io/exempt": "GS003"}), {}),
        ("bigger than every card", "Pod", long_pod({MEM: 40}), {"state": cluster}),
        ("unknown mode", "Node", node(NODE, mode="bogus"), {}),
        ("static CPU policy", "Node", static, {}),
        ("mode not in the region", "Node", node(NODE, mode="mps", region="ap-southeast-9"), {}),
        ("not ECS", "Node", node(NODE, provider_id="aws:///us-east-1a/i-0123"), {}),
        ("relabelled to core_mem", "Node", with_mode(shared, "core_mem"),
         {"operation": "UPDATE", "old": shared, "state": cluster}),
        ("mode changed under pods", "Node", with_mode(shared, "exclusive"),
         {"operation": "UPDATE", "old": shared, "state": cluster}),
        ("old driver", "Node", node(NODE, driver="418.0"), {}),
        ("mps without its daemon", "Node", node(NODE, mode="mps"), {}),
        ("mode does not take it", *bind([shared], [running, core_pod])),
        ("mixed job types", *bind([node(OTHER_NODE, mode="core_mem")],
                                   [gpu_pod(NAME[:-1] + "q", mem=2, node_name=OTHER_NODE, namespace=NS), core_pod],
                                   OTHER_NODE)),
        ("crowded card", *bind([node(NODE, cards=1, card_gib=100)], [*crowd, gpu_pod(NAME, mem=1, namespace=NS)])),
        ("does not fit the card", *bind([shared], [gpu_pod(NAME, mem=40, namespace=NS)])),
        ("static node", *bind([static], [gpu_pod(NAME, mem=2, namespace=NS)])),
        # A workload names its group only where Kubernetes has the kind too: Job.batch.volcano.sh, Workflow.
        ("a Volcano job scheduled by volcano", "Job.batch.volcano.sh", workload(
            "batch.volcano.sh/v1alpha1", "Job", {"schedulerName": "volcano", "tasks": [
                {"name": "t", "replicas": 1, "template": {"spec": {"containers": [container(C, {MEM: 2})]}}}]}), {}),
        ("a ResourceQuota key quota does not count", "ResourceQuota", quota({MEM: "40"}), {}),
        ("a GPU memory quota in bytes", "ResourceQuota", quota({f"requests.{MEM}": "16Gi"}), {}),
        ("a quota node's min over its max", "ElasticQuotaTree", tree({MEM: "100"}, {MEM: "100"}, [
            {"name": NAME, "namespaces": [NS], "min": {MEM: "60"}, "max": {MEM: "40"}}]), {}),
        ("a root whose max is not its min", "ElasticQuotaTree", tree({MEM: "100"}, {MEM: "120"}, []), {}),
        ("more than the quota has left", "Deployment", deployment, {"state": quota_state}),
        ("GPU requests in a pod spec patch", "Workflow", workload(
            "argoproj.io/v1alpha1", "Workflow", {"entrypoint": "main", "templates": [
                {"name": "main", "container": {"image": "busybox"}, "podSpecPatch": json.dumps(
                    {"containers": [{"name": "main", "resources": {"limits": {MEM: "4"}}}]})}]}), {}),
    ]


def quota(hard: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": NAME, "namespace": NS},
            "spec": {"hard": hard}}


def tree(root_min: dict[str, Any], root_max: dict[str, Any], children: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"root": {"name": "root", "min": root_min, "max": root_max, "children": children}}}


def workload(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": NAME, "namespace": NS}, "spec": spec}


# The relevance generator's cluster (its nodes and the GPU pod it runs), every name a longest one: a
# pod it creates on a node is judged against the nodes of the same names, beside a pod of its own.
LONG_NODES = {n["metadata"]["name"]: NODE[:-len(n["metadata"]["name"])] + n["metadata"]["name"] for n in NODE_OBJECTS}


def _renamed_node(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    name = LONG_NODES[obj["metadata"]["name"]]
    obj["metadata"]["name"] = obj["metadata"]["labels"]["kubernetes.io/hostname"] = name
    return obj


@functools.cache
def long_state() -> Any:
    return cluster_builders.snapshot(*map(_renamed_node, NODE_OBJECTS), cluster_builders.gpu_pod(
        f"{NAME[:-1]}r", LONG_NODES["cgpu-1"], mem=10, namespace=NS), names=SETTINGS.names)


def lengthened(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with the longest names: its own, its namespace's, each container's, its node's."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    if obj["kind"] == "Node":
        meta["name"] = LONG_NODES.get(meta["name"], NODE)
        if "kubernetes.io/hostname" in meta.get("labels", {}):
            meta["labels"]["kubernetes.io/hostname"] = meta["name"]
        return obj
    meta.update(name=NAME, namespace=NS)

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("nodeName"), str):
                value["nodeName"] = LONG_NODES.get(value["nodeName"], NODE)
            for group in ("containers", "initContainers"):
                for index, item in enumerate(value.get(group) or []):
                    if isinstance(item, dict) and "name" in item:  # distinct, as the API server wants them
                        item["name"] = f"{C[:-3]}{group[0]}{index:02d}"
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
    walk(obj.get("spec"))
    return obj


def label(w: Witness) -> str:
    """How a message names the witness's kind: with its group where Kubernetes has the kind too."""
    return f"{w.kind}.{w.group}" if w.group not in KUBERNETES_GROUPS and w.kind in POD_SPEC_PATHS else w.kind


def generated_cases(rules: set[str]) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """For each rule of ``rules``, the first object of the relevance generator it warns about once
    renamed to the longest names (with the generator's cluster, renamed too, or without a cluster)."""
    wanted, found = set(rules), []
    for w in witnesses(SETTINGS):
        if not wanted:
            break
        obj, old = lengthened(w.obj), (lengthened(w.old) if w.old is not None else None)
        for state in (None, long_state()):
            options = {"operation": w.operation, **({"old": old} if old is not None else {}),
                       **({"state": state} if state is not None else {})}
            warned = {f.rule for f in verdict_of(obj, options).warnings} & wanted
            if warned:
                found.append((f"generated for {', '.join(sorted(warned))}", label(w), obj, options))
                wanted -= warned
    return found


@functools.cache
def engine() -> Engine:
    return Engine(SETTINGS)


def verdict_of(obj: dict[str, Any], options: dict[str, Any]) -> Any:
    namespace = "" if obj["kind"] == "Node" else NS
    return engine().validate(engine().subject(obj["kind"], obj, namespace=namespace, **options))


def answer(label: str, obj: dict[str, Any], options: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    kind = obj.get("kind", label)
    group, _, version = obj.get("apiVersion", "v1").rpartition("/")
    namespace = "" if kind == "Node" else NS
    verdict = engine().validate(engine().subject(kind, obj, namespace=namespace, **options))
    review = parse_review(admission_review(obj, kind=kind, namespace=namespace, group=group, version=version,
                                           operation=options.get("operation", "CREATE"), old=options.get("old")))
    return verdict.warnings, build_response(review, verdict)["response"]


def spoken(examples: list[tuple[str, str, dict[str, Any], dict[str, Any]]]) -> set[str]:
    """The rules warning about the examples; every warning fits, starts with the rule id and the
    object, and is kept whole in the audit annotations."""
    spoke: set[str] = set()
    for what, kind, obj, options in examples:
        warnings, response = answer(kind, obj, options)
        assert warnings, what
        assert len(response["warnings"]) == len(warnings)
        for finding, sent in zip(warnings, response["warnings"], strict=True):
            spoke.add(finding.rule)
            assert len(sent) <= WARNING_LIMIT, (what, len(sent), sent)
            assert sent.startswith(f"{finding.rule}: {kind} "), (what, sent)  # the decisive part first
            assert len(finding.message) > WARNING_LIMIT  # these names make every message long...
            assert finding.message in response["auditAnnotations"][f"warning.{finding.rule}"]  # ...kept whole
    return spoke


def test_every_admission_rule_warns_within_the_limit_and_keeps_the_whole_text_in_the_audit_log():
    spoke = spoken(cases())
    unreachable = sorted(set(OUT_OF_REACH) - spoke)
    assert not unreachable, f"{unreachable}: the relevance generator cannot reach them; give each a case in cases()"
    spoke |= spoken(generated_cases(set(ADMISSION_RULES) - spoke))  # a rule added later: a generated object
    assert sorted(spoke) == ADMISSION_RULES


def test_the_generated_objects_alone_make_every_rule_the_generator_reaches_speak():
    """What a rule without a hand-written case gets, tried on every rule that has one."""
    reachable = set(ADMISSION_RULES) - set(OUT_OF_REACH)
    assert sorted(reachable - spoken(generated_cases(reachable))) == []


def _toy(named: bool) -> Any:
    """A rule added later (CONTRIBUTING.md's toy): warns of a container setting TOY_GPU_SETTING,
    naming the object first, or not."""
    def check(subject: Any) -> Any:
        spec, base = subject.pod_spec
        for index, each in enumerate(spec.get("containers", []) if isinstance(spec, dict) else []):
            if any(e.get("name") == "TOY_GPU_SETTING" for e in each.get("env", [])):
                path = (*base, "containers", index)
                where = subject.naming("containers", each["name"], path) if named else "a container"
                yield Found(f"{where} sets TOY_GPU_SETTING; accepted: the container without it " + "x" * 200, path)
    return check


@pytest.mark.parametrize("named", [True, False], ids=["naming the object", "not naming it"])
def test_a_rule_without_a_case_is_made_to_speak_by_a_generated_object(named):
    rule("GX905", severity="warn", seed="test", kinds=("Pod",), title="t", doc="d",
         relevance=Relevance(env=("TOY_GPU_SETTING",)))(_toy(named))
    engine.cache_clear()
    try:
        examples = generated_cases({"GX905"})
        assert [what for what, *_ in examples] == ["generated for GX905"]
        if named:
            assert "GX905" in spoken(examples)
        else:
            with pytest.raises(AssertionError, match="GX905: a container"):
                spoken(examples)
    finally:
        del REGISTRY["GX905"]
        engine.cache_clear()


@pytest.mark.parametrize("text", ["short", "x" * 256, "GS001: " + "word " * 80, "GS001: Pod " + "n" * 300,
                                  "GS001: " + "word " * 60 + "(a detail) " * 5 + "; what was done (setting: open)"])
def test_brief_keeps_short_text_and_cuts_long_text_at_a_word(text):
    out = brief(text)
    assert len(out) <= WARNING_LIMIT
    assert out == text if len(text) <= WARNING_LIMIT else "…" in out and out[:11] == text[:11]
    if "; what was done" in text:  # the last clause, what the webhook did, is kept whole
        assert out.endswith("; what was done (setting: open)")


def test_fail_open_warnings_fold_rule_ids_and_keep_what_was_done():
    message = ("GB001, GB002, GB003, GB004, GB005: Binding default/core-x to node cn-beijing.192.168.1.10: GPU "
               "placement not checked because this replica is not the leader; bindings are judged by the leader "
               "(the leader is replica-a_f8309351); admitted without the check (state.when_unavailable.placement: "
               "open)")
    assert brief(message) == ("GB001-GB005: Binding default/core-x to node cn-beijing.192.168.1.10: GPU placement "
                              "not checked because this replica is not the leader; bindings are judged by the leader "
                              "(…); admitted without the check (state.when_unavailable.placement: open)")


def test_the_server_passes_gc001_on_whole(server, session):
    """GC001 for a pod bigger than every card of the demo cluster: 290 characters before."""
    job = pod(pod_spec(container("cuda", {MEM: 40})), name="big", namespace="default")
    reply = server.post_json("/validate", admission_review(job), session=session).json()["response"]
    [warning] = reply["warnings"]
    full = reply["auditAnnotations"]["warning.GC001"]
    assert len(full) > WARNING_LIMIT >= len(warning)
    # The rule's short form: what does not fit and what would, without the advice that follows.
    assert warning == ('GC001: Pod default/big cannot run on any node the cluster has: container "cuda" asks for '
                       "aliyun.com/gpu-mem=40, more than the largest card of any node that could take it: 31 GiB "
                       "(GPU0 of node cn-hangzhou.192.168.2.20)")
    assert full == f"{warning}; accepted: a request that fits such a card, or add nodes with bigger cards first"
