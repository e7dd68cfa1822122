"""GS010 and GS011 in the backstop, evaluated in this process with cel-python: with both rules set to
deny and envFrom refused, the policy denies the first finding word for word as the webhook writes it,
on containers, init containers and the ephemeral containers kubectl debug adds."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest

from policies.admission.engine import Engine
from policies.generate.backstop import backstop_policy
from policies.model.grants import StaticNamespaces
from tests.deploy.test_backstop import limits, pod, workload
from tests.support.policy_cel import PolicyCel
from tests.support.resource_keys import COUNT
from webhook.settings import Settings

SETTINGS = Settings(rules={"GS011": {"severity": "deny"}}, isolation={"env_from": "deny"})
ENGINE = Engine(SETTINGS)
ISOLATION = ("GS010", "GS011")
MEM_ENV, VISIBLE = "ALIYUN_COM_GPU_MEM_CONTAINER", "NVIDIA_VISIBLE_DEVICES"


@functools.cache
def hardened() -> PolicyCel:
    return PolicyCel(backstop_policy(SETTINGS, ENGINE.known_ids)[0])


def engine_first(obj: dict[str, Any], **update: Any) -> list[str]:
    """The engine's first GS010 and first GS011 finding (the policy says the first one of each)."""
    subject = ENGINE.subject(obj["kind"], obj, namespace="default", namespaces=StaticNamespaces({"default": {}}),
                             **update)
    found = [f for f in ENGINE.validate(subject).violations if f.rule in ISOLATION]
    return [next(f.message for f in found if f.rule == rule) for rule in ISOLATION
            if any(f.rule == rule for f in found)]


def env(*entries: dict[str, Any], **container: Any) -> dict[str, Any]:
    return {"env": list(entries), **container}


def var(name: str, value: str | None = None, **source: Any) -> dict[str, Any]:
    return {"name": name, **({"value": value} if value is not None else {}), **source}


