"""GB001-GB005 as a user reads them: which objects are placements, and each denial word for word
with the demand and what would be accepted."""

from __future__ import annotations

import pytest

from policies.rules.placement_rules import placed_pod, placement_of
from tests.support.cluster_objects import binding, gpu_pod, node, relabel, state_of
from tests.support.manifests import received

NODE = "cn-beijing.192.168.1.10"


def judged(engine, kind, obj, state, operation="CREATE", namespace="default"):
    subject = engine.subject(received(kind), received(obj), operation=received(operation), namespace=namespace,
                             state=state)
    return [(f.rule, f.message, f.path_text) for f in engine.validate(subject).findings]


@pytest.mark.parametrize(("target", "found"), [
    ({"kind": "Node", "name": NODE}, True), ({"name": NODE}, True),
    ({"kind": "Pod", "name": NODE}, False), ({"kind": "Namespace", "name": NODE}, False),
    ({"kind": "Node", "name": ""}, False), ({"kind": "Node"}, False),
    ("not-an-object", False),
])
def test_which_bindings_are_placements(engine, settings, target, found):
    obj = binding("p", NODE)
    obj["target"] = target
    subject = engine.subject(received("Binding"), received(obj), namespace="default")
    where = placement_of(subject)
    assert (where is not None) == found
    if found:
        assert (where.pod_key, where.node, where.path) == ("default/p", NODE, ("target", "name"))


@pytest.mark.parametrize(("kind", "obj", "operation", "found"), [
    ("Pod", gpu_pod("p", node_name=NODE), "CREATE", True),
    ("Pod", gpu_pod("p", node_name=NODE), "UPDATE", False),
    ("Binding", binding("p", NODE), "UPDATE", False),
    ("Binding", binding("p", NODE), "CONNECT", False),
    ("Binding", binding("", NODE), "CREATE", False),
    ("Pod", gpu_pod("p"), "CREATE", False),
    ("Pod", {"kind": "Pod", "metadata": {"name": "p"}, "spec": "x"}, "CREATE", False),
    ("Pod", {"kind": "Pod", "metadata": {"generateName": "p-"}, "spec": {"nodeName": NODE}}, "CREATE", False),
    ("Deployment", {"kind": "Deployment", "metadata": {"name": "p"}, "spec": {"nodeName": NODE}}, "CREATE", False),
    ("StatefulSet", {"kind": "StatefulSet", "metadata": {"name": "p"}, "spec": {"nodeName": NODE}}, "CREATE", False),
    ("APIService", {"kind": "APIService", "metadata": {"name": "p"}, "target": {"name": NODE}}, "CREATE", False),
])
def test_which_objects_are_placements(engine, kind, obj, operation, found):
    subject = engine.subject(received(kind), received(obj), operation=received(operation), namespace="")
    where = placement_of(subject)
    assert (where is not None) == found
    if found:
        assert (where.namespace, where.path) == ("default", ("spec", "nodeName"))  # no namespace given: default


def test_gb001_word_for_word(engine, settings):
    pods = [gpu_pod(f"mem-{i}", mem=1, node_name=NODE) for i in range(4)] + [gpu_pod("core-x", mem=2, core=30)]
    state = state_of(settings, [node(mode="core_mem")], pods)
    assert judged(engine, "Binding", binding("core-x", NODE), state) == [(
        "GB001", 'GB001: Binding default/core-x (container "cuda" aliyun.com/gpu-mem=2 '
                 f"aliyun.com/gpu-core.percentage=30): node {NODE} already runs mem-only pods (default/mem-0, "
                 "default/mem-1, default/mem-2 and 1 more); a core+mem pod cannot share the node with them; "
                 "bind it to a node that runs only pods of its own type, or none", "target.name")]


