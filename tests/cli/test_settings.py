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


# The domain's defaults, as docs/state.md ("Configuration"), docs/audit.md, docs/operations.md ("What one
# review may cost", "When the webhook is down") and docs/check.md state them.
DOMAIN_DEFAULTS = [
    ("state.stale_after_seconds", 30.0), ("state.assume_ttl_seconds", 60.0), ("state.assume_max_entries", 20000),
    ("state.recent_pods_ttl_seconds", 60.0), ("state.recent_pods_max_entries", 20000),
    ("state.list_page_size", 500), ("state.watch_timeout_seconds", 300), ("state.connect_timeout_seconds", 10.0),
    ("state.backoff_initial_seconds", 0.5), ("state.backoff_max_seconds", 30.0),
    ("state.kubelet_configz.enabled", False), ("state.kubelet_configz.refresh_seconds", 600.0),
    ("state.kubelet_configz.timeout_seconds", 5.0), ("state.kubelet_configz.concurrency", 4),
    ("audit.interval_seconds", 300.0), ("audit.unassigned_after_seconds", 600.0),
    ("audit.run_timeout_seconds", 120.0), ("audit.max_results_per_report", 200), ("audit.max_reports", 100),
    ("capacity.max_work", 100_000), ("budget.max_templates", 256), ("budget.max_containers", 1024),
    ("budget.max_affinity_terms", 4096), ("backstop.scheduler_rule", False), ("exemptions.allow_on_nodes", False),
]


def _setting(settings, path: str):
    for part in path.split("."):
        settings = getattr(settings, part)
    return settings


def _yaml_of(path: str, value: object) -> str:
    *sections, key = path.split(".")
    heads = "".join(f"{'  ' * i}{section}:\n" for i, section in enumerate(sections))
    return f"{heads}{'  ' * len(sections)}{key}: {value}\n"


@pytest.mark.parametrize(("path", "default"), DOMAIN_DEFAULTS)
def test_the_domains_defaults(path, default):
    assert _setting(load_settings(), path) == default


# Each bound of the domain's settings: the last value accepted, the first refused and what is said.
@pytest.mark.parametrize(
    ("path", "accepted", "refused", "why"),
    [
        ("state.kubelet_configz.refresh_seconds", 0, -1, "must be at least 0.0"),
        ("state.kubelet_configz.timeout_seconds", 0.5, 0, "must be more than 0.0"),
        ("state.kubelet_configz.timeout_seconds", 60, 61, "must be at most 60.0"),
        ("state.kubelet_configz.concurrency", 1, 0, "must be at least 1"),
        ("state.kubelet_configz.concurrency", 32, 33, "must be at most 32"),
        ("state.stale_after_seconds", 0.5, 0, "must be more than 0.0"),
        ("state.assume_ttl_seconds", 0.5, 0, "must be more than 0.0"),
        ("state.assume_max_entries", 1, 0, "must be at least 1"),
        ("state.recent_pods_ttl_seconds", 0.5, 0, "must be more than 0.0"),
        ("state.recent_pods_max_entries", 1, 0, "must be at least 1"),
        ("state.list_page_size", 1, 0, "must be at least 1"),
        ("state.watch_timeout_seconds", 1, 0, "must be at least 1"),
        ("state.connect_timeout_seconds", 0.5, 0, "must be more than 0.0"),
        ("state.backoff_initial_seconds", 0.5, 0, "must be more than 0.0"),
        ("state.backoff_max_seconds", 0.5, 0, "must be more than 0.0"),
        ("audit.interval_seconds", 0, -1, "must be at least 0.0"),
        ("audit.unassigned_after_seconds", 0.5, 0, "must be more than 0.0"),
        ("audit.run_timeout_seconds", 0.5, 0, "must be more than 0.0"),
        ("audit.max_results_per_report", 1, 0, "must be at least 1"),
        ("audit.max_results_per_report", 5000, 5001, "must be at most 5000"),
        ("audit.max_reports", 1, 0, "must be at least 1"),
        ("audit.max_reports", 5000, 5001, "must be at most 5000"),
        ("capacity.max_work", 1000, 999, "must be at least 1000"),
        ("budget.max_templates", 1, 0, "must be at least 1"),
        ("budget.max_containers", 1, 0, "must be at least 1"),
        ("budget.max_affinity_terms", 1, 0, "must be at least 1"),
    ],
)
def test_the_bounds_of_the_domains_settings(tmp_path, path, accepted, refused, why):
    config = tmp_path / "c.yaml"
    config.write_text(_yaml_of(path, accepted))
    assert _setting(load_settings(config), path) == accepted
    config.write_text(_yaml_of(path, refused))
    with pytest.raises(ConfigFileError) as raised:
        load_settings(config)
    assert str(raised.value) == f"{config}: {path}: {refused} {why}"