GPU = limits(mem="2")
CASES = [  # (what, pod, how many isolation rules deny it)
    ("GM003's own value", pod({**GPU, **env(var(MEM_ENV, "2"))}), 0),
    ("GM003's value, spelt otherwise", pod({**limits(mem="1k"), **env(var(MEM_ENV, "1000"))}), 0),
    ("GM003's value in Ki", pod({**limits(mem="1Ki"), **env(var(MEM_ENV, "1024"))}), 0),
    ("GM003's value over four cards", pod({**limits(mem="8"), **env(var(MEM_ENV, "2"))}, labels={COUNT: "4"}), 0),
    ("GM003's value over cards of leading zeros", pod({**limits(mem="8"), **env(var(MEM_ENV, "4"))},
                                                      labels={COUNT: "02"}), 0),
    ("a size the pod does not ask", pod({**limits(mem="8"), **env(var(MEM_ENV, "8"))}, labels={COUNT: "4"}), 1),
    ("a size on an unreadable card count", pod({**limits(mem="8"), **env(var(MEM_ENV, "8"))}, labels={COUNT: "x"}), 0),
    ("a size on a zero card count", pod({**limits(mem="8"), **env(var(MEM_ENV, "8"))}, labels={COUNT: "0"}), 0),
    ("a size on too many cards", pod({**limits(mem="8"), **env(var(MEM_ENV, "8"))},
                                     labels={COUNT: "9999999999999999"}), 1),
    ("a size with a leading zero", pod({**GPU, **env(var(MEM_ENV, "2"), var(MEM_ENV, "02"))}), 1),
    ("a size over the card", pod({**limits(mem="2048"), **env(var(MEM_ENV, "2048"))}), 1),
    ("a size in an init container", pod(GPU, init=({**GPU, **env(var(MEM_ENV, "2"))},)), 1),
    ("a size read later", pod({**GPU, **env(var(MEM_ENV, valueFrom={"fieldRef": {"fieldPath": "x"}}))}), 1),
    ("a size without gpu-mem", pod({**limits(whole="1"), **env(var(MEM_ENV, "2"))}), 1),
    ("another device plugin variable", pod({**GPU, **env(var("ALIYUN_COM_GPU_SCHD_WEIGHT", "x" * 70))}), 1),
    ("an empty value from a secret", pod({**GPU, **env(var("ALIYUN_COM_GPU_MEM_DEV", valueFrom={}))}), 1),
    ("a lone dollar", pod({**GPU, **env(var("ALIYUN_COM_GPU_MEM_DEV", "1$"))}), 1),
    ("an mps variable", pod({**GPU, **env(var("CUDA_MPS_PIPE_DIRECTORY", "/tmp"))}), 1),
    ("an mps variable off mps nodes", pod({**GPU, **env(var("CUDA_MPS_PIPE_DIRECTORY", "/tmp"))},
                                          nodeSelector={"ack.node.gpu.schedule": "cgpu"}), 0),
    ("an mps variable on mps nodes", pod({**GPU, **env(var("CUDA_MPS_PIPE_DIRECTORY", "/tmp"))},
                                         nodeSelector={"ack.node.gpu.schedule": "mps"}), 1),
    ("an mps variable without gpu-mem", pod({**limits(whole="1"), **env(var("CUDA_MPS_PIPE_DIRECTORY", "/tmp"))}), 0),
    ("devices exposed beside whole GPUs", pod({**limits(whole="1"), **env(var(VISIBLE, "all"))}), 1),
    ("devices exposed beside topology GPUs", pod({**limits(topology="2"), **env(var(VISIBLE, "0,1"))}), 1),
    ("devices hidden", pod({**GPU, **env(var(VISIBLE, "none"))}, {**limits(cpu="1"), **env(var(VISIBLE, "void"))}),
     0),
    ("devices hidden in capitals", pod({**limits(cpu="1"), **env(var(VISIBLE, "NONE"))}), 1),
    ("devices exposed to a GPU-free container", pod(limits(cpu="1"), {**limits(cpu="1"), **env(var(VISIBLE, ""))}),
     0),
    ("devices maybe exposed later", pod({**limits(cpu="1"), **env(var(VISIBLE, valueFrom={"configMapKeyRef": {}}))}),
     1),
    ("devices exposed to a gpu-mem of zero", pod({**limits(mem="0"), **env(var(VISIBLE, "all"))}), 1),
    ("isolation lifted", pod({**GPU, **env(var("CGPU_DISABLE", "true"))}), 1),
    ("isolation lifted in capitals", pod({**GPU, **env(var("CGPU_DISABLE", "True"))}), 1),
    ("isolation lifted later", pod({**GPU, **env(var("CGPU_DISABLE", valueFrom={"secretKeyRef": {}}))}), 1),
    ("isolation kept, or lifted with a space", pod({**GPU, **env(var("CGPU_DISABLE", "false"))},
                                                   {**GPU, **env(var("CGPU_DISABLE", " true"))}),
     1),
    ("isolation lifted without gpu-mem", pod({**limits(cpu="1"), **env(var("CGPU_DISABLE", "true"))}), 0),
    ("both rules", pod({**GPU, **env(var("CGPU_DISABLE", "true"), var("ALIYUN_COM_GPU_MEM_DEV", "8"))},
                       {**limits(cpu="1"), **env(var(VISIBLE, "all"))}), 2),
    ("envFrom beside GPUs", pod({**GPU, "envFrom": [{"configMapRef": {"name": "gpu-env"}}]}), 1),
    ("envFrom, several sources", pod({**limits(whole="1"), "envFrom": [
        {"secretRef": {"name": "s"}}, {"configMapRef": {}}, {"prefix": "NVIDIA_", "configMapRef": {"name": "n"}}]}), 1),
    ("envFrom, an unnamed source", pod({**GPU, "envFrom": [{"prefix": "CGPU_", "secretRef": {}}]}), 1),
    ("envFrom, a source of neither kind", pod({**GPU, "envFrom": [{}]}), 1),
    ("envFrom with a harmless prefix", pod({**GPU, "envFrom": [{"prefix": "APP_", "configMapRef": {"name": "c"}}]}),
     0),
    ("envFrom without GPUs", pod({**limits(cpu="1"), "envFrom": [{"configMapRef": {"name": "c"}}]}), 0),
    ("envFrom in an init container", pod(GPU, init=({**GPU, "envFrom": [{"configMapRef": {"name": "c"}}]},)), 1),
]


