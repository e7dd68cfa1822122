"""The kubelet's ``$(VAR)`` expansion as GS010 and GS011 read it, in process: kubernetes' own expansion
cases (third_party/forked/golang/expansion/expand.go and its tests), the names an envFrom source or a
Service may set at run time (unknown at admission), the order in which a container's env is built
(pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables), and the budget past which a value is judged
unknown rather than built. Through the rules and the real server: tests/server/test_isolation_round_two.py."""

from __future__ import annotations

import pytest

from policies.admission.engine import Engine
from policies.model.env_expansion import (
    BUDGET,
    TOO_LONG,
    Budget,
    RawEnv,
    ResolveMissing,
    Unknown,
    expand,
    expanded_values,
)
from tests.support.manifests import MEM, container, pod_spec, workload
from webhook.settings import Settings

DISABLES = ("off cGPU memory isolation: the container can use all of its card's memory; remove it, or have an "
            "admin exempt the pod")


# -- the expansion itself, case by case as kubernetes' expansion tests read -------------------------------

@pytest.mark.parametrize(("text", "expanded"), [
    ("$(X)", "true"), ("a$(X)b", "atrueb"), ("$$(X)", "$(X)"), ("$$$(X)", "$true"), ("$(UNSET)", "$(UNSET)"),
    ("$(X", "$(X"), ("$($(X)", "$($(X)"), ("$(X)$(X)", "truetrue"), ("$x", "$x"), ("$", "$"), ("a$", "a$"),
    ("$()", "$()"), ("$(X)$(", "true$("), ("é$(X)é", "étrueé"), ("$é", "$é"),
])
def test_expansion_follows_the_kubelet(text, expanded):
    assert expand(text, {"X": "true"}, ResolveMissing((), service_links=True)) == expanded


@pytest.mark.parametrize(("text", "expanded"), [
    ("plain", "plain"), ("", ""), ("$$", "$"), ("$$$$", "$$"), ("x$$y", "x$y"), ("$(X)$$", "true$"),
    ("$(X)tail", "truetail"), ("$(EMPTY)x", "x"), ("$(X)$(Y)", "true1"), ("$(X)$(X", "true$(X"),
    ("$(X$(Y)", "$(X$(Y)"), ("$((X)", "$((X)"), ("a$(X)b$(Y)c", "atrueb1c"), ("$(X)$", "true$"),
    ("$(X))", "true)"), ("$(Y)$($(X)", "1$($(X)"), ("$(", "$("), ("$($", "$($"), ("$(X)$)", "true$)"),
    # characters on either side of "$" and "(" in the code table are no operator
    ("#(X)$(X)", "#(X)true"), (" (X)$", " (X)$"), ("$#(X)", "$#(X)"), ("$!", "$!"), ("$'a)", "$'a)"),
    ("$%(X)", "$%(X)"), ("$&X)$(X)", "$&X)true"), ("$)(X)", "$)(X)"), ("$*X)", "$*X)"), ("$ (X)", "$ (X)"),
    ("$xy$(X)", "$xytrue"), ("$x$(X)", "$xtrue"), ("$($(X)$(Y)", "$($(X)1"),
])
def test_more_expansion_cases_kubernetes_lists(text, expanded):
    assert expand(text, {"X": "true", "Y": "1", "EMPTY": ""}, ResolveMissing((), service_links=False)) == expanded


def test_a_long_value_ending_in_an_operator_keeps_it():
    text = "x" * 300 + "$(X)$"
    assert expand(text, {"X": "1"}, ResolveMissing((), False)) == "x" * 300 + "1$"


def test_an_empty_reference_names_nothing_an_env_from_source_sets():
    resolve = ResolveMissing(("",), service_links=True)  # envFrom without a prefix: any key it has
    assert expand("$()", {}, resolve) == "$()"
    assert expand("$())", {}, resolve) == "$())"
    assert expand("$(A)", {}, resolve) == Unknown("A", "envFrom")


