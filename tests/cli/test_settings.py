import json

import pytest

from tests.support.check_helpers import run_gpushare, write_yaml
from tests.support.manifests import MEM, container
from webhook.settings import ConfigFileError, load_settings


def test_defaults_carry_the_names_of_the_design():
    settings = load_settings()
    assert settings.names.resources.gpu_mem == "aliyun.com/gpu-mem"
    assert settings.names.resources.gpu_core == "aliyun.com/gpu-core.percentage"
    assert settings.names.labels.schedule == "ack.node.gpu.schedule"
    assert settings.names.scheduler_name == "ack-co-scheduler"
    assert settings.names.gpushare_daemonsets == ("gpushare-device-plugin-ds",)
    assert settings.server.max_body_bytes == 4 * 1024 * 1024
    # The webhook's Service and the one that selects the binding leader.
    assert settings.certs.service_dns_names() == [
        "gpushare-webhook", "gpushare-webhook.gpushare-system", "gpushare-webhook.gpushare-system.svc",
        "gpushare-webhook.gpushare-system.svc.cluster.local",
        "gpushare-webhook-bindings", "gpushare-webhook-bindings.gpushare-system",
        "gpushare-webhook-bindings.gpushare-system.svc", "gpushare-webhook-bindings.gpushare-system.svc.cluster.local"]


def test_file_then_environment(tmp_path, monkeypatch):
    config = tmp_path / "c.yaml"
    config.write_text("names:\n  scheduler_name: my-scheduler\nserver:\n  port: 9000\n  threads: 4\n")
    monkeypatch.setenv("GPUSHARE_SERVER__PORT", "9443")
    settings = load_settings(config)
    assert settings.names.scheduler_name == "my-scheduler"
    assert settings.server.port == 9443  # the environment wins over the file
    assert settings.server.threads == 4


@pytest.mark.parametrize("text", ["server: {port: nope}", "unknown_section: 1", "- a list", "names: [1"])
def test_bad_files_are_refused_with_the_file_name(tmp_path, text):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    with pytest.raises(ConfigFileError, match=r"bad\.yaml"):
        load_settings(config)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(ConfigFileError, match="cannot read config"):
        load_settings(tmp_path / "absent.yaml")


@pytest.mark.processes
def test_rule_overrides_from_the_environment_in_any_case(tmp_path):
    pod = write_yaml(tmp_path / "x.yaml", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                           "spec": {"containers": [container("c", {MEM: "2Gi"})]}})
    for name in ("GPUSHARE_RULES__GS003__SEVERITY", "gpushare_rules__gs003__severity"):
        done = run_gpushare("check", "--format", "json", pod, env={name: "warn"})
        assert done.returncode == 0, done.stderr
        assert [f["severity"] for f in json.loads(done.stdout)["findings"]] == ["warn"]
    listed = run_gpushare("rules", env={"GPUSHARE_RULES__GS003__ENABLED": "false"}).stdout
    assert "GS003  off" in listed


def test_a_mistake_in_the_file_is_the_files_though_the_environment_sets_another_key_of_its_section(
        tmp_path, monkeypatch):
    config = tmp_path / "c.yaml"
    config.write_text("server:\n  port: 99999\n")
    monkeypatch.setenv("GPUSHARE_SERVER__WORKER", "gthread")
    with pytest.raises(ConfigFileError) as raised:
        load_settings(config)
    assert str(raised.value).startswith(f"{config}: server.port: 99999 must be at most 65535")
    monkeypatch.setenv("GPUSHARE_SERVER__PORT", "99998")
    with pytest.raises(ConfigFileError, match=r"^environment variable GPUSHARE_SERVER__PORT: server\.port"):
        load_settings(config)


@pytest.mark.processes
@pytest.mark.parametrize(("env", "text", "expected"), [
    ({"GPUSHARE_RULES__GS999__SEVERITY": "warn"}, None,
     "environment variable GPUSHARE_RULES__GS999: names unknown rules: GS999"),
    ({"GPUSHARE_SERVER__THREADS": "many"}, None,
     'environment variable GPUSHARE_SERVER__THREADS: server.threads: "many" is not a whole number'),
    ({}, "server:\n  threads: many\n", 'CONFIG: server.threads: "many" is not a whole number'),
    ({}, "rules:\n  GS999: {enabled: false}\n", "CONFIG: names unknown rules: GS999"),
    ({}, "rules:\n  GS001: {severity: fatal}\n",
     "CONFIG: rules.GS001.severity: \"fatal\" is not one of 'deny' or 'warn'"),
    ({}, "server:\n  port: 99999\n", "CONFIG: server.port: 99999 must be at most 65535"),
    ({}, "nonsense: 1\n", "CONFIG: nonsense: unknown setting"),
    ({}, "- a list\n", "CONFIG: config must be a mapping of sections"),
])
def test_config_errors_in_plain_words_name_their_source(tmp_path, env, text, expected):
    config = tmp_path / "c.yaml"
    config.write_text(text or "{}\n")
    pod = write_yaml(tmp_path / "x.yaml", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
    for command in (["check", "--config", config, pod], ["rules", "--config", config],
                    ["score", "--config", config, pod]):
        done = run_gpushare(*command, env=env)
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith(f"gpushare: error: {expected.replace('CONFIG', str(config))}"), line
        assert "pydantic" not in done.stderr and "None" not in done.stderr