def test_the_backstop_says_the_webhooks_first_isolation_finding_word_for_word():
    """One test over every case, stopping at the first wrong one: the policy is built once, and a change to
    the generator is seen by the test that builds it (tests/support/policy_cel.py)."""
    for what, obj, count in CASES:
        policy = hardened().failures(obj, rules=ISOLATION)
        if policy != engine_first(obj) or len(policy) != count:
            pytest.fail(repr((what, policy, engine_first(obj))))
    for value in ("$(X)", "$$", "a$(b"):  # a value the kubelet may expand is left to the webhook
        obj = pod({**GPU, **env(var("ALIYUN_COM_GPU_MEM_DEV", value))})
        if hardened().failures(obj, rules=ISOLATION) != [] or [m[:5] for m in engine_first(obj)] != ["GS010"]:
            pytest.fail(repr(value))
    for kind in ("Deployment", "CronJob", "PodTemplate"):  # a workload: its template, its pods' cards
        obj = workload(kind, pod({**limits(mem="8"), **env(var(MEM_ENV, "2"), var(VISIBLE, "all"))},
                                 labels={COUNT: "4"}))
        expected = [f'GS010: {kind} default/w container "c0": env {VISIBLE}=all exposes GPUs the device plugin did '
                    "not assign to this container; remove it or set none or void"]
        if not hardened().failures(obj, rules=ISOLATION) == engine_first(obj) == expected:
            pytest.fail(repr(kind))
    for what, (new, old), rules in DEBUG:  # kubectl debug: only the containers it adds
        policy = hardened().failures(new, old=old, sub_resource="ephemeralcontainers")
        engine = engine_first(new, operation="UPDATE", old=old, sub_resource="ephemeralcontainers", admission=True)
        if [m.split(":", 1)[0] for m in policy] != rules or policy != engine or not all(
                'ephemeral container "debugger' in m for m in policy):
            pytest.fail(repr((what, policy, engine)))


def _debugged(*added: dict[str, Any], before: tuple[dict[str, Any], ...] = ()) -> tuple[dict[str, Any], dict]:
    old = pod({**limits(mem="1500m"), **env(var("CGPU_DISABLE", "true"))}, schedulerName="default-scheduler")
    if before:
        old["spec"]["ephemeralContainers"] = list(before)
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [*before, *added]
    return new, old


DEBUG = [  # (what, the update, the policy's findings)
    ("a plain debug container", _debugged({"name": "debugger", "image": "busybox"}), []),
    ("a debug container exposing GPUs", _debugged({"name": "debugger", **env(var(VISIBLE, "all"))}), ["GS011"]),
    ("a debug container forging its size", _debugged({"name": "debugger", **env(var(MEM_ENV, "2"))}), ["GS010"]),
    ("a debug container lifting isolation", _debugged({"name": "debugger", **env(var("CGPU_DISABLE", "true"))}), []),
    ("an earlier debug container re-sent", _debugged({"name": "debugger-2"}, before=(
        {"name": "debugger-1", **env(var(VISIBLE, "all"))},)), []),
]


def test_with_env_from_warned_the_backstop_leaves_it_to_the_webhook():
    relaxed = Settings(rules={"GS011": {"severity": "deny"}})
    policy = PolicyCel(backstop_policy(relaxed, Engine(relaxed).known_ids)[0])
    assert policy.failures(pod({**GPU, "envFrom": [{"configMapRef": {"name": "c"}}]}), rules=ISOLATION) == []
    assert policy.failures(pod({**GPU, **env(var("CGPU_DISABLE", "true"))}), rules=ISOLATION) != []
