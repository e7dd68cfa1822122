"""GS008 and GS009 word for word, in process (policies/rules/sharing_rules.py): every pod of a
subject is judged (a custom workload's replicas, each its own pod template), every container of
each, and a finding points at the field to change.

The served paths (a PyTorchJob through `gpushare check`) are in tests/server/test_workloads.py; the
scheduler's counting behind both rules in tests/domain/test_scheduler_counting.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from policies.admission.engine import Engine
from tests.support.manifests import MEM, container, pod, pod_spec, received, workload
from webhook.settings import Settings

MULTI = "aliyun.com/gpu-count"
JOB = yaml.safe_load((Path(__file__).parents[1] / "data" / "workloads" / "pytorchjob.yaml").read_text())
WORKER = 'PyTorchJob kubeflow/pytorch-simple spec.pytorchReplicaSpecs.Worker.template'
MASTER = 'PyTorchJob kubeflow/pytorch-simple spec.pytorchReplicaSpecs.Master.template'


def found(engine, obj: dict[str, Any], rule: str) -> list[tuple[str, str, str]]:
    subject = engine.subject(obj["kind"], received(obj), namespace=obj["metadata"].get("namespace", "default"))
    return [(f.severity, f.message, f.path_text) for f in engine.validate(subject).findings if f.rule == rule]


def replicas(**templates: dict[str, Any]) -> dict[str, Any]:
    """The PyTorchJob with each named replica's pod template replaced (``labels`` and ``init`` for each)."""
    job = copy.deepcopy(JOB)
    for name, change in templates.items():
        template = job["spec"]["pytorchReplicaSpecs"][name]["template"]
        if "labels" in change:
            template["metadata"] = {"labels": change["labels"]}
        if "init" in change:
            template["spec"]["initContainers"] = change["init"]
        if "mem" in change:
            template["spec"]["containers"][0]["resources"]["limits"][MEM] = change["mem"]
    return job


def spread(obj: dict[str, Any], cards: str) -> dict[str, Any]:
    meta = obj["metadata"] if obj["kind"] == "Pod" else obj["spec"]["template"].setdefault("metadata", {})
    meta.setdefault("labels", {})[MULTI] = cards
    return obj


# ---- GS008: gpu-mem on an init container ------------------------------------------------------------

def test_gs008_judges_every_init_container_after_one_that_matches(engine):
    # The first init container asks for what the app containers do (the device plugin gives it their
    # card); the second does not, and is named.
    obj = pod(pod_spec(container("app", limits={MEM: 4}),
                       init=[container("same", limits={MEM: 4}), container("other", limits={MEM: 3})]))
    assert found(engine, obj, "GS008") == [(
        "warn", 'GS008: Pod default/p init container "other": aliyun.com/gpu-mem=3 holds no card: the scheduler '
                "counts app containers only, and the device plugin gives it a GPU only if it equals their sum (4); "
                "move it to an app container", "spec.initContainers[1]")]


def test_gs008_sums_every_app_container(engine):
    obj = pod(pod_spec(container("a", limits={MEM: 3}), container("b", limits={MEM: 5}),
                       init=[container("warm", limits={MEM: 8})]))
    assert found(engine, obj, "GS008") == []
    obj["spec"]["initContainers"][0]["resources"]["limits"][MEM] = 3
    assert [message for _, message, _ in found(engine, obj, "GS008")] == [
        'GS008: Pod default/p init container "warm": aliyun.com/gpu-mem=3 holds no card: the scheduler counts app '
        "containers only, and the device plugin gives it a GPU only if it equals their sum (8); move it to an app "
        "container"]


def test_gs008_judges_each_replica_of_a_custom_workload(engine):
    warm = [container("warm", limits={MEM: 2})]
    assert found(engine, replicas(Worker={"init": warm}), "GS008") == [(
        "warn", f'GS008: {WORKER}.spec.initContainers[0] (init container "warm"): aliyun.com/gpu-mem=2 holds no '
                "card: the scheduler counts app containers only, and the device plugin gives it a GPU only if it "
                "equals their sum (4); move it to an app container",
        "spec.pytorchReplicaSpecs.Worker.template.spec.initContainers[0]")]
    # The Master's init container matches its app container; the Worker's, after it, does not.
    both = replicas(Master={"init": [container("warm", limits={MEM: 4})]}, Worker={"init": warm})
    assert [path for _, _, path in found(engine, both, "GS008")] == [
        "spec.pytorchReplicaSpecs.Worker.template.spec.initContainers[0]"]


def test_gs008_compares_amounts_by_value_in_a_mib_cluster():
    # A device plugin counting MiB: 16,000 units on the init container and on the app container are
    # the same amount (numbers this large are distinct objects in Python: compared by value).
    mib = Engine(Settings(names={"memory_unit": "MiB"}))
    obj = pod(pod_spec(container("app", limits={MEM: 16000}), init=[container("warm", limits={MEM: 16000})]))
    assert found(mib, obj, "GS008") == []
    obj["spec"]["initContainers"][0]["resources"]["limits"][MEM] = 8000
    assert [message for _, message, _ in found(mib, obj, "GS008")] == [
        'GS008: Pod default/p init container "warm": aliyun.com/gpu-mem=8000 holds no card: the scheduler counts '
        "app containers only, and the device plugin gives it a GPU only if it equals their sum (16000); move it to "
        "an app container"]


def test_gs008_sums_the_app_containers_gs003_accepts(engine, settings):
    # An app container whose value GS003 refuses is on no card: the sum is the other's 4, not 5.
    too_big = settings.names.max_card_memory + 1
    obj = pod(pod_spec(container("a", limits={MEM: 4}), container("b", limits={MEM: too_big}),
                       init=[container("warm", limits={MEM: 5})]))
    assert [message for _, message, _ in found(engine, obj, "GS008")] == [
        'GS008: Pod default/p init container "warm": aliyun.com/gpu-mem=5 holds no card: the scheduler counts app '
        "containers only, and the device plugin gives it a GPU only if it equals their sum (4); move it to an app "
        "container"]