def test_a_value_of_unclosed_references_is_read_once_through():
    """200,000 "$(" with no ")": each is incomplete and stays; the text is not searched again for each."""
    text = "$(" * 200_000
    assert expand(text, {}, ResolveMissing((), True)) == text


def test_an_expansion_past_its_budget_is_judged_unknown_not_built():
    """A 700 KB value referenced 100,000 times would be 70 GB once expanded (the kubelet would build it):
    the webhook stops at its budget and judges the value as the worst it could be."""
    env = [RawEnv("A", "x" * 700_000), RawEnv("B", "$(A)" * 100_000), RawEnv("CGPU_DISABLE", "$(B)")]
    [value] = expanded_values(env, [2], (), True).values()
    assert value == Unknown("", f"more than {BUDGET} characters once expanded")
    pod = workload("Pod", pod_spec(container("app", limits={MEM: 2}, env=[
        {"name": e.name, "value": e.value} for e in env])), name="p")
    engine = Engine(Settings())
    [finding] = engine.validate(engine.subject("Pod", pod, namespace="default")).findings
    assert finding.message == (f'GS011: Pod default/p container "app": env CGPU_DISABLE=$(B) (expands to <more than '
                               f"{BUDGET} characters once expanded>) may turn {DISABLES}")


def test_the_budget_counts_what_is_written_and_what_is_brought_in():
    lookup = {"A": "xyz"}
    resolve = ResolveMissing((), False)
    # "a$(A)" is 5 characters as written, plus the 3 of A's value: 8 fit a budget of 8, not of 7
    budget = Budget(8)
    assert expand("a$(A)", lookup, resolve, budget) == "axyz"
    assert budget.left == 4  # what was built is spent
    assert expand("a$(A)", lookup, resolve, Budget(7)) is TOO_LONG
    # spent across the container's values: the second no longer fits
    shared = Budget(10)
    assert expand("$(A)", lookup, resolve, shared) == "xyz" and shared.left == 7
    assert expand("$(A)$(A)", lookup, resolve, shared) is TOO_LONG
    # a text without a reference costs nothing and is returned as written
    assert expand("x" * 20, lookup, resolve, Budget(1)) == "x" * 20
    assert Budget().left == BUDGET == 1 << 22


