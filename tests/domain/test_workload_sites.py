"""What a workload object holds, read through its kind's table (policies/model/workload_sites.py), in
process, on the real workload samples of tests/data/workloads (their origins in each file) and on
broken copies of them: the pod locations and their containers with the paths messages name, the GPU
requests, the scheduler a workload gives its pods, the pod spec patches written as strings, the
lenient count the budget makes, and what a strict read refuses (a malformed object, a configured
path that holds something else)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.model.resources import ShapeError, render_path
from policies.model.settings import Names, PolicySettings, WorkloadKindSettings, WorkloadSettings
from policies.model.workload_sites import patch_strings, pod_locations, pod_sites, site_requests, workload_scheduler
from policies.model.workloads import WorkloadConfigError, WorkloadKind, workload_table

DATA = Path(__file__).parents[1] / "data" / "workloads"
NAMES = Names()
MEM = NAMES.resources.gpu_mem
TABLE = workload_table(PolicySettings())
FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where installed: the CRDs are long


def sample(name: str) -> dict[str, Any]:
    return yaml.safe_load((DATA / f"{name}.yaml").read_text())


def kind_of(obj: dict[str, Any]) -> WorkloadKind:
    found = TABLE.lookup(obj["apiVersion"].rpartition("/")[0], obj["kind"])
    assert found is not None
    return found


def sites(obj: dict[str, Any], kind: WorkloadKind | None = None, strict: bool = True) -> list[tuple[Any, ...]]:
    return [(render_path(s.path), render_path(s.spec_path), s.meta is not None,
             [(c.group, c.index, render_path(c.path), c.name, render_path(c.resources_path)) for c in s.containers])
            for s in pod_sites(kind or kind_of(obj), obj, strict)]


def requests(obj: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(r.name, r.group, r.index, render_path(r.path), {k: v.raw for k, v in r.limits.items()},
             {k: v.raw for k, v in r.requests.items()}, r.sidecar)
            for site in pod_sites(kind_of(obj), obj) for r in site_requests(site.containers, NAMES)]


def configured(*paths: Any, group: str = "ml.example.com", kind: str = "Training") -> WorkloadKind:
    section = WorkloadSettings(kinds=(WorkloadKindSettings(group=group, kind=kind, paths=paths),))
    found = workload_table(PolicySettings(workloads=section)).lookup(group, kind)
    assert found is not None
    return found


def test_every_task_of_a_volcano_job():
    obj = sample("volcanojob")
    container = "spec.tasks[{i}].template.spec.containers[0]"
    assert sites(obj) == [
        (f"spec.tasks[{i}].template", f"spec.tasks[{i}].template.spec", False,
         [("containers", 0, container.format(i=i), "tensorflow", container.format(i=i) + ".resources")])
        for i in (0, 1)]
    assert requests(obj) == [("tensorflow", "containers", 0, container.format(i=1), {MEM: 4}, {}, False)]
    assert list(pod_locations(kind_of(obj), obj)) == [(obj["spec"]["tasks"][i]["template"]["spec"], 1) for i in (0, 1)]


def test_every_replica_of_a_map_of_replica_specs():
    obj = sample("pytorchjob")
    assert [s[0] for s in sites(obj)] == ["spec.pytorchReplicaSpecs.Master.template",
                                          "spec.pytorchReplicaSpecs.Worker.template"]
    obj["spec"]["pytorchReplicaSpecs"]["Master"] = None  # a replica left empty holds nothing
    assert [s[0] for s in sites(obj)] == ["spec.pytorchReplicaSpecs.Worker.template"]


def test_containers_init_containers_and_sidecars_of_a_template():
    obj = sample("volcanojob")
    template = obj["spec"]["tasks"][1]["template"]
    template["metadata"] = {"labels": {"app": "x"}}
    spec = template["spec"]
    spec["containers"].append({"image": "side", "resources": {"requests": {MEM: "1"}}})  # no name
    spec["initContainers"] = [
        {"name": "fetch", "resources": {"limits": {MEM: "2"}}},
        {"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {MEM: "3"}, "requests": {"cpu": "1"}}},
        {"name": "plain", "resources": {"limits": {"cpu": "1"}}},
        {"name": "bare"},
    ]
    obj["spec"]["tasks"][0] = None  # a task left empty holds nothing
    base = "spec.tasks[1].template.spec"
    [site] = sites(obj)
    assert site == ("spec.tasks[1].template", base, True, [
        ("containers", 0, f"{base}.containers[0]", "tensorflow", f"{base}.containers[0].resources"),
        ("containers", 1, f"{base}.containers[1]", "containers[1]", f"{base}.containers[1].resources"),
        ("initContainers", 0, f"{base}.initContainers[0]", "fetch", f"{base}.initContainers[0].resources"),
        ("initContainers", 1, f"{base}.initContainers[1]", "proxy", f"{base}.initContainers[1].resources"),
        ("initContainers", 2, f"{base}.initContainers[2]", "plain", f"{base}.initContainers[2].resources"),
        ("initContainers", 3, f"{base}.initContainers[3]", "bare", f"{base}.initContainers[3].resources"),
    ])
    assert requests(obj) == [
        ("tensorflow", "containers", 0, f"{base}.containers[0]", {MEM: 4}, {}, False),
        ("containers[1]", "containers", 1, f"{base}.containers[1]", {}, {MEM: "1"}, False),
        ("fetch", "initContainers", 0, f"{base}.initContainers[0]", {MEM: "2"}, {}, False),
        ("proxy", "initContainers", 1, f"{base}.initContainers[1]", {MEM: "3"}, {}, True),
    ]
    assert list(pod_locations(kind_of(obj), obj)) == [(spec, 6)]


def test_a_trainjob_trainer_stands_for_the_node_container():
    obj = sample("trainjob")
    obj["spec"]["trainer"]["env"] = [{"name": "A", "value": "1"}]
    [site] = pod_sites(kind_of(obj), obj)
    [trainer] = site.containers
    assert (trainer.name, render_path(trainer.path), render_path(trainer.resources_path)) == (
        "node", "spec.trainer", "spec.trainer.resourcesPerNode")
    assert trainer.container["env"] == [{"name": "A", "value": "1"}]
    assert trainer.container["resources"] == {"limits": {MEM: 8}}
    assert requests(obj) == [("node", "containers", 0, "spec.trainer", {MEM: 8}, {}, False)]
    del obj["spec"]["trainer"]["resourcesPerNode"]
    [site] = pod_sites(kind_of(obj), obj)
    assert "resources" not in site.containers[0].container and requests(obj) == []
    assert list(pod_locations(kind_of(obj), obj)) == [(None, 1)]


def test_argo_templates_and_kserve_model_formats_name_their_containers():
    assert sites(sample("workflow"))[1][3] == [
        ("containers", 0, "spec.templates[1].container", "main", "spec.templates[1].container.resources")]
    assert sites(sample("inferenceservice"))[0][3] == [
        ("containers", 0, "spec.predictor.tensorflow", "kserve-container", "spec.predictor.tensorflow.resources")]


def test_a_configured_path_of_resources():
    kind = configured({"path": "spec.replicas.*.resources", "holds": "resources"})
    obj = {"apiVersion": "ml.example.com/v1", "kind": "Training", "spec": {"replicas": {
        "leader": {"resources": {"limits": {MEM: "4"}}}, "worker": {"resources": {"requests": {MEM: "2"}}}}}}
    assert sites(obj, kind) == [
        ("spec.replicas.leader.resources", "spec.replicas.leader.resources", False,
         [("resources", 0, "spec.replicas.leader.resources", "resources", "spec.replicas.leader.resources")]),
        ("spec.replicas.worker.resources", "spec.replicas.worker.resources", False,
         [("resources", 0, "spec.replicas.worker.resources", "resources", "spec.replicas.worker.resources")]),
    ]
    found = [site_requests(s.containers, NAMES) for s in pod_sites(kind, obj)]
    assert [[(r.group, r.count(MEM)) for r in each] for each in found] == [[("resources", 4)], [("resources", 2)]]


def test_a_configured_list_of_containers():
    kind = configured({"path": "spec.sidecars", "holds": "containers"})
    obj = {"spec": {"sidecars": [{"name": "a", "resources": {"limits": {MEM: "1"}}}, {"image": "b"}]}}
    assert sites(obj, kind) == [("spec.sidecars", "spec.sidecars", False, [
        ("containers", 0, "spec.sidecars[0]", "a", "spec.sidecars[0].resources"),
        ("containers", 1, "spec.sidecars[1]", "sidecars[1]", "spec.sidecars[1].resources")])]
    assert list(pod_locations(kind, obj)) == [(None, 2)]
    obj["spec"]["sidecars"] = "none"  # lenient: another shape holds nothing
    assert list(pod_locations(kind, obj)) == [(None, 0)]


def test_a_configured_single_container_is_named_by_its_field():
    kind = configured({"path": "spec.launcher", "holds": "container"})
    assert sites({"spec": {"launcher": {"image": "x"}}}, kind) == [
        ("spec.launcher", "spec.launcher", False, [("containers", 0, "spec.launcher", "launcher",
                                                    "spec.launcher.resources")])]
    assert list(pod_locations(kind, {"spec": {"launcher": "x"}})) == [(None, 0)]


@pytest.mark.parametrize(
    ("break_it", "message", "lenient", "counted"),
    [
        (lambda o: o["spec"].__setitem__("tasks", {"worker": {}}), "spec.tasks: must be a list, got dict", [], []),
        (lambda o: o["spec"]["tasks"][1].__setitem__("template", "x"),
         "spec.tasks[1].template: must be a pod template (metadata and spec), got str", [1, 0], [1, 0]),
        (lambda o: o["spec"]["tasks"][1]["template"].__setitem__("spec", ["x"]),
         "spec.tasks[1].template.spec: must be an object, got list", [1, 0], [1, 0]),
        (lambda o: o["spec"]["tasks"][1]["template"]["spec"].__setitem__("containers", {"name": "x"}),
         "spec.tasks[1].template.spec.containers: must be a list of containers, got dict", [1, 0], [1, 0]),
        (lambda o: o["spec"]["tasks"][1]["template"]["spec"]["containers"].append("x"),
         "spec.tasks[1].template.spec.containers[1]: must be an object, got str", [1, 1], [1, 2]),
        (lambda o: o["spec"]["tasks"][1]["template"]["spec"]["containers"][0].__setitem__("resources", "4"),
         "spec.tasks[1].template.spec.containers[0].resources: must be an object, got str", [1, 1], [1, 1]),
        (lambda o: o["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["resources"].__setitem__("limits", 4),
         "spec.tasks[1].template.spec.containers[0].resources.limits: must be an object, got int", [1, 1], [1, 1]),
    ],
)
def test_a_malformed_object_is_refused_where_it_is_wrong_and_read_leniently_as_holding_less(
        break_it, message, lenient, counted):
    obj = sample("volcanojob")
    break_it(obj)
    kind = kind_of(obj)
    with pytest.raises(ShapeError) as raised:
        for site in pod_sites(kind, obj):
            site_requests(site.containers, NAMES)
    assert str(raised.value) == message
    # What the webhooks' matchConditions see, and what the budget counts: what has another shape holds nothing.
    assert [len(site.containers) for site in pod_sites(kind, obj, strict=False)] == lenient
    assert [count for _, count in pod_locations(kind, obj)] == counted


def test_a_template_that_is_not_an_object_holds_nothing_when_read_leniently():
    obj = sample("volcanojob")
    obj["spec"]["tasks"][1]["template"] = "x"
    assert sites(obj, strict=False) == [sites(sample("volcanojob"))[0],
                                        ("spec.tasks[1].template", "spec.tasks[1].template", False, [])]
    assert [count for _, count in pod_locations(kind_of(obj), obj)] == [1, 0]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([{"spec": {}}], "spec.template is a list, not a pod template (metadata and spec)"),
        ("x", "spec.template is a string, not a pod template (metadata and spec)"),
        (True, "spec.template is a boolean, not a pod template (metadata and spec)"),
        (3, "spec.template is a number, not a pod template (metadata and spec)"),
        ({"spec": {}, "containers": [], "replicas": 2, "image": "x", "zone": "a"},
         "spec.template has containers, image, replicas, so it is not a pod template (metadata and spec)"),
        ({"spec": {"containers": {"name": "x"}}},
         "spec.template.spec.containers is an object, not a list of containers"),
    ],
)
def test_a_configured_path_that_holds_something_else_is_a_configuration_error(value, message):
    kind = configured("spec.template")
    obj = {"apiVersion": "ml.example.com/v1", "kind": "Training", "spec": {"template": value}}
    with pytest.raises(WorkloadConfigError) as raised:
        pod_sites(kind, obj)
    assert str(raised.value) == (f"configuration workloads.kinds[0] (Training.ml.example.com) path spec.template "
                                 f"(holds: template): {message}; fix the path or what it holds")
    assert [len(site.containers) for site in pod_sites(kind, obj, strict=False)] == [0]


def test_the_object_itself_as_a_configured_location():
    kind = configured({"path": "spec.workers[]", "holds": "podSpec"})
    obj = {"spec": "x"}
    with pytest.raises(WorkloadConfigError) as raised:
        pod_sites(kind, obj)
    assert str(raised.value) == ("configuration workloads.kinds[0] (Training.ml.example.com) path spec.workers[] "
                                 "(holds: podSpec): spec is a string, not an object; fix the path or what it holds")


@pytest.mark.parametrize(
    ("spec", "template_scheduler", "expected"),
    [
        ({"schedulerName": "volcano"}, None, ("volcano", "spec.schedulerName", ("spec", "schedulerName"))),
        ({"schedulerName": "kai"}, None, ("kai", "spec.schedulerName", ("spec", "schedulerName"))),
        # Left empty, the Job's admission sets volcano: its default.
        ({}, None, ("volcano", "the default of spec.schedulerName in a Job.batch.volcano.sh",
                    ("spec", "tasks", 1, "template", "spec"))),
        ({"schedulerName": ""}, None, ("volcano", "the default of spec.schedulerName in a Job.batch.volcano.sh",
                                       ("spec", "tasks", 1, "template", "spec"))),
        # The pod template's own choice wins.
        ({"schedulerName": "volcano"}, "ack-co-scheduler", None),
        ({"schedulerName": "volcano"}, "", ("volcano", "spec.schedulerName", ("spec", "schedulerName"))),
    ],
)
def test_the_scheduler_a_volcano_job_gives_its_pods(spec, template_scheduler, expected):
    obj = sample("volcanojob")
    obj["spec"].pop("schedulerName")
    obj["spec"].update(spec)
    if template_scheduler is not None:
        obj["spec"]["tasks"][1]["template"]["spec"]["schedulerName"] = template_scheduler
    kind = kind_of(obj)
    assert workload_scheduler(kind, obj, pod_sites(kind, obj)[1]) == expected


def test_the_scheduler_of_an_argo_workflow_has_no_default():
    obj = sample("workflow")
    kind = kind_of(obj)
    site = pod_sites(kind, obj)[1]
    assert workload_scheduler(kind, obj, site) is None
    obj["spec"]["schedulerName"] = "ack-co-scheduler"
    assert workload_scheduler(kind, obj, site) == ("ack-co-scheduler", "spec.schedulerName", ("spec", "schedulerName"))
    # A kind that names no scheduler field.
    torch = sample("pytorchjob")
    assert workload_scheduler(kind_of(torch), torch, pod_sites(kind_of(torch), torch)[0]) is None


def test_pod_spec_patches_written_as_strings():
    obj = sample("workflow")
    assert patch_strings(kind_of(obj), obj) == []
    obj["spec"]["podSpecPatch"] = "{}"
    obj["spec"]["templates"][1]["podSpecPatch"] = '{"containers": []}'
    obj["spec"]["templates"][0]["podSpecPatch"] = {"not": "a string"}
    obj["spec"]["templateDefaults"] = {"podSpecPatch": "x"}
    assert patch_strings(kind_of(obj), obj) == [
        (("spec", "podSpecPatch"), "{}"),
        (("spec", "templates", 1, "podSpecPatch"), '{"containers": []}'),
        (("spec", "templateDefaults", "podSpecPatch"), "x"),
    ]
    obj["spec"]["templates"] = {"a": {}}
    with pytest.raises(ShapeError, match=r"^spec\.templates: must be a list, got dict$"):
        patch_strings(kind_of(obj), obj)
    assert patch_strings(kind_of(obj), obj, strict=False) == [(("spec", "podSpecPatch"), "{}"),
                                                              (("spec", "templateDefaults", "podSpecPatch"), "x")]


def test_unnamed_containers_are_named_by_their_field_wherever_it_is():
    kind = configured({"path": "spec.tools.launcher", "holds": "container"},
                      {"path": "spec.extra.sidecars", "holds": "containers"})
    obj = {"spec": {"tools": {"launcher": {"image": "x"}}, "extra": {"sidecars": [{"image": "y"}, {"image": "z"}]}}}
    assert [[(c.name, render_path(c.path)) for c in site.containers] for site in pod_sites(kind, obj)] == [
        [("launcher", "spec.tools.launcher")],
        [("sidecars[0]", "spec.extra.sidecars[0]"), ("sidecars[1]", "spec.extra.sidecars[1]")]]


def test_a_configured_containers_path_that_holds_no_list_and_a_template_with_other_keys():
    kind = configured({"path": "spec.sidecars", "holds": "containers"}, {"path": "spec.workers[]", "holds": "podSpec"},
                      "spec.template")
    template = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "main"}]}}
    assert [len(s.containers) for s in pod_sites(kind, {"spec": {"template": template}})] == [1]
    with pytest.raises(WorkloadConfigError, match=r"\(holds: containers\): spec\.sidecars is an object, not a list "
                                                  r"of containers; fix"):
        pod_sites(kind, {"spec": {"sidecars": {"name": "x"}}})
    with pytest.raises(WorkloadConfigError, match=r"\(holds: podSpec\): spec\.workers\[0\] is a list, not a podSpec; "):
        pod_sites(kind, {"spec": {"workers": [["x"]]}})


def test_every_location_and_container_is_read_past_one_of_another_shape():
    kind = configured({"path": "spec.tools[]", "holds": "container"}, {"path": "spec.sidecars", "holds": "containers"})
    obj = {"spec": {"tools": ["x", {"name": "t"}], "sidecars": ["y", {"name": "s"}, {"image": "z"}]}}
    assert [[c.name for c in site.containers] for site in pod_sites(kind, obj, strict=False)] == [
        [], ["t"], ["s", "sidecars[2]"]]
    assert list(pod_locations(kind, obj)) == [(None, 0), (None, 1), (None, 3)]


def test_requests_of_containers_past_one_without_resources():
    kind = configured({"path": "spec.sidecars", "holds": "containers"})
    obj = {"spec": {"sidecars": [{"name": "a"}, {"name": "b", "resources": {"limits": {MEM: "1"}}}]}}
    [site] = pod_sites(kind, obj)
    assert [(r.name, r.index, r.count(MEM)) for r in site_requests(site.containers, NAMES)] == [("b", 1, 1)]


def test_only_an_init_container_is_a_sidecar():
    # As the API server sends it (decoded JSON, so no string is the code's own constant).
    obj = yaml.safe_load(f"""
