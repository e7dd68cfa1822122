"""Path patterns through maps and lists of replicas, as `workloads.kinds` writes them and the built-in
workload table uses them (policies/model/field_paths.py): parsed, rendered back, counted, and refused
with a message that says what is wrong."""

from __future__ import annotations

import pytest

from policies.model.field_paths import PatternError, parse_pattern, render_pattern, wildcards
from policies.model.workloads import BUILT_IN


@pytest.mark.parametrize(
    ("text", "pattern", "count"),
    [
        ("spec", ("spec",), 0),
        ("spec.template", ("spec", "template"), 0),
        ("spec.pytorchReplicaSpecs.*.template", ("spec", "pytorchReplicaSpecs", "*", "template"), 1),
        ("spec.tasks[].template", ("spec", "tasks", "[]", "template"), 1),
        ("spec.replicatedJobs[].template.spec.template",
         ("spec", "replicatedJobs", "[]", "template", "spec", "template"), 1),
        ("spec.grid[][].template", ("spec", "grid", "[]", "[]", "template"), 2),
        ("spec.groups[].roles.*.template", ("spec", "groups", "[]", "roles", "*", "template"), 2),
        ("spec.roles.*.*", ("spec", "roles", "*", "*"), 2),
        ("spec.items[]", ("spec", "items", "[]"), 1),
        ("  spec.worker_group-2.template ", ("spec", "worker_group-2", "template"), 0),
        ("_private", ("_private",), 0),
    ],
)
def test_patterns_parse_render_and_count(text, pattern, count):
    assert parse_pattern(text) == pattern
    assert render_pattern(pattern) == text.strip()
    assert wildcards(pattern) == count


def test_every_built_in_location_renders_back_to_its_pattern():
    for kind in BUILT_IN:
        for location in kind.locations:
            assert parse_pattern(location.text) == location.pattern, kind.name
            assert location.text.count("[]") + location.text.count("*") == wildcards(location.pattern)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "a path is a dotted list of field names, e.g. spec.tasks[].template"),
        ("   ", "a path is a dotted list of field names, e.g. spec.tasks[].template"),
        (None, "a path is a dotted list of field names, e.g. spec.tasks[].template"),
        ("*.template", "'*.template': a path starts with a field name, not *"),
        ("spec..template", "'spec..template': '(empty)' is not a field name (letters, digits, _ and -; * for "
                           "every value of a map, a trailing [] for every item of a list)"),
        ("spec.[]", "'spec.[]': '[]' is not a field name (letters, digits, _ and -; * for every value of a map, "
                    "a trailing [] for every item of a list)"),
        ("spec.tasks[0].template", "'spec.tasks[0].template': 'tasks[0]' is not a field name (letters, digits, "
                                   "_ and -; * for every value of a map, a trailing [] for every item of a list)"),
        ("spec.2tasks", "'spec.2tasks': '2tasks' is not a field name (letters, digits, _ and -; * for every value "
                        "of a map, a trailing [] for every item of a list)"),
        ("spec.tasks[]x", "'spec.tasks[]x': 'tasks[]x' is not a field name (letters, digits, _ and -; * for every "
                          "value of a map, a trailing [] for every item of a list)"),
        ("spec.a/b", "'spec.a/b': 'a/b' is not a field name (letters, digits, _ and -; * for every value of a "
                     "map, a trailing [] for every item of a list)"),
    ],
)
def test_unreadable_patterns_are_refused_with_the_reason(text, message):
    with pytest.raises(PatternError) as caught:
        parse_pattern(text)
    assert str(caught.value) == message


def test_a_leading_wildcard_item_is_not_a_field():
    with pytest.raises(PatternError):
        parse_pattern("[].template")