def test_gb002_word_for_word(engine, settings):
    state = state_of(settings, [node(mode="cgpu")], [gpu_pod("core-x", mem=2, core=30)])
    assert judged(engine, "Binding", binding("core-x", NODE), state) == [(
        "GB002", 'GB002: Binding default/core-x (container "cuda" aliyun.com/gpu-mem=2 '
                 f"aliyun.com/gpu-core.percentage=30): node {NODE} has ack.node.gpu.schedule=cgpu; core+mem pods "
                 "need core_mem; bind it to a node whose mode takes it", "target.name")]


def test_gb003_word_for_word(engine, settings):
    pods = [gpu_pod(f"small-{i:02}", mem=1, node_name=NODE, card=0) for i in range(20)]
    state = state_of(settings, [node(mode="cgpu", cards=1, card_gib=80)], [*pods, gpu_pod("one-more", mem=1)])
    assert judged(engine, "Binding", binding("one-more", NODE), state) == [(
        "GB003", 'GB003: Binding default/one-more (container "cuda" aliyun.com/gpu-mem=1): node '
                 f'{NODE}: container "cuda" fits no card under the cGPU limit of pods per card: GPU0 already runs '
                 "20 pods, the cGPU limit is 20; bind it to a node with a card below the pod limit", "target.name")]


def test_gb004_word_for_word(engine, settings):
    state = state_of(settings, [node(mode="cgpu", cards=2, card_gib=15)], [gpu_pod("big", mem=16)])
    assert judged(engine, "Binding", binding("big", NODE), state) == [(
        "GB004", 'GB004: Binding default/big (container "cuda" aliyun.com/gpu-mem=16): node '
                 f'{NODE}: container "cuda" fits no card: GPU0 has 15/15 GiB free, needs 16; GPU1 has 15/15 GiB '
                 'free, needs 16; bind it to a node with a card that fits container "cuda" aliyun.com/gpu-mem=16',
        "target.name")]


def test_gb005_word_for_word(engine, settings):
    static = relabel(node(mode="cgpu"), **{"gpushare.io__cpu-manager-policy": "static"})
    state = state_of(settings, [static], [gpu_pod("mem-a")])
    assert judged(engine, "Binding", binding("mem-a", NODE), state) == [(
        "GB005", 'GB005: Binding default/mem-a (container "cuda" aliyun.com/gpu-mem=2): node '
                 f"{NODE} runs the static CPU manager policy, which shared GPU scheduling does not support; pick a "
                 "node with policy none; bind it to a node with CPU manager policy none", "target.name")]


def test_whole_gpu_demands_are_named(engine, settings):
    whole = gpu_pod("whole", mem=None, node_name=NODE, extra_limits={"nvidia.com/gpu": "1", "aliyun.com/gpu": "2"})
    state = state_of(settings, [node(mode="cgpu")], [])
    [(rule, message, path)] = judged(engine, "Pod", whole, state)
    assert (rule, path) == ("GB002", "spec.nodeName")
    assert message.startswith("GB002: Pod default/whole (aliyun.com/gpu=2, nvidia.com/gpu=1): node ")


def test_an_exclusive_pod_on_a_shared_node_is_not_judged_here(engine, settings):
    whole = gpu_pod("whole", mem=None, extra_limits={"nvidia.com/gpu": "1"})
    state = state_of(settings, [node(mode="cgpu")], [whole])
    assert judged(engine, "Binding", binding("whole", NODE), state) == []


def test_a_pod_on_a_node_the_state_does_not_know(engine, settings):
    state = state_of(settings, [node(mode="cgpu")], [])
    pod = gpu_pod("p", node_name="ghost-node")
    [(_, message, _)] = judged(engine, "Pod", pod, state)
    assert message == (
        "GB001, GB002, GB003, GB004, GB005: Pod default/p to node ghost-node: GPU placement not checked because the "
        "cluster state is not usable (node ghost-node is not in the cluster state); admitted without the check "
        "(state.when_unavailable.placement: open)")


def test_a_pinned_pod_without_gpus_is_not_checked(engine, settings):
    state = state_of(settings, [], [])
    assert judged(engine, "Pod", gpu_pod("web", mem=None, node_name="ghost-node"), state) == []


