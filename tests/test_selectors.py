"""Card-model scheduling (seed 003): nodeSelector and required node affinity on any label."""

from __future__ import annotations

import pytest

from policies.resources import ShapeError
from policies.scoring import Scorer, pod_request
from policies.selectors import node_selector_from_spec

from .cluster_builders import gpu_pod

V100_32 = "Tesla-V100-SXM2-32GB"
NAME = "aliyun.accelerator/nvidia_name"


def affinity(*terms: list[dict]) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]}}}


def rank(pod: dict, state, names) -> dict[str, object]:
    request = pod_request("Pod", pod, names, key="default/" + pod["metadata"]["name"])
    return {s.node: s for s in Scorer(names).rank(request, state)}


def test_not_in_keeps_the_pod_off_v100_32gb_nodes(settings, demo_state):
    """Seed 003, "Avoid a GPU model": NotIn on nvidia_name; the pod may run on any other GPU node."""
    pod = gpu_pod("avoid", mem=4, spec={"affinity": affinity([{"key": NAME, "operator": "NotIn",
                                                               "values": [V100_32]}])})
    ranking = rank(pod, demo_state, settings.names)
    v100 = ranking["cn-hangzhou.192.168.2.20"]  # the demo's cgpu node carries Tesla-V100-SXM2-32GB
    assert not v100.fits and v100.unresolvable
    assert v100.problems == [("NodeAffinity", f"node cn-hangzhou.192.168.2.20: required node affinity {NAME} "
                                              f"NotIn [{V100_32}]: node has {NAME}={V100_32}")]
    assert ranking["cn-zhangjiakou.192.168.66.139"].fits
    # Without the affinity the V100-32GB node is a candidate.
    assert rank(gpu_pod("any", mem=4), demo_state, settings.names)["cn-hangzhou.192.168.2.20"].fits


def test_node_selector_pins_a_model(settings, demo_state):
    """Seed 003, "Specify a GPU model": nodeSelector on nvidia_name."""
    pod = gpu_pod("pin", mem=4, spec={"nodeSelector": {NAME: V100_32}})
    ranking = rank(pod, demo_state, settings.names)
    assert [n for n, s in ranking.items() if s.fits] == ["cn-hangzhou.192.168.2.20"]
    assert ranking["cn-zhangjiakou.192.168.66.139"].reasons == [
        f"NodeAffinity: node cn-zhangjiakou.192.168.66.139: nodeSelector {NAME}={V100_32}: node has {NAME}=Tesla-T4"]


def test_memory_and_count_labels(settings, demo_state):
    names = settings.names
    by_mem = gpu_pod("mem", mem=4, spec={"affinity": affinity([{"key": "aliyun.accelerator/nvidia_mem",
                                                                "operator": "In", "values": ["32510MiB"]}])})
    assert [n for n, s in rank(by_mem, demo_state, names).items() if s.fits] == ["cn-hangzhou.192.168.2.20"]
    many_cards = gpu_pod("count", whole=2, spec={"affinity": affinity([{"key": "aliyun.accelerator/nvidia_count",
                                                                      "operator": "Gt", "values": ["4"]}])})
    assert [n for n, s in rank(many_cards, demo_state, names).items() if s.fits] == ["cn-shanghai.192.168.3.30"]
    # Gt compares whole numbers only, as kube-scheduler does: "16160MiB" never matches.
    gt_mem = gpu_pod("gt", mem=4, spec={"affinity": affinity([{"key": "aliyun.accelerator/nvidia_mem",
                                                               "operator": "Gt", "values": ["1000"]}])})
    verdicts = rank(gt_mem, demo_state, names)
    assert not any(s.fits for s in verdicts.values())
    assert "Gt [1000]: node has aliyun.accelerator/nvidia_mem=15360MiB" in verdicts[
        "cn-zhangjiakou.192.168.66.139"].problems[0][1]


LABELS = {"a": "1", "model": "T4", "count": "8"}


