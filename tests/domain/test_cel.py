"""The CEL pieces the matchConditions and the backstop policy are built from, evaluated with cel-python on
real objects: each answers what its docstring says (the generated conditions as a whole are tested in
tests/deploy/test_match_conditions.py and tests/deploy/test_backstop_equivalence.py)."""

from __future__ import annotations

import functools
import re
from typing import Any

import celpy
import pytest

from policies.model.quantity import parse_quantity
from policies.model.resources import POD_SPEC_PATHS
from policies.rules.cel import WHOLE_SUFFIXES, Res, by_kind, guarded, quote, string_list, template_path
from tests.support.manifests import MEM, container

_ENV = celpy.Environment()


@functools.cache
def _program(expression: str) -> Any:
    return _ENV.program(_ENV.compile(expression))


# cel-go (the API server's CEL) takes has() of a field selection only ("has(e.f)", cel-spec
# doc/langdef.md, "Macros"); cel-python also answers has(object), so the rule is checked here.
_HAS = re.compile(r"has\(([^()]*)\)")


def cel_go_accepts_has(expression: str) -> None:
    for argument in _HAS.findall(expression):
        assert "." in argument, f"cel-go refuses has({argument}): not a field selection"


def evaluate(expression: str, **variables: Any) -> Any:
    cel_go_accepts_has(expression)
    result = _program(expression).evaluate({k: celpy.json_to_cel(v) for k, v in variables.items()})
    assert not isinstance(result, celpy.CELEvalError), f"{expression}: {result!r}"
    return result


@pytest.mark.parametrize("text", ["plain", "it's", "back\\slash", "both \\' mixed", "", "aliyun.com/gpu-mem"])
def test_a_quoted_string_reads_back_as_itself(text):
    assert evaluate(quote(text)) == text


def test_a_string_list_holds_the_items_sorted_whatever_their_order():
    assert evaluate(string_list(["b", "a'", "c"])) == ["a'", "b", "c"]
    assert string_list(["b", "a", "c"]) == string_list(("c", "a", "b"))  # the generated text is stable
    assert evaluate(string_list([])) == []


@pytest.mark.parametrize(("obj", "expected"), [
    ({}, False),
    ({"spec": {}}, False),
    ({"spec": {"template": {}}}, False),
    ({"spec": {"template": {"spec": {}}}}, True),
    ({"spec": {"template": {"spec": {"containers": []}}}}, True),
])
def test_guarded_tests_every_level_below_the_root(obj, expected):
    assert bool(evaluate(guarded("object.spec.template.spec"), object=obj)) is expected
    # guarding a path makes reading it safe
    expr = f"{guarded('object.spec.template.spec')} ? object.spec.template.spec.size() >= 0 : false"
    assert bool(evaluate(expr, object=obj)) is expected


def test_guarded_root_has_nothing_to_test():
    assert guarded("object") == ""
    assert bool(evaluate(guarded("object.spec"), object={"spec": {"x": 1}}))
    assert not evaluate(guarded("object.spec"), object={"metadata": {}})


@pytest.mark.parametrize("kind", list(POD_SPEC_PATHS))
def test_template_path_reaches_the_pod_template(kind):
    spec = {"containers": [container(limits={MEM: "3"})]}
    obj: dict[str, Any] = {"kind": kind}
    # build the object along its pod spec path
    where = obj
    for part in POD_SPEC_PATHS[kind][:-1]:
        where = where.setdefault(str(part), {})
    where[str(POD_SPEC_PATHS[kind][-1])] = spec
    assert evaluate(f"{template_path(kind)}.spec.containers.size()", object=obj) == 1


def test_template_paths_by_kind():
    assert template_path("Pod") == "object"
    assert template_path("Deployment") == "object.spec.template"
    assert template_path("PodTemplate") == "object.template"
    assert template_path("CronJob") == "object.spec.jobTemplate.spec.template"


@pytest.mark.parametrize("kind", [*POD_SPEC_PATHS, "Node", "Binding"])
def test_by_kind_chooses_the_expression_of_the_objects_kind(kind):
    expression = by_kind(lambda k: quote(f"built for {k}"), quote("default"))
    expected = f"built for {kind}" if kind in POD_SPEC_PATHS else "default"
    assert evaluate(expression, object={"kind": kind}) == expected