def test_gs008_leaves_a_value_gs003_refuses_to_gs003(engine, settings):
    # More than the largest card: GS003 refuses the value, so it is no card demand GS008 could compare.
    too_big = settings.names.max_card_memory + 1
    obj = pod(pod_spec(container("app", limits={MEM: 4}), init=[container("warm", limits={MEM: too_big})]))
    assert found(engine, obj, "GS008") == []


def test_gs008_counts_a_spread_pod_s_memory_over_its_cards(engine, settings):
    # Spread over 2 cards, a container may ask for up to twice the largest card: an init container
    # asking that much is compared with the app containers' sum like any other.
    twice = 2 * settings.names.max_card_memory
    obj = spread(pod(pod_spec(container("app", limits={MEM: 4}), init=[container("warm", limits={MEM: twice})])),
                 "2")
    assert [message for _, message, _ in found(engine, obj, "GS008")] == [
        f'GS008: Pod default/p init container "warm": aliyun.com/gpu-mem={twice} holds no card: the scheduler '
        "counts app containers only, and the device plugin gives it a GPU only if it equals their sum (4); move "
        "it to an app container"]


# ---- GS009: gpu-mem spread over several cards divides evenly ------------------------------------------

def test_gs009_names_the_container_and_the_nearest_amount_that_divides(engine):
    cases = [(9, "4", "2.25", 12), (7, "2", "3.5", 8), (1, "2", "0.5", 2), (10, "4", "2.5", 12)]
    for mem, cards, share, rounded in cases:
        obj = spread(pod(pod_spec(container("c", limits={MEM: mem}))), cards)
        assert found(engine, obj, "GS009") == [(
            "deny", f'GS009: Pod default/p container "c": aliyun.com/gpu-mem={mem} over {cards} cards '
                    f"(aliyun.com/gpu-count={cards}) is {share} a card, not a whole number; use {rounded}",
            "spec.containers[0]")]
    for mem, cards in [(8, "4"), (6, "2"), (5, "1")]:
        assert found(engine, spread(pod(pod_spec(container("c", limits={MEM: mem}))), cards), "GS009") == []


def test_gs009_judges_every_app_container_and_no_init_container(engine):
    obj = spread(pod(pod_spec(container("even", limits={MEM: 4}), container("odd", limits={MEM: 3}),
                              init=[container("warm", limits={MEM: 3})])), "2")
    assert [(message, path) for _, message, path in found(engine, obj, "GS009")] == [(
        'GS009: Pod default/p container "odd": aliyun.com/gpu-mem=3 over 2 cards (aliyun.com/gpu-count=2) is 1.5 '
        "a card, not a whole number; use 4", "spec.containers[1]")]


def test_gs009_leaves_alone_a_labelled_pod_asking_for_no_gpu_memory(engine):
    # The label spreads gpu-mem; a pod without any (whole GPUs, or none) is not GS009's, whatever it says.
    for limits in ({}, {"aliyun.com/gpu": 1}):
        obj = spread(pod(pod_spec(container("c", limits=limits))), "two")
        assert found(engine, obj, "GS009") == []
    assert len(found(engine, spread(pod(pod_spec(container("c", limits={MEM: 8}))), "two"), "GS009")) == 1


def test_gs009_points_at_the_label_where_it_is_written(engine):
    bad = "two"
    expected = {
        "Pod": "metadata.labels",
        "Deployment": "spec.template.metadata.labels",
        "CronJob": "spec.jobTemplate.spec.template.metadata.labels",
    }
    for kind, labels in expected.items():
        obj = workload(kind, pod_spec(container("c", limits={MEM: 8})))
        meta = obj["metadata"] if kind == "Pod" else \
            (obj["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else obj["spec"])["template"]["metadata"]
        meta.setdefault("labels", {})[MULTI] = bad
        assert found(engine, obj, "GS009") == [(
            "deny", f"GS009: {kind} default/w: label aliyun.com/gpu-count='two' is not a number of cards; use a "
                    "whole number, 1 or more", f'{labels}["aliyun.com/gpu-count"]')], kind


def test_gs009_judges_each_replica_of_a_custom_workload(engine):
    # The Master carries no label and is not judged; the Worker's says "0" cards and is named at its
    # own template; the Master's 4 GiB over 3 cards, once labelled, is.
    worker_zero = replicas(Worker={"labels": {MULTI: "0"}})
    assert found(engine, worker_zero, "GS009") == [(
        "deny", f"GS009: {WORKER}: label aliyun.com/gpu-count='0' is not a number of cards; use a whole number, "
                "1 or more", 'spec.pytorchReplicaSpecs.Worker.template.metadata.labels["aliyun.com/gpu-count"]')]
    worker_three = replicas(Worker={"labels": {MULTI: "3"}})
    assert [message for _, message, _ in found(engine, worker_three, "GS009")] == [
        f'GS009: {WORKER}.spec.containers[0] (container "pytorch"): aliyun.com/gpu-mem=4 over 3 cards '
        "(aliyun.com/gpu-count=3) is 1.33333 a card, not a whole number; use 6"]
    # A bad label on the first replica does not stop the second from being judged.
    both = replicas(Master={"labels": {MULTI: "many"}}, Worker={"labels": {MULTI: "3"}})
    assert [message.split(":")[1].strip() for _, message, _ in found(engine, both, "GS009")] == [
        f"{MASTER}", f'{WORKER}.spec.containers[0] (container "pytorch")']
