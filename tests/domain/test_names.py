"""The names the domain reads in objects (policies/model/names.py), as a config file sets them: which
resource names containers are read for, what the scheduler and memory unit mean, and every name the
configuration refuses, with the words `gpushare` prints."""

from __future__ import annotations

import pytest

from policies.model.resources import container_requests
from policies.model.settings import Names, ResourceNames
from tests.support.config_files import loaded, refusal


def test_the_resource_fields_in_order_and_those_containers_ask_for():
    assert ResourceNames.fields() == ("gpu_mem", "gpu_core", "gpu_count", "gpu_topology", "gpu_exclusive")
    # A node's count of cards is published by the device plugin; no container asks for it.
    assert ResourceNames.asked_fields() == ("gpu_mem", "gpu_core", "gpu_topology", "gpu_exclusive")
    r = Names().resources
    assert r.names() == ("aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage", "aliyun.com/gpu-count",
                         "aliyun.com/gpu", "nvidia.com/gpu")
    assert r.asked() == ("aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage", "aliyun.com/gpu", "nvidia.com/gpu")


def test_renamed_resources_are_the_ones_read_from_containers(tmp_path):
    names = loaded(tmp_path, "names:\n  resources: {gpu_mem: example.com/vmem, gpu_count: example.com/cards}\n").names
    assert names.resources.names()[:3] == ("example.com/vmem", "aliyun.com/gpu-core.percentage", "example.com/cards")
    spec = {"containers": [{"name": "main", "resources": {"limits": {
        "example.com/vmem": "4", "aliyun.com/gpu-mem": "8", "example.com/cards": "2", "nvidia.com/gpu": "1"}}}]}
    [found] = container_requests(spec, ("spec",), names)
    assert sorted(found.limits) == ["example.com/vmem", "nvidia.com/gpu"]
    assert found.count("example.com/vmem") == 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("names: {resources: {gpu_mem: 'a b'}}",
         'CONFIG: names.resources.gpu_mem: "a b": value error, a resource name is not empty and has no white space'),
        ("names: {resources: {gpu_core: \"a\\tb\"}}",
         'CONFIG: names.resources.gpu_core: "a\\tb": value error, a resource name is not empty and has no white space'),
        ("names: {resources: {gpu_count: ''}}",
         'CONFIG: names.resources.gpu_count: "": value error, a resource name is not empty and has no white space'),
        ("names: {scheduler_name: ''}", 'CONFIG: names.scheduler_name: "": string should have at least 1 character'),
        ("names: {env: {mps: ['A=B']}}", 'CONFIG: names.env: {"mps": ["A=B"]}: value error, an environment variable '
                                         "name is not empty and has no white space or '='"),
        ("names: {env: {device_plugin: ['B', ' ']}}", 'CONFIG: names.env: {"device_plugin": ["B", " "]}: value error, '
                                                     "an environment variable name is not empty and has no white "
                                                     "space or '='"),
        ("names: {env: {visible_devices: ''}}", 'CONFIG: names.env: {"visible_devices": ""}: value error, an '
                                                "environment variable name is not empty and has no white space "
                                                "or '='"),
        ("names: {env: {disable_isolation: 'NO ISOLATION'}}",
         'CONFIG: names.env: {"disable_isolation": "NO ISOLATION"}: value error, an environment variable name is '
         "not empty and has no white space or '='"),
        ("names: {env: {device_plugin: [B, A], mps: [A, B]}}",
         'CONFIG: names.env: {"device_plugin": ["B", "A"], "mps": ["A", "B"]}: value error, each variable is judged '
         "one way, so it is listed once: A, B"),
        ("names: {env: {mps: [X], disable_isolation: X}}",
         'CONFIG: names.env: {"mps": ["X"], "disable_isolation": "X"}: value error, each variable is judged one way, '
         "so it is listed once: X"),
        ("names: {ecs_provider_id_pattern: '('}",
         'CONFIG: names.ecs_provider_id_pattern: "(": value error, not a regular expression: missing ), '
         "unterminated subpattern at position 0"),
        ("names: {ecs_provider_id_pattern: '(?P<region>.*)'}",
         'CONFIG: names.ecs_provider_id_pattern: "(?P<region>.*)": value error, needs the named groups '
         "(?P<region>...) and (?P<instance>...)"),
        ("names: {ecs_provider_id_pattern: '(?P<instance>.*)'}",
         'CONFIG: names.ecs_provider_id_pattern: "(?P<instance>.*)": value error, needs the named groups '
         "(?P<region>...) and (?P<instance>...)"),
    ],
)
def test_names_the_configuration_refuses(tmp_path, text, message):
    assert refusal(tmp_path, text) == message


def test_names_the_configuration_accepts(tmp_path):
    names = loaded(tmp_path, "names:\n  scheduler_name: s\n  env: {device_plugin: [A_1], mps: [B], "
                             "visible_devices: C, disable_isolation: D}\n"
                             "  ecs_provider_id_pattern: '(?P<region>[a-z-]+)/(?P<instance>i-[0-9]+)'\n").names
    assert names.scheduler_name == "s" and names.env.device_plugin == ("A_1",)
    assert names.ecs_provider_id_pattern == "(?P<region>[a-z-]+)/(?P<instance>i-[0-9]+)"
    # More named groups than the two it needs are fine.
    pattern = "(?P<cloud>alicloud)://(?P<region>[a-z-]+)[.](?P<instance>i-[0-9a-z]+)"
    names = loaded(tmp_path, f"names: {{ecs_provider_id_pattern: '{pattern}'}}\n").names
    assert names.ecs_provider_id_pattern == pattern


@pytest.mark.parametrize(("unit", "most"), [("GiB", 1024), ("MiB", 1024 * 1024)])
def test_the_largest_card_in_the_memory_unit(tmp_path, unit, most):
    names = loaded(tmp_path, f"names: {{memory_unit: {unit}}}\n").names
    assert names.memory_unit == unit
    assert names.max_card_memory == most


@pytest.mark.parametrize(
    ("scheduler", "injected"),
    [("ack-co-scheduler", "ack-co-scheduler"), ("none", None), (" None ", None), ("NONE", None),
     ("volcano", "volcano"), ("nonesuch", "nonesuch")],
)
def test_the_scheduler_gm001_sets(tmp_path, scheduler, injected):
    assert loaded(tmp_path, f"names: {{scheduler_name: '{scheduler}'}}\n").names.injected_scheduler == injected


def test_the_defaults_set_a_scheduler_and_count_gib():
    names = Names()
    assert names.injected_scheduler == "ack-co-scheduler"
    assert names.max_card_memory == 1024