NAME = "aliyun.com/gpu-mem"
RES = Res(NAME)


def _c(limits: dict[str, str] | None = None, requests: dict[str, str] | None = None,
       resources: bool = True) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main"}
    if resources:
        c["resources"] = {**({"limits": limits} if limits is not None else {}),
                          **({"requests": requests} if requests is not None else {})}
    return c


# (container, names it in limits, in requests, asks (judged value not zero), judged value)
CONTAINERS = [
    (_c(resources=False), False, False, False, None),
    (_c(), False, False, False, None),
    (_c(limits={"cpu": "1"}), False, False, False, None),
    (_c(limits={NAME: "3"}), True, False, True, "3"),
    (_c(requests={NAME: "2"}), False, True, True, "2"),
    (_c(limits={NAME: "0"}), True, False, False, "0"),
    (_c(requests={NAME: "0"}), False, True, False, "0"),
    # the limit is the judged value when both are there
    (_c(limits={NAME: "0"}, requests={NAME: "4"}), True, True, False, "0"),
    (_c(limits={NAME: "5"}, requests={NAME: "0"}), True, True, True, "5"),
    (_c(limits={"cpu": "1"}, requests={NAME: "7"}), False, True, True, "7"),
]


@pytest.mark.parametrize(("c", "in_limits", "in_requests", "asks", "value"), CONTAINERS)
def test_res_reads_a_container_as_the_engine_does(c, in_limits, in_requests, asks, value):
    assert bool(evaluate(RES.lim("x"), x=c)) is in_limits
    assert bool(evaluate(RES.req("x"), x=c)) is in_requests
    assert bool(evaluate(RES.named("x"), x=c)) is (in_limits or in_requests)
    assert bool(evaluate(RES.asks("x"), x=c)) is asks
    if in_limits:
        assert evaluate(RES.limit("x"), x=c) == c["resources"]["limits"][NAME]
    if in_requests:
        assert evaluate(RES.request("x"), x=c) == c["resources"]["requests"][NAME]
    if value is not None:
        assert evaluate(RES.shown("x"), x=c) == value
    # the default container variable is c
    assert bool(evaluate(RES.asks(), c=c)) is asks


@pytest.mark.parametrize(("c", "bad"), [
    (_c(), False),  # nothing asked: nothing bad
    (_c(limits={NAME: "3"}), False),
    (_c(limits={NAME: "3.5"}), True),
    (_c(requests={NAME: "2"}), False),
    (_c(requests={NAME: "2Gi"}), True),
    # the limit is judged, not the request
    (_c(limits={NAME: "3"}, requests={NAME: "x"}), False),
    (_c(limits={NAME: "x"}, requests={NAME: "3"}), True),
])
def test_bad_value_judges_the_limit_else_the_request(c, bad):
    assert bool(evaluate(RES.bad_value("^[0-9]+$", "x"), x=c)) is bad
    assert bool(evaluate(RES.bad_value("^[0-9]+$"), c=c)) is bad


@pytest.mark.parametrize(("suffix", "factor"), WHOLE_SUFFIXES)
def test_each_canonical_suffix_multiplies_as_a_kubernetes_quantity_does(suffix, factor):
    assert parse_quantity(f"1{suffix}") == factor
    assert parse_quantity(f"3{suffix}") == 3 * factor


def test_the_suffixes_are_every_canonical_whole_number_suffix():
    # k8s.io/apimachinery resource.Quantity: DecimalSI k M G T (P E beyond any GPU), DecimalExponent eN,
    # BinarySI Ki Mi Gi Ti
    assert [s for s, _ in WHOLE_SUFFIXES] == ["k", "M", "G", "T", "e3", "e6", "e9", "e12", "Ki", "Mi", "Gi", "Ti"]


@pytest.mark.parametrize(("obj", "expected"), [
    ({}, False),
    ({"spec": {}}, False),
    ({"spec": {"template": {}}}, True),
])
def test_guarded_tests_the_last_level_of_a_short_path(obj, expected):
    assert bool(evaluate(guarded("object.spec.template"), object=obj)) is expected


def test_a_resource_snippet_cannot_be_changed_once_made():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        RES.name = "nvidia.com/gpu"  # type: ignore[misc]
