"""``workloads.kinds`` (policies/model/workload_settings.py; docs/workloads.md): custom resources whose
pod templates the rules judge, as a config file declares them, what the workload table makes of them,
and every declaration the configuration refuses, in the words `gpushare` prints."""

from __future__ import annotations

import pytest

from policies.model.settings import PolicySettings, WorkloadKindSettings, WorkloadSettings
from policies.model.workloads import CONTAINERS, TEMPLATE, workload_table
from tests.support.config_files import loaded, refusal

TRAINING = "workloads:\n  kinds:\n    - {group: ml.example.com, kind: Training, paths: ['spec.workers[].template']}\n"




def test_a_configured_kind_joins_the_workload_table(tmp_path):
    settings = loaded(tmp_path, TRAINING)
    kind = workload_table(settings).lookup("ml.example.com", "Training")
    assert kind is not None
    assert (kind.name, kind.plural, kind.versions, kind.namespaced) == ("Training.ml.example.com", "trainings", ("*",),
                                                                        True)
    # A plain string is a pod template (metadata and spec).
    assert [(loc.text, loc.shape) for loc in kind.locations] == [("spec.workers[].template", TEMPLATE)]
    assert kind.configured == "workloads.kinds[0]"


def test_what_a_path_holds_and_the_registration_fields(tmp_path):
    settings = loaded(tmp_path, "workloads:\n  kinds:\n"
                                "    - group: ml.example.com\n      kind: Serving\n      plural: servings-v2\n"
                                "      versions: [v1, v2]\n      namespaced: false\n"
                                "      paths: [spec.pod.template, {path: spec.sidecars, holds: containers}]\n")
    [entry] = settings.workloads.kinds
    assert [(p.path, p.holds) for p in entry.paths] == [("spec.pod.template", "template"),
                                                         ("spec.sidecars", "containers")]
    kind = workload_table(settings).lookup("ml.example.com", "Serving")
    assert kind is not None
    assert (kind.plural, kind.versions, kind.namespaced) == ("servings-v2", ("v1", "v2"), False)
    assert [(loc.text, loc.shape) for loc in kind.locations] == [("spec.pod.template", TEMPLATE),
                                                                 ("spec.sidecars", CONTAINERS)]


def test_paths_given_in_code_as_a_tuple_of_strings_are_templates():
    entry = WorkloadKindSettings(group="ml.example.com", kind="Training", paths=("spec.template", "spec.b.template"))
    assert [(p.path, p.holds) for p in entry.paths] == [("spec.template", "template"), ("spec.b.template", "template")]
    section = WorkloadSettings(kinds=(entry,))
    kind = workload_table(PolicySettings(workloads=section)).lookup("ml.example.com", "Training")
    assert kind is not None and [loc.text for loc in kind.locations] == ["spec.template", "spec.b.template"]


def test_the_same_kind_in_two_groups_is_two_kinds(tmp_path):
    settings = loaded(tmp_path, "workloads:\n  kinds:\n"
                                "    - {group: a.example.com, kind: Job, paths: [spec.template]}\n"
                                "    - {group: b.example.com, kind: Job, paths: [spec.template]}\n")
    assert [k.group for k in settings.workloads.kinds] == ["a.example.com", "b.example.com"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workloads: {kinds: [{group: '', kind: X, paths: [spec.template]}]}",
         'CONFIG: workloads.kinds.0.group: "": string should have at least 1 character'),
        ("workloads: {kinds: [{group: a.io, kind: '', paths: [spec.template]}]}",
         'CONFIG: workloads.kinds.0.kind: "": string should have at least 1 character'),
        ("workloads: {kinds: [{group: a.io, kind: X, paths: []}]}",
         "CONFIG: workloads.kinds.0.paths: []: tuple should have at least 1 item after validation, not 0"),
        ("workloads: {kinds: [{group: a.io, kind: X, paths: spec.template}]}",
         'CONFIG: workloads.kinds.0.paths: "spec.template" is not a list'),
        ("workloads: {kinds: [{group: a.io, kind: X, paths: ['spec..template']}]}",
         "CONFIG: workloads.kinds.0.paths.0.path: \"spec..template\": value error, 'spec..template': '(empty)' is not "
         "a field name (letters, digits, _ and -; * for every value of a map, a trailing [] for every item of a list)"
         '; CONFIG: workloads.kinds.0.paths: [{"path": "spec..template"}]: tuple should have at least 1 item after '
         "validation, not 0"),
        ("workloads: {kinds: [{group: apps, kind: Deployment, paths: [spec.template]}]}",
         'CONFIG: workloads.kinds.0: {"group": "apps", "kind": "Deployment", "paths": ["spec.template"]}: value '
         "error, group 'apps' holds Kubernetes' own kinds, which the rules judge already; workloads.kinds is for "
         "custom resources"),
        ("workloads: {kinds: [{group: batch, kind: Job, paths: [spec.template]}]}",
         'CONFIG: workloads.kinds.0: {"group": "batch", "kind": "Job", "paths": ["spec.template"]}: value error, '
         "group 'batch' holds Kubernetes' own kinds, which the rules judge already; workloads.kinds is for custom "
         "resources"),
        ("workloads: {kinds: [{group: b.io, kind: Y, paths: [a]}, {group: a.io, kind: X, paths: [a]}, "
         "{group: b.io, kind: Y, paths: [b]}, {group: a.io, kind: X, paths: [b]}]}",
         'CONFIG: workloads: {"kinds": [{"group": "b.io", "kind": "Y", "paths": ["a"]}, {"group": "a.io", "ki: value '
         "error, workloads.kinds names X.a.io, Y.b.io more than once"),
    ],
)
def test_declarations_the_configuration_refuses(tmp_path, text, message):
    assert refusal(tmp_path, text) == message