def test_a_rule_override_that_only_sets_the_severity_keeps_the_rule_on(tmp_path):
    from policies.rules.rule_index import rule_entries

    config = tmp_path / "c.yaml"
    config.write_text("rules:\n  GS001: {severity: warn}\n  GS003: {enabled: false}\n")
    entries = {e.id: e for e in rule_entries(load_settings(config))}
    assert (entries["GS001"].enabled, entries["GS001"].severity) == (True, "warn")
    assert (entries["GS003"].enabled, entries["GS003"].severity) == (False, "deny")


@pytest.mark.parametrize("key", ["matchLabels", "match_labels"])
def test_a_grants_selector_by_its_kubernetes_name_or_its_field_name(tmp_path, key):
    config = tmp_path / "c.yaml"
    config.write_text(f"exemptions:\n  grants:\n  - {{name: g, namespace: ml, rules: [GS001], reason: trial, "
                      f"expires: 2030-01-01, selector: {{{key}: {{team: a}}}}}}\n")
    [grant] = load_settings(config).exemptions.grants
    assert grant.selector is not None and grant.selector.match_labels == {"team": "a"}
    with pytest.raises(ValueError, match="frozen"):
        grant.selector.match_labels = {}


def test_two_grants_of_one_name_are_refused_naming_each_name_once(tmp_path):
    def grant(name: str, names: str) -> str:
        return f"{{name: {name}, namespace: ml, rules: [GS001], reason: trial, expires: 2030-01-01, names: '{names}'}}"

    config = tmp_path / "c.yaml"
    config.write_text(f"exemptions:\n  grants: [{grant('b', 'x*')}, {grant('a', 'y')}, {grant('c', 'v')}]\n")
    assert [g.name for g in load_settings(config).exemptions.grants] == ["b", "a", "c"]
    config.write_text(f"exemptions:\n  grants: [{grant('b', 'x*')}, {grant('a', 'y')}, {grant('b', 'z')}, "
                      f"{grant('a', 'w')}, {grant('c', 'v')}]\n")
    with pytest.raises(ConfigFileError) as raised:
        load_settings(config)
    assert str(raised.value).startswith(f"{config}: exemptions: ")
    assert str(raised.value).endswith(": value error, exemption grant names must be unique: a, b")


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("name", "''", '"": string should have at least 1 character'),
        ("namespace", "''", '"": string should have at least 1 character'),
        ("rules", "[]", "[]: tuple should have at least 1 item after validation, not 0"),
        ("reason", "''", '"": string should have at least 1 character'),
    ],
)
def test_a_grant_names_itself_its_namespace_its_rules_and_its_reason(tmp_path, field, value, why):
    grant = {"name": "g", "namespace": "ml", "rules": "[GS001]", "reason": "trial", "expires": "2030-01-01",
             "names": "x"}
    grant[field] = value
    config = tmp_path / "c.yaml"
    config.write_text("exemptions:\n  grants:\n  - {" + ", ".join(f"{k}: {v}" for k, v in grant.items()) + "}\n")
    with pytest.raises(ConfigFileError) as raised:
        load_settings(config)
    assert str(raised.value) == f"{config}: exemptions.grants.0.{field}: {why}"