spec:
  tasks:
  - template:
      spec:
        containers:
        - {{name: main, restartPolicy: Always, resources: {{limits: {{{MEM}: 1}}}}}}
        initContainers:
        - {{name: proxy, restartPolicy: Always, resources: {{limits: {{{MEM}: 1}}}}}}
        - {{name: warm, restartPolicy: OnFailure, resources: {{limits: {{{MEM}: 1}}}}}}
""")
    kind = TABLE.lookup("batch.volcano.sh", "Job")
    assert kind is not None
    [site] = pod_sites(kind, obj)
    assert [(r.name, r.sidecar) for r in site_requests(site.containers, NAMES)] == [
        ("main", False), ("proxy", True), ("warm", False)]


def test_a_trainers_own_resources_field_is_not_its_resources():
    obj = sample("trainjob")
    obj["spec"]["trainer"].update(yaml.safe_load(f"resources: {{limits: {{{MEM}: 2}}}}\nvolumeMounts: []"))
    kind = kind_of(obj)
    [site] = pod_sites(kind, obj)
    view = site.containers[0].container
    assert sorted(view) == ["command", "numNodes", "resources", "resourcesPerNode", "volumeMounts"]
    assert view["resources"] == {"limits": {MEM: 8}}
    del obj["spec"]["trainer"]["resourcesPerNode"]
    [site] = pod_sites(kind, obj)
    assert "resources" not in site.containers[0].container
    assert site_requests(site.containers, NAMES) == []


def test_every_built_in_kind_is_registered_as_its_crd_declares_it():
    """Kind, plural, versions and scope (what the webhook registration and the live audit use) against
    the vendored CRDs of tests/data/workload-crds (origins in its ORIGIN.md)."""
    crds = DATA.parent / "workload-crds"
    for kind in TABLE.kinds():
        files = sorted(crds.glob(f"{kind.group}_{kind.plural}*.yaml"))
        docs = [yaml.load(p.read_text(), Loader=FAST_LOADER) for p in files]
        assert docs, kind.name
        for crd in docs:
            spec = crd["spec"]
            assert (spec["group"], spec["names"]["kind"], spec["names"]["plural"]) == (
                kind.group, kind.kind, kind.plural), kind.name
            assert kind.namespaced is (spec["scope"] == "Namespaced"), kind.name
        served = {v["name"] for crd in docs for v in crd["spec"]["versions"]}
        assert set(kind.versions) <= served, kind.name


def test_single_containers_of_argo_scripts_trainjob_initializers_and_kserve_explainers():
    workflow = sample("workflow")
    workflow["spec"]["templates"][1]["script"] = workflow["spec"]["templates"][1].pop("container")
    assert sites(workflow)[1][3] == [
        ("containers", 0, "spec.templates[1].script", "main", "spec.templates[1].script.resources")]
    trainjob = sample("trainjob")
    trainjob["spec"]["initializer"] = {"dataset": {"env": [{"name": "A", "value": "1"}]},
                                       "model": {"storageUri": "hf://x"}}
    assert [c[3] for s in sites(trainjob) for c in s[3]] == ["node", "dataset-initializer", "model-initializer"]
    service = sample("inferenceservice")
    service["spec"]["explainer"] = {"art": {"image": "art", "resources": {"limits": {MEM: "1"}}}}
    [explainer] = [s for s in sites(service) if s[0] == "spec.explainer"]
    assert explainer[3] == [("containers", 0, "spec.explainer.art", "art", "spec.explainer.art.resources")]


def test_the_table_is_kept_per_settings_section():
    settings = PolicySettings()
    first = workload_table(settings)
    assert workload_table(settings) is first
    assert workload_table(settings).lookup("batch.volcano.sh", "Job") is first.lookup("batch.volcano.sh", "Job")


def test_argo_init_containers_sidecars_and_container_sets_and_a_serving_runtimes_containers():
    workflow = sample("workflow")
    template = workflow["spec"]["templates"][1]
    template["initContainers"] = [{"name": "fetch"}]
    template["sidecars"] = [{"name": "proxy"}]
    template["containerSet"] = {"containers": [{"name": "a"}, {"name": "b"}]}
    assert [(c[0], c[2], c[3]) for c in sites(workflow)[1][3]] == [
        ("containers", "spec.templates[1].container", "main"),
        ("containers", "spec.templates[1].containerSet.containers[0]", "a"),
        ("containers", "spec.templates[1].containerSet.containers[1]", "b"),
        ("initContainers", "spec.templates[1].initContainers[0]", "fetch"),
        ("containers", "spec.templates[1].sidecars[0]", "proxy"),
    ]
    runtime = sample("servingruntime")
    assert [c[2] for c in sites(runtime)[0][3]] == [
        f"spec.containers[{i}]" for i in range(len(runtime["spec"]["containers"]))]
