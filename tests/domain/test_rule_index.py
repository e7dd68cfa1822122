"""What `gpushare rules` lists and SARIF describes, in-process: every rule and mutation with the config
file's overrides applied (the command's own output is tested in tests/cli/test_rule_tables.py)."""

from __future__ import annotations

import pytest

from policies.model.settings import PolicySettings
from policies.rules.base import REGISTRY
from policies.rules.mutations import MUTATIONS
from policies.rules.rule_index import known_rule_ids, rule_entries, rule_ids


def entries(**rules: dict[str, object]) -> dict[str, dict[str, object]]:
    return {e.id: e.as_dict() for e in rule_entries(PolicySettings.model_validate({"rules": rules}))}


def test_rules_come_first_then_mutations_each_sorted_by_id():
    listed = rule_entries(PolicySettings())
    ids = [e.id for e in listed]
    rules = sorted(REGISTRY)
    assert ids == [*rules, *sorted(MUTATIONS)]
    assert [e.category for e in listed] == ["rule"] * len(rules) + ["mutation"] * len(MUTATIONS)


@pytest.mark.parametrize(("overrides", "rule_id", "expected"), [
    # no config: the default severity, enabled
    ({}, "GS001", {"severity": "deny", "defaultSeverity": "deny", "enabled": True}),
    ({}, "GA006", {"severity": "warn", "defaultSeverity": "warn", "enabled": True}),
    # a configured severity replaces the default, which is still reported beside it
    ({"GS001": {"severity": "warn"}}, "GS001", {"severity": "warn", "defaultSeverity": "deny", "enabled": True}),
    ({"GA006": {"severity": "deny"}}, "GA006", {"severity": "deny", "defaultSeverity": "warn", "enabled": True}),
    # disabling keeps the severity: an override without one changes nothing else
    ({"GS001": {"enabled": False}}, "GS001", {"severity": "deny", "defaultSeverity": "deny", "enabled": False}),
    ({"GS002": {"enabled": False}}, "GS001", {"severity": "deny", "defaultSeverity": "deny", "enabled": True}),
    ({"GS001": {"enabled": True, "severity": "warn"}}, "GS001",
     {"severity": "warn", "defaultSeverity": "deny", "enabled": True}),
    # mutations patch, they do not judge: no severity, but they can be switched off
    ({}, "GM001", {"severity": None, "defaultSeverity": None, "enabled": True, "category": "mutation"}),
    ({"GM001": {"enabled": False}}, "GM001",
     {"severity": None, "defaultSeverity": None, "enabled": False, "category": "mutation"}),
    ({"GM002": {"enabled": False}}, "GM001", {"enabled": True}),
])
def test_the_config_files_overrides_are_applied(overrides, rule_id, expected):
    entry = entries(**overrides)[rule_id]
    assert {k: entry[k] for k in expected} == expected


def test_an_entry_says_what_the_rule_declares():
    entry = entries()["GS001"]
    assert entry["category"] == "rule"
    assert entry["title"] == REGISTRY["GS001"].title
    assert entry["doc"] == REGISTRY["GS001"].doc
    assert entry["sources"] == ['ACK documentation: "Allocate computing power by scheduling shared GPU"']
    assert entry["stateful"] is False
    assert entries()["GB001"]["stateful"] is True
    mutation = entries()["GM001"]
    assert mutation["kinds"] == [] and mutation["stateful"] is False
    assert mutation["title"] == MUTATIONS["GM001"].title


def test_kinds_name_custom_workloads_as_kubectl_does():
    kinds = entries()["GS001"]["kinds"]
    builtin = ["CronJob", "DaemonSet", "Deployment", "Job", "Pod", "PodTemplate", "ReplicaSet",
               "ReplicationController", "StatefulSet"]
    # the built-in kinds sorted, then the custom workloads sorted by their kubectl name
    assert kinds[:len(builtin)] == builtin
    custom = kinds[len(builtin):]
    assert "PyTorchJob.kubeflow.org" in custom and "Workflow.argoproj.io" in custom
    assert custom == sorted(custom) and all("." in k for k in custom)
    assert "custom workloads" not in kinds
    # a rule without custom workloads lists only its own kinds; the audit invariants none
    assert entries()["GN001"]["kinds"] == ["Node"]
    assert entries()["GA001"]["kinds"] == []


def test_every_rule_and_mutation_is_a_known_id():
    known = known_rule_ids()
    assert {"GS001", "GA007", "GB005", "GM001", "GM003"} <= known
    assert known == frozenset(REGISTRY) | frozenset(MUTATIONS)
    assert "GS999" not in known


def test_families_are_derived_from_the_registry():
    assert rule_ids("placement") == frozenset({"GB001", "GB002", "GB003", "GB004", "GB005"})
    assert rule_ids("no such family") == frozenset()


def test_rule_and_mutation_ids_never_collide():
    # one id names one thing in a config file's `rules:` section
    assert not set(REGISTRY) & set(MUTATIONS)


def test_a_family_is_matched_by_value():
    family = "".join(["place", "ment"])  # as read from input: equal, not the same object
    assert rule_ids(family) == frozenset({"GB001", "GB002", "GB003", "GB004", "GB005"})


def test_an_entry_cannot_be_changed_once_listed():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        rule_entries(PolicySettings())[0].enabled = False  # type: ignore[misc]