def test_the_budget_of_a_whole_container_is_shared_by_its_values():
    big = "x" * (BUDGET // 2)
    env = [RawEnv("A", big), RawEnv("B", "$(A)"), RawEnv("C", "$(A)"), RawEnv("CGPU_DISABLE", "$(A)")]
    values = expanded_values(env, [1, 2, 3], (), False)
    assert values[1] == big and values[2] is TOO_LONG and values[3] is TOO_LONG


def test_what_cannot_be_read_at_admission_is_unknown():
    resolve = ResolveMissing(("APP_",), service_links=False)
    assert expand("$(APP_FLAG)", {}, resolve) == Unknown("APP_FLAG", "envFrom")
    assert expand("$(WEB_SERVICE_HOST)", {}, resolve) == "$(WEB_SERVICE_HOST)"  # enableServiceLinks: false
    assert expand("$(KUBERNETES_SERVICE_PORT)", {}, resolve) == Unknown("KUBERNETES_SERVICE_PORT", "a service link")
    assert expand("$(WEB_SERVICE_HOST)", {}, ResolveMissing((), True)) == Unknown("WEB_SERVICE_HOST", "a service link")
    assert expand("$(X)", {"X": Unknown("X", "secretKeyRef")}, resolve) == Unknown("X", "secretKeyRef")


def test_the_first_unknown_reference_names_the_value():
    resolve = ResolveMissing(("CFG_",), service_links=True)
    lookup = {"S": Unknown("S", "secretKeyRef"), "K": "known"}
    assert expand("$(K)$(S)$(CFG_A)", lookup, resolve) == Unknown("S", "secretKeyRef")
    assert expand("$(CFG_A)$(S)", lookup, resolve) == Unknown("CFG_A", "envFrom")
    assert expand("$(K)-$$(S)", lookup, resolve) == "known-$(S)"  # escaped: no reference at all


@pytest.mark.parametrize(("name", "linked"), [
    ("WEB_SERVICE_HOST", True), ("WEB_SERVICE_PORT", True), ("WEB_SERVICE_PORT_HTTP", True), ("WEB_PORT", True),
    ("WEB_PORT_80_TCP", True), ("WEB_PORT_53_UDP_PROTO", True), ("WEB_PORT_9000_SCTP_PORT", True),
    ("MY_DB_PORT_5432_TCP_ADDR", True), ("A1_SERVICE_HOST", True),
    ("WEB_PORT_80", False), ("WEB_PORT_80_HTTP", False), ("WEB_PORT_80_TCP_HOST", False), ("web_SERVICE_HOST", False),
    ("_SERVICE_HOST", False), ("1WEB_SERVICE_HOST", False), ("WEB_SERVICE_HOSTS", False), ("WEB_HOST", False),
    ("SERVICE_HOST", False), ("WEB_SERVICE_PORT_", False),
])
def test_service_link_names_are_those_the_kubelet_sets(name, linked):
    found = ResolveMissing((), service_links=True)(name)
    assert found == (Unknown(name, "a service link") if linked else f"$({name})")
    # without service links only the master service's are set
    assert ResolveMissing((), service_links=False)(name) == f"$({name})"


def test_the_master_service_is_linked_whatever_enable_service_links_says():
    resolve = ResolveMissing((), service_links=False)
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_PORT", "KUBERNETES_PORT_443_TCP_ADDR"):
        assert resolve(name) == Unknown(name, "a service link")
    assert resolve("KUBERNETES_VERSION") == "$(KUBERNETES_VERSION)"


def test_an_env_from_prefix_makes_every_name_it_starts_unknown():
    assert ResolveMissing(("", "X"), False)("ANY") == Unknown("ANY", "envFrom")  # no prefix: any name
    assert ResolveMissing(("GPU_", "APP_"), False)("APP_MODE") == Unknown("APP_MODE", "envFrom")
    assert ResolveMissing(("GPU_",), False)("APP_MODE") == "$(APP_MODE)"
    assert ResolveMissing(["GPU_"], True).prefixes == ("GPU_",)


def test_unknown_values_say_where_they_come_from():
    assert Unknown("FLAG", "configMapKeyRef").shown == "<FLAG from configMapKeyRef>"
    assert TOO_LONG.shown == f"<more than {BUDGET} characters once expanded>"


def test_a_container_env_is_built_in_order_each_entry_seeing_those_before_it():
    env = [RawEnv("X", "$(LATER)"), RawEnv("MODE", "on"), RawEnv("FLAG", "$(MODE)-$(X)"), RawEnv("LATER", "1"),
           RawEnv("MODE", "$(MODE)$(MODE)"), RawEnv("SECRET", None, "secretKeyRef"), RawEnv("FROM", None),
           RawEnv("EMPTY", ""), RawEnv("USE", "$(SECRET)"), RawEnv("E", "[$(EMPTY)]")]
    values = expanded_values(env, range(len(env)), (), False)
    assert values == {0: "$(LATER)", 1: "on", 2: "on-$(LATER)", 3: "1", 4: "onon",
                      5: Unknown("SECRET", "secretKeyRef"), 6: Unknown("FROM", "valueFrom"), 7: "",
                      8: Unknown("SECRET", "secretKeyRef"), 9: "[]"}
    # only the positions asked for are returned, and nothing past the last one is read
    assert expanded_values(env, [2, 4], (), False) == {2: "on-$(LATER)", 4: "onon"}
    assert expanded_values(env, [1], (), False) == {1: "on"}
    assert expanded_values(env, [], (), False) == {}
    assert expanded_values([RawEnv("A", "$(B)")], [0], ("B",), False) == {0: Unknown("B", "envFrom")}