@pytest.mark.parametrize(("expressions", "matches"), [
    ([{"key": "model", "operator": "In", "values": ["T4", "A10"]}], True),
    ([{"key": "model", "operator": "In", "values": ["A10"]}], False),
    ([{"key": "model", "operator": "NotIn", "values": ["A10"]}], True),
    ([{"key": "missing", "operator": "NotIn", "values": ["x"]}], True),
    ([{"key": "a", "operator": "Exists"}], True),
    ([{"key": "missing", "operator": "Exists"}], False),
    ([{"key": "missing", "operator": "DoesNotExist"}], True),
    ([{"key": "a", "operator": "DoesNotExist"}], False),
    ([{"key": "count", "operator": "Gt", "values": ["7"]}], True),
    ([{"key": "count", "operator": "Gt", "values": ["8"]}], False),
    ([{"key": "count", "operator": "Lt", "values": ["9"]}], True),
    ([{"key": "model", "operator": "Lt", "values": ["9"]}], False),
    ([{"key": "missing", "operator": "Gt", "values": ["0"]}], False),
    ([{"key": "a", "operator": "Exists"}, {"key": "model", "operator": "In", "values": ["A10"]}], False),
])
def test_operators(expressions, matches):
    selector = node_selector_from_spec({"affinity": affinity(expressions)}, ("spec",))
    assert (selector.mismatch(LABELS, "n1") is None) is matches


def test_terms_are_ored_and_an_empty_term_matches_nothing():
    either = node_selector_from_spec({"affinity": affinity([{"key": "model", "operator": "In", "values": ["A10"]}],
                                                           [{"key": "a", "operator": "Exists"}])}, ("spec",))
    assert either.mismatch(LABELS, "n1") is None
    neither = node_selector_from_spec({"affinity": affinity([{"key": "model", "operator": "In", "values": ["A10"]}],
                                                            [{"key": "b", "operator": "Exists"}])}, ("spec",))
    assert neither.mismatch(LABELS, "n1") == ("required node affinity: no term matches: term 0: model In [A10]: "
                                              "node has model=T4; term 1: b Exists: node has no label b")
    empty = node_selector_from_spec({"affinity": affinity([])}, ("spec",))
    assert empty.mismatch(LABELS, "n1") == "required node affinity an empty nodeSelectorTerm matches no node"


def test_match_fields_on_the_node_name():
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}}}
    selector = node_selector_from_spec(spec, ("spec",))
    assert selector.mismatch(LABELS, "n2") is None
    assert selector.mismatch(LABELS, "n1") == "required node affinity metadata.name In [n2]: node is named n1"


def test_node_selector_and_affinity_must_both_hold():
    spec = {"nodeSelector": {"model": "T4"}, "affinity": affinity([{"key": "a", "operator": "In", "values": ["2"]}])}
    assert node_selector_from_spec(spec, ("spec",)).mismatch(LABELS, "n1") is not None
    spec["affinity"] = affinity([{"key": "a", "operator": "In", "values": ["1"]}])
    assert node_selector_from_spec(spec, ("spec",)).mismatch(LABELS, "n1") is None


@pytest.mark.parametrize(("expression", "path", "message"), [
    ({"key": "m", "operator": "Like", "values": ["x"]}, "operator", "'Like' is not one of"),
    ({"key": "m", "operator": "In"}, "values", "In needs at least one value"),
    ({"key": "m", "operator": "Exists", "values": ["x"]}, "values", "Exists takes no values"),
    ({"key": "m", "operator": "Gt", "values": ["16GiB"]}, "values", "Gt needs exactly one whole number"),
    ({"key": "", "operator": "Exists"}, "key", "must be a non-empty string"),
])
def test_malformed_requirements_name_their_path(expression, path, message):
    with pytest.raises(ShapeError) as caught:
        node_selector_from_spec({"affinity": affinity([expression])}, ("spec", "template", "spec"))
    assert caught.value.path == ("spec", "template", "spec", "affinity", "nodeAffinity",
                                 "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", 0,
                                 "matchExpressions", 0, path)
    assert message in str(caught.value)
