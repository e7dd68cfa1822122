"""Card-model scheduling (seed 003): nodeSelector and required node affinity on any label."""

from __future__ import annotations

import pytest

from policies.model.resources import ShapeError
from policies.model.selectors import NodeSelector, Requirement, Term, describe_selector, node_selector_from_spec
from policies.scoring.scoring import Scorer, pod_request
from tests.support.cluster_builders import gpu_pod
from tests.support.manifests import received

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


# ---- the matcher itself, operator by operator --------------------------------------------------------


@pytest.mark.parametrize(("operator", "values", "label", "matches"), [
    ("In", ("a", "b"), "b", True), ("In", ("a",), "c", False), ("In", ("a",), None, False),
    ("NotIn", ("a",), "c", True), ("NotIn", ("a",), "a", False), ("NotIn", ("a",), None, True),
    ("Exists", (), "", True), ("Exists", (), None, False),
    ("DoesNotExist", (), None, True), ("DoesNotExist", (), "x", False),
    ("Gt", ("4",), "5", True), ("Gt", ("4",), "4", False), ("Gt", ("4",), "+5", True), ("Gt", ("-1",), "0", True),
    ("Lt", ("4",), "3", True), ("Lt", ("4",), "4", False), ("Lt", ("4",), "-3", True),
    ("Gt", ("4",), "3", False), ("Gt", ("1000",), "999", False), ("Lt", ("4",), "5", False),
    ("Lt", ("1000",), "1001", False),
    ("Gt", ("4",), None, False), ("Lt", ("4",), None, False), ("Gt", ("4",), "16160MiB", False),
    ("Lt", ("4",), "3.5", False), ("Lt", ("4",), "3\n", False),
])
def test_requirement_matches(operator, values, label, matches):
    # operators and values as read from a pod spec (decoded, not the interned literals of this file)
    assert Requirement("k", received(operator), received(values)).matches(received(label)) is matches


@pytest.mark.parametrize(("requirement", "text"), [
    (Requirement("k", "In", ("a", "b")), "k In [a, b]"), (Requirement("k", "Gt", ("4",)), "k Gt [4]"),
    (Requirement("k", "Exists", ()), "k Exists"), (Requirement("k", "DoesNotExist", ()), "k DoesNotExist"),
])
def test_requirement_describe(requirement, text):
    assert requirement.describe() == text


def test_term_names_the_first_requirement_the_node_fails():
    term = Term((Requirement("a", "In", ("1",)), Requirement("b", "Exists", ())),
                (Requirement("metadata.name", "In", ("n1",)),))
    assert term.mismatch({"a": "1", "b": "x"}, "n1") is None
    assert term.mismatch({"a": "2"}, "n1") == "a In [1]: node has a=2"
    assert term.mismatch({"a": "1"}, "n1") == "b Exists: node has no label b"
    assert term.mismatch({"a": "1", "b": ""}, "n2") == "metadata.name In [n1]: node is named n2"
    assert Term((), ()).mismatch({}, "n1") == "an empty nodeSelectorTerm matches no node"
    assert Term((), (Requirement("metadata.name", "NotIn", ("n2",)),)).mismatch({}, "n1") is None


def test_selector_mismatch_messages():
    one = Term((Requirement("a", "In", ("1",)),), ())
    two = Term((Requirement("b", "DoesNotExist", ()),), ())
    assert NodeSelector().mismatch({}, "n") is None and NodeSelector().empty
    assert not NodeSelector(terms=()).empty and not NodeSelector((("a", "1"),)).empty
    assert NodeSelector((("a", "1"),)).mismatch({"a": "2"}, "n") == "nodeSelector a=1: node has a=2"
    assert NodeSelector((("a", "1"), ("b", "2"))).mismatch({"a": "1"}, "n") == "nodeSelector b=2: node has no label b"
    assert NodeSelector(terms=(one,)).mismatch({}, "n") == "required node affinity a In [1]: node has no label a"
    assert NodeSelector(terms=(one, two)).mismatch({"b": "x"}, "n") == (
        "required node affinity: no term matches: term 0: a In [1]: node has no label a; "
        "term 1: b DoesNotExist: node has b=x")
    assert NodeSelector(terms=(one, two)).mismatch({"a": "1", "b": "x"}, "n") is None
    assert NodeSelector(terms=(one, two)).mismatch({}, "n") is None
    assert NodeSelector(terms=()).mismatch({}, "n") is not None  # no term at all matches no node