def test_placed_pod_is_the_record_the_assume_cache_keeps(engine, settings):
    state = state_of(settings, [node(mode="cgpu")], [gpu_pod("p", mem=3)])
    from_binding = placed_pod(engine.subject(received("Binding"), received(binding("p", NODE)), namespace="default",
                                             state=state))
    assert (from_binding.key, from_binding.node_name, from_binding.mem) == ("default/p", NODE, 3)
    from_pod = placed_pod(engine.subject("Pod", gpu_pod("q", mem=4, node_name=NODE, namespace=""),
                                         namespace="team", state=state))
    assert (from_pod.key, from_pod.node_name, from_pod.mem) == ("team/q", NODE, 4)
    assert placed_pod(engine.subject("Binding", binding("ghost", NODE), namespace="default", state=state)) is None
    assert placed_pod(engine.subject("Binding", binding("p", NODE), namespace="default")) is None
    assert placed_pod(engine.subject("Pod", gpu_pod("web", mem=None, node_name=NODE), state=state)) is None
    assert placed_pod(engine.subject("Pod", gpu_pod("q", mem=4), state=state)) is None


def test_a_one_gpu_topology_pod_is_checked(engine, settings):
    state = state_of(settings, [node(mode="cgpu")], [])
    pod = gpu_pod("t", mem=None, node_name=NODE, extra_limits={"aliyun.com/gpu": "1"})
    assert [rule for rule, _, _ in judged(engine, "Pod", pod, state)] == ["GB002"]


def test_a_placement_cannot_be_changed_once_found(engine):
    import dataclasses

    where = placement_of(engine.subject("Binding", received(binding("p", NODE)), namespace="default"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        where.node = "elsewhere"  # type: ignore[misc]


def test_a_node_judged_without_its_mode_label_is_noted_once_under_gb002(engine, settings):
    unlabelled = relabel(node(mode="share"), **{"ack.node.gpu.schedule": None, "gpushare": "true"})
    state = state_of(settings, [unlabelled], [gpu_pod("p", mem=4)])
    assert judged(engine, "Binding", binding("p", NODE), state) == [(
        "GB002", f"GB002: Binding default/p: node {NODE} has no ack.node.gpu.schedule label; judged as share, which "
                 "its aliyun.com/gpu-mem capacity shows; label the node to say so", "target.name")]
    # a note, not a denial: the binding is admitted with the warning
    verdict = engine.validate(engine.subject(received("Binding"), received(binding("p", NODE)), namespace="default",
                                             state=state))
    assert verdict.allowed and [f.severity for f in verdict.findings] == ["warn"]


def test_gb004_names_the_cards_a_pod_is_spread_over(engine, settings):
    # aliyun.com/gpu-count: N/M of the pod's gpu-mem on each of M cards (ACK "Use cGPU to achieve GPU sharing
    # based on multiple GPUs")
    spread = gpu_pod("spread", mem=40)
    spread["metadata"]["labels"]["aliyun.com/gpu-count"] = "2"
    state = state_of(settings, [node(mode="cgpu", cards=2, card_gib=15)], [spread])
    demand = 'container "cuda" aliyun.com/gpu-mem=40 over 2 cards'
    assert judged(engine, "Binding", binding("spread", NODE), state) == [(
        "GB004", f"GB004: Binding default/spread ({demand}): node {NODE}: container \"cuda\" needs 2 cards and 0 fit: "
                 "GPU0 has 15/15 GiB free, needs 20; GPU1 has 15/15 GiB free, needs 20; bind it to a node with a card "
                 f"that fits {demand}", "target.name")]


@pytest.mark.processes
def test_the_rules_load_placement_only_when_a_placement_is_judged():
    # `gpushare check` on manifests without spec.nodeName never loads placement (the module's docstring);
    # the whole process is tests/cli/test_check_imports.py.
    import subprocess
    import sys

    probe = ("import sys, policies.rules\n"
             "print(sorted(m for m in ('policies.placement.placement', 'policies.model.cluster') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
