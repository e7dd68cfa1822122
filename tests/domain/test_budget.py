"""The evaluation budget in-process: what one object may make the rules judge (pod templates, containers,
affinity terms), counted before any rule runs, and the verdict on an object over it (denied, or admitted
unjudged), with what was counted and what would be accepted."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from policies.admission.budget import BUDGET_ID, Overrun, affinity_terms, describe, overrun
from policies.admission.engine import Engine
from policies.model.resources import ShapeError
from policies.model.settings import BudgetSettings
from tests.support.helpers import DATA
from webhook.settings import Settings

MEM = "aliyun.com/gpu-mem"
VOLCANO = yaml.safe_load((DATA / "workloads" / "volcanojob.yaml").read_text())


def container(name: str) -> dict[str, Any]:
    return {"name": name, "image": "cuda:12", "resources": {"limits": {MEM: 2}}}


def pod(containers: int = 1, init: int = 0, ephemeral: int = 0, affinity: dict[str, Any] | None = None) -> dict:
    spec: dict[str, Any] = {"containers": [container(f"c{i}") for i in range(containers)]}
    if init:
        spec["initContainers"] = [container(f"i{i}") for i in range(init)]
    if ephemeral:
        spec["ephemeralContainers"] = [container(f"e{i}") for i in range(ephemeral)]
    if affinity is not None:
        spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def volcano(tasks: int) -> dict[str, Any]:
    job = copy.deepcopy(VOLCANO)
    job["metadata"]["namespace"] = "default"
    worker = job["spec"]["tasks"][1]
    job["spec"]["tasks"] = [{**copy.deepcopy(worker), "name": f"w{i}"} for i in range(tasks)]
    return job


def limits(**values: Any) -> BudgetSettings:
    return BudgetSettings(**values)


def expression(key: str) -> dict[str, Any]:
    return {"key": key, "operator": "Exists"}


def node_affinity(required: list[Any] | None = None, preferred: list[Any] | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {}
    if required is not None:
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": required}
    if preferred is not None:
        node["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return {"nodeAffinity": node}


@pytest.mark.parametrize(("affinity", "count"), [
    (None, 0),
    ("not a mapping", 0),
    ({}, 0),
    ({"nodeAffinity": "x"}, 0),
    (node_affinity(required=[{"matchExpressions": [expression("a"), expression("b")]}]), 2),
    (node_affinity(required=[{"matchExpressions": [expression("a")], "matchFields": [expression("b")]}]), 2),
    (node_affinity(required=[{"matchExpressions": []}, {}]), 2),  # an empty term still counts once
    (node_affinity(required=["not a term"]), 1),
    (node_affinity(required="not a list"), 0),
    (node_affinity(preferred=[{"weight": 1, "preference": {"matchExpressions": [expression("a")] * 3}}]), 3),
    (node_affinity(preferred=[{"weight": 1}, "x"]), 2),  # no preference: one requirement each
    (node_affinity(required=[{"matchExpressions": [expression("a")]}],
                   preferred=[{"weight": 1, "preference": {"matchExpressions": [expression("b")] * 2}}]), 3),
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "x"}}, 0),
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}, {}],
                      "preferredDuringSchedulingIgnoredDuringExecution": [{}]},
      "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}] * 4}}, 7),
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "x"}, "podAntiAffinity": "x"}, 0),
    ({**node_affinity(required=[{}]), "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{}]}},
     2),
])
def test_affinity_terms_are_counted_as_the_rules_walk_them(affinity, count):
    spec = {} if affinity is None else {"affinity": affinity}
    assert affinity_terms(spec, 1000) == count


def test_counting_affinity_terms_stops_past_the_limit():
    terms = [{"matchExpressions": [expression("a")]}] * 50
    assert affinity_terms({"affinity": node_affinity(required=terms)}, 5) == 6
    assert affinity_terms({"affinity": node_affinity(preferred=[{"preference": t} for t in terms])}, 9) == 10
    assert affinity_terms({"affinity": node_affinity(required=terms)}, 50) == 50


@pytest.mark.parametrize(("obj", "budget", "expected"), [
    (pod(3), {"max_containers": 3}, None),  # at the limit: within
    (pod(2, init=1, ephemeral=1), {"max_containers": 3},
     Overrun("containers", "budget.max_containers", 3, 1, 4, 0)),  # every kind of container counts
    (pod(1, affinity=node_affinity(required=[{"matchExpressions": [expression("a")] * 3}])),
     {"max_affinity_terms": 2}, Overrun("affinity terms", "budget.max_affinity_terms", 2, 1, 1, 3)),
    (pod(1, affinity=node_affinity(required=[{"matchExpressions": [expression("a")] * 2}])),
     {"max_affinity_terms": 2}, None),
    (volcano(3), {"max_templates": 3}, None),
    (volcano(4), {"max_templates": 3}, Overrun("pod templates", "budget.max_templates", 3, 4, 4, 0)),
    (volcano(4), {"max_containers": 2}, Overrun("containers", "budget.max_containers", 2, 3, 3, 0)),  # stops there
    ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, {"max_containers": 1}, None),  # no spec
])
def test_an_object_over_its_budget_is_found_at_the_first_count_past_a_limit(engine, obj, budget, expected):
    kind = obj["kind"]
    workload = engine.workload(kind, obj["apiVersion"].rpartition("/")[0])
    assert overrun(kind, obj, workload, limits(**budget)) == expected


def test_templates_and_affinity_terms_add_up_over_a_workload(engine):
    job = volcano(3)
    for task in job["spec"]["tasks"]:
        task["template"]["spec"]["affinity"] = node_affinity(required=[{}])
    workload = engine.workload("Job", "batch.volcano.sh")
    assert overrun("Job", job, workload, limits(max_affinity_terms=3)) is None
    found = overrun("Job", job, workload, limits(max_affinity_terms=2))
    assert found == Overrun("affinity terms", "budget.max_affinity_terms", 2, 3, 3, 3)


def test_kinds_without_pods_have_no_budget(engine):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}
    assert overrun("Node", node, None, limits(max_templates=1)) is None
    assert overrun("Deployment", {"kind": "Deployment", "spec": {}}, None, limits()) is None


def test_a_container_that_is_not_an_object_is_bad_input_not_a_big_one():
    obj = pod(2)
    obj["spec"]["containers"][1] = "oops"
    with pytest.raises(ShapeError) as raised:
        overrun("Pod", obj, None, limits())
    assert raised.value.path == ("spec", "containers", 1) and str(raised.value) == \
        "spec.containers[1]: must be an object, got str"
    init = pod(1)
    init["spec"]["initContainers"] = [container("i"), 5]
    with pytest.raises(ShapeError, match=r"spec.initContainers\[1\]: must be an object, got int"):
        overrun("Pod", init, None, limits())
    # Past the limit counting stops: the overrun is said, the items beyond it are never read.
    many = pod(4)
    many["spec"]["containers"][3] = "never read"
    assert overrun("Pod", many, None, limits(max_containers=2)) == Overrun(
        "containers", "budget.max_containers", 2, 1, 4, 0)
    many["spec"]["containers"][2] = "read"
    with pytest.raises(ShapeError):
        overrun("Pod", many, None, limits(max_containers=2))
    # Ephemeral containers are the debug subresource's: counted, their shape left to its rules.
    debug = pod(1, ephemeral=1)
    debug["spec"]["ephemeralContainers"] = ["x", "y"]
    assert overrun("Pod", debug, None, limits(max_containers=2)) == Overrun(
        "containers", "budget.max_containers", 2, 1, 3, 0)
    group_not_a_list = pod(1)
    group_not_a_list["spec"]["initContainers"] = "x"
    assert overrun("Pod", group_not_a_list, None, limits(max_containers=1)) is None


def test_a_spec_of_the_wrong_shape_is_bad_input():
    with pytest.raises(ShapeError, match="spec: must be an object, got list"):
        overrun("Pod", {"kind": "Pod", "spec": []}, None, limits())


@pytest.mark.parametrize(("outcome", "said"), [
    ("deny", "denied (budget.when_exceeded: deny)"),
    ("admit", "admitted without evaluation (budget.when_exceeded: admit)"),
])
def test_the_message_says_what_was_counted_the_limit_and_what_is_accepted(outcome, said):
    budget = limits(max_templates=2, max_containers=9, max_affinity_terms=7, when_exceeded=outcome)
    message, brief = describe(Overrun("pod templates", "budget.max_templates", 2, 3, 1, 0), "Job default/j", budget)
    head = "budget: Job default/j is too large to evaluate: more than 2 pod templates (budget.max_templates)"
    assert message == (f"{head} (counted before stopping: 3 pod templates, 1 container, 0 affinity terms); accepted: "
                       "at most 2 pod templates, 9 containers and 7 affinity terms in one object (real workloads "
                       "have a few of each), or a larger budget.max_templates in the webhook's configuration; "
                       f"{said}")
    assert brief == f"{head}; {said}"
    one, _ = describe(Overrun("containers", "budget.max_containers", 9, 1, 10, 1), "Pod default/p", budget)
    assert "(counted before stopping: 1 pod template, 10 containers, 1 affinity term)" in one


@pytest.mark.parametrize(("outcome", "severity"), [("deny", "deny"), ("admit", "warn")])
def test_the_engine_judges_no_rule_on_an_object_over_its_budget(outcome, severity):
    engine = Engine(Settings(budget={"max_containers": 2, "when_exceeded": outcome}))
    obj = pod(3)
    obj["spec"]["containers"][0]["resources"]["limits"][MEM] = "2Gi"  # GS003, were it judged
    verdict = engine.validate(engine.subject("Pod", obj, namespace="default"))
    [finding] = verdict.findings
    assert (finding.rule, finding.severity, finding.path) == (BUDGET_ID, severity, ())
    assert finding.message.startswith("budget: Pod default/p is too large to evaluate: more than 2 containers")
    assert finding.brief.endswith("(budget.when_exceeded: deny)" if outcome == "deny" else
                                  "(budget.when_exceeded: admit)")
    assert verdict.allowed is (outcome == "admit")
    planned = engine.mutate(engine.subject("Pod", obj, namespace="default"))
    assert planned.patch == [] and [f.rule for f in planned.findings] == [BUDGET_ID]  # not patched either
    within = engine.validate(engine.subject("Pod", pod(2), namespace="default"))
    assert within.findings == [] and engine.mutate(engine.subject("Pod", pod(2))).patch


def test_the_affinity_terms_counted_are_those_seen_until_the_count_passed_the_limit(engine):
    terms = [{"matchExpressions": [expression(f"k{i}")]} for i in range(50)]
    obj = pod(1, affinity=node_affinity(required=terms))
    # Counting stops once past one more than the limit: 4 of the 50 counted, against the 2 allowed.
    assert overrun("Pod", obj, None, limits(max_affinity_terms=2)) == Overrun(
        "affinity terms", "budget.max_affinity_terms", 2, 1, 1, 4)
    job = volcano(3)
    for task in job["spec"]["tasks"]:
        task["template"]["spec"]["affinity"] = node_affinity(required=terms)
    # The first template's 50 are all counted; the second's only until past one more than is left (10 + 1).
    found = overrun("Job", job, engine.workload("Job", "batch.volcano.sh"), limits(max_affinity_terms=60))
    assert found == Overrun("affinity terms", "budget.max_affinity_terms", 60, 2, 2, 62)


def test_with_an_odd_container_limit_one_more_item_than_the_limit_is_read():
    obj = pod(5)
    obj["spec"]["containers"][3] = "the fourth"  # index 3: read under a limit of 3
    with pytest.raises(ShapeError, match=r"spec.containers\[3\]"):
        overrun("Pod", obj, None, limits(max_containers=3))


def test_the_outcome_is_read_from_a_configuration_file():
    budget = BudgetSettings(**yaml.safe_load("max_templates: 1\nwhen_exceeded: admit\n"))
    _, brief = describe(Overrun("pod templates", "budget.max_templates", 1, 2, 2, 0), "Job default/j", budget)
    assert brief.endswith("; admitted without evaluation (budget.when_exceeded: admit)")


def test_an_odd_affinity_limit_counts_one_past_it_too():
    terms = [{"matchExpressions": [expression(f"k{i}")]} for i in range(50)]
    assert overrun("Pod", pod(1, affinity=node_affinity(required=terms)), None, limits(max_affinity_terms=3)) == \
        Overrun("affinity terms", "budget.max_affinity_terms", 3, 1, 1, 5)