def test_compiled_selectors_cannot_be_changed():
    """Compiled once per pod and read for every node, possibly by several threads."""
    import dataclasses

    for made, field in ((Requirement("k", "Exists", ()), "key"), (Term((), ()), "labels"), (NodeSelector(), "labels")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made, field, ())


def test_describe_selector():
    assert describe_selector(NodeSelector()) == "any node"
    selector = NodeSelector((("a", "1"), ("b", "2")), (
        Term((Requirement("x", "In", ("1",)), Requirement("y", "Exists", ())), (Requirement("metadata.name", "In",
                                                                                       ("n1",)),)),
        Term((), ())))
    assert describe_selector(selector) == ("a=1, b=2, affinity (x In [1] and y Exists and metadata.name In [n1]) "
                                           "or ((empty))")


@pytest.mark.parametrize(("value", "text"), [(4, "4"), (True, "true"), (False, "false"), (1.5, "1.5"), ("s", "s")])
def test_node_selector_values_are_compared_as_text(value, text):
    assert node_selector_from_spec({"nodeSelector": {"k": value}}, ("spec",)).labels == (("k", text),)


def test_selector_from_spec_shapes():
    assert node_selector_from_spec(None, ("spec",)) == NodeSelector()
    assert node_selector_from_spec({}, ("spec",)) == NodeSelector()
    assert node_selector_from_spec({"affinity": {"nodeAffinity": {}}}, ("spec",)) == NodeSelector()
    assert node_selector_from_spec({"affinity": "x"}, ("spec",)) == NodeSelector()
    expressions = {"key": "k", "operator": "Exists"}
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expressions], "matchFields": None}]}}}}
    assert node_selector_from_spec(spec, ("spec",)).terms == (Term((Requirement("k", "Exists", ()),), ()),)


REQUIRED = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


@pytest.mark.parametrize(("spec", "message"), [
    ({"nodeSelector": ["a"]}, "spec.nodeSelector: must be a map of label to value"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}},
     f"{REQUIRED}: must be an object"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
     f"{REQUIRED}.nodeSelectorTerms: must be a list of terms"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": ["x"]}}}}, f"{REQUIRED}.nodeSelectorTerms[0]: must be an object, got str"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": {}}]}}}}, f"{REQUIRED}.nodeSelectorTerms[0].matchFields: must be a list"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": "a"}]}]}}}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values: must be a list of strings"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": [1]}]}]}}}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values: must be a list of strings"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1", "2"]}]}]}}}},
     f'{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values: Gt needs exactly one whole number (e.g. "4")'),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Lt", "values": ["x"]}]}]}}}},
     f'{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values: Lt needs exactly one whole number (e.g. "4")'),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Gt"}]}]}}}},
     f'{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values: Gt needs exactly one whole number (e.g. "4")'),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Lt", "values": []}]}]}}}},
     f'{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values: Lt needs exactly one whole number (e.g. "4")'),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "NotIn"}]}]}}}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values: NotIn needs at least one value"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "DoesNotExist", "values": ["a"]}]}]}}}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values: DoesNotExist takes no values"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "", "operator": "In", "values": ["a"]}]}]}}}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].key: must be a non-empty string"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "in", "values": ["a"]}]}]}}}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].operator: 'in' is not one of In, NotIn, Exists, "
     "DoesNotExist, Gt, Lt"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["a"]}]}]}}}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchFields[0].key: 'metadata.uid': matchFields supports only metadata.name"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]}}}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchFields[0]: matchFields on metadata.name needs In or NotIn with exactly "
     "one value"),
    # a label key in matchFields: Kubernetes' ValidateNodeFieldSelectorRequirement (pkg/apis/core/validation)
    # accepts only metadata.name, with In or NotIn and exactly one value
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                "values": ["n1"]}]}]}}}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchFields[0].key: 'kubernetes.io/hostname': matchFields supports only "
     "metadata.name"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "NotIn"}]}]}}}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchFields[0]: matchFields on metadata.name needs In or NotIn with exactly "
     "one value"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}]}}}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchFields[0]: matchFields on metadata.name needs In or NotIn with exactly "
     "one value"),
])
def test_malformed_selectors_are_refused_with_their_path(spec, message):
    with pytest.raises(ShapeError) as caught:
        node_selector_from_spec(spec, ("spec",))
    assert str(caught.value) == message
