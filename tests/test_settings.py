import pytest

from policies.settings import ConfigFileError, load_settings


def test_defaults_carry_the_names_of_the_design():
    settings = load_settings()
    assert settings.names.resources.gpu_mem == "aliyun.com/gpu-mem"
    assert settings.names.resources.gpu_core == "aliyun.com/gpu-core.percentage"
    assert settings.names.labels.schedule == "ack.node.gpu.schedule"
    assert settings.names.scheduler_name == "ack-co-scheduler"
    assert settings.names.gpushare_daemonsets == ("gpushare-device-plugin-ds",)
    assert settings.server.max_body_bytes == 4 * 1024 * 1024
    assert settings.certs.service_dns_names() == [
        "gpushare-webhook", "gpushare-webhook.gpushare-system", "gpushare-webhook.gpushare-system.svc",
        "gpushare-webhook.gpushare-system.svc.cluster.local"]


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
