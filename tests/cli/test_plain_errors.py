"""Every error a user can cause, through every command it can reach: one line,
``gpushare: error: <what> <where>: <why>``, exit 2, and none of the libraries' words (urllib3's
connection pools, PyYAML's "<unicode string>", Python's [Errno N], the kubernetes client's
"Invalid kube-config file", Werkzeug's port text, warnings)."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from certs.issue import ensure_serving_certs
from tests.support.check_helpers import SEED_OK, run_gpushare
from tests.support.fake_apiserver import FakeApiServer
from tests.support.helpers import DATA, free_port

pytestmark = pytest.mark.processes

POD = str(SEED_OK[0])
SNAPSHOT = str(DATA / "inspect-seed001.yaml")
INTERNALS = re.compile(r"Traceback|ConnectionPool|Max retries|NewConnectionError|\[Errno|<unicode string>|"
                       r"Invalid kube-config|Warning|Port \d+ is in use|urllib3")
# Commands that read a cluster, with what each needs beside it.
CLUSTER_COMMANDS = [("inspect",), ("audit",), ("explain", "some-pod"), ("dashboard", "--port", "0")]


def assert_one_line(done, *expected: str) -> str:
    assert INTERNALS.search(done.stderr) is None, done.stderr
    assert (done.returncode, len(done.stderr.splitlines())) == (2, 1), (done.returncode, done.stderr)
    line = done.stderr.rstrip("\n")
    assert line.startswith("gpushare: error: "), line
    for words in expected:
        assert words in line, line
    return line


def kubeconfig(path: Path, server: str, *, insecure: bool = False) -> Path:
    cluster = {"server": server, **({"insecure-skip-tls-verify": True} if insecure else {})}
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def no_cluster_env(tmp_path: Path) -> dict[str, str]:
    return {"KUBECONFIG": str(tmp_path / "no-kubeconfig"), "HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": ""}


@pytest.mark.parametrize("command", [*CLUSTER_COMMANDS, ("certs", "issue", "--secrets")],
                         ids=lambda c: " ".join(c[:2]))
def test_a_refused_port_is_one_line_naming_the_api_server(tmp_path, command):
    port = free_port()  # nothing listens there
    config = kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", insecure=True)
    done = run_gpushare(*command, "--kubeconfig", config, env=no_cluster_env(tmp_path))
    assert_one_line(done, f"cannot reach the API server https://127.0.0.1:{port}: connection refused")


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda c: c[0])
def test_no_cluster_at_all_is_the_same_line_for_every_cluster_command(tmp_path, command):
    done = run_gpushare(*command, env=no_cluster_env(tmp_path))
    line = assert_one_line(done)
    assert line == (f"gpushare: error: no cluster to read: no kubeconfig at $KUBECONFIG={tmp_path / 'no-kubeconfig'} "
                    "and not running in a pod; pass --kubeconfig FILE, --snapshot FILE (saved with `kubectl get "
                    "nodes,pods -A -o yaml > cluster.yaml`) or --demo (the embedded demo cluster)")


@pytest.mark.parametrize("command", [*CLUSTER_COMMANDS, ("serve", "--port", "0"), ("certs", "issue", "--secrets")],
                         ids=lambda c: " ".join(c[:2]))
def test_a_missing_kubeconfig_file_is_named(tmp_path, command):
    done = run_gpushare(*command, "--kubeconfig", tmp_path / "absent.yaml", env=no_cluster_env(tmp_path))
    assert_one_line(done, f"cannot read kubeconfig {tmp_path / 'absent.yaml'}: no such file")


CONFIG_COMMANDS = [("check", POD), ("score", POD), ("rules",), ("inspect", "--demo"), ("audit", "--demo"),
                   ("explain", "--demo", "x"), ("dashboard", "--demo", "--port", "0"), ("serve", "--port", "0"),
                   ("policy", "export"), ("certs", "issue", "--cert-dir", "out")]


@pytest.mark.parametrize("command", CONFIG_COMMANDS, ids=lambda c: c[0])
def test_a_broken_config_names_its_line(tmp_path, command):
    config = tmp_path / "bad-config.yaml"
    config.write_text("rules:\n  GS001: [warn\n")
    done = run_gpushare(*command, "--config", config, cwd=tmp_path)
    assert_one_line(done, f"cannot read config {config}:3: invalid YAML: expected ',' or ']'")


def test_every_mistake_in_a_config_at_once_with_did_you_mean(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "deploy").mkdir()
    (repo / ".gpushare.yaml").write_text("server:\n  thread: 4\n  port: many\nrules:\n  GS03: {severity: warn}\n"
                                         "sever: {}\n")
    done = run_gpushare("check", POD, cwd=repo / "deploy")
    assert_one_line(done)
    assert done.stderr == (
        'gpushare: error: ../.gpushare.yaml: server.port: "many" is not a whole number; ../.gpushare.yaml: '
        "server.thread: unknown setting (did you mean threads?); ../.gpushare.yaml: sever: unknown setting "
        "(did you mean server?); ../.gpushare.yaml: names unknown rules: GS03 (did you mean GS003?) "
        "(`gpushare rules` lists every rule id)\n")


@pytest.mark.parametrize("command", [("check",), ("score",), ("check", "--snapshot", "{}", POD),
                                     ("score", "--snapshot", "{}", POD), ("inspect", "--snapshot", "{}"),
                                     ("audit", "--snapshot", "{}")], ids=" ".join)
def test_a_missing_file_says_no_such_file(tmp_path, command):
    missing = tmp_path / "nope.yaml"
    args = [str(missing) if part == "{}" else part for part in command]
    if "{}" not in command:
        args.append(str(missing))
    done = run_gpushare(*args)
    line = assert_one_line(done, str(missing))
    assert line.endswith("no such file or directory"), line


def test_a_busy_port_is_one_line_and_serve_writes_nothing(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        for command in (("dashboard", "--demo", "--port", str(port)),
                        ("serve", "--host", "127.0.0.1", "--port", str(port), "--cert-dir", "certs")):
            done = run_gpushare(*command, cwd=tmp_path)
            assert_one_line(done, f"cannot listen on 127.0.0.1:{port}: the port is in use (another server? "
                                  "choose one with --port)")
    assert not (tmp_path / "certs").exists()  # no CA key, no serving key


def test_an_insecure_kubeconfig_warns_nobody(tmp_path):
    """insecure-skip-tls-verify is the kubeconfig's choice, as to kubectl: no urllib3 warning."""
    certs = tmp_path / "api-certs"
    ensure_serving_certs(certs, ["localhost", "127.0.0.1"])
    api = FakeApiServer(tls=(certs / "tls.crt", certs / "tls.key")).start()
    try:
        config = kubeconfig(tmp_path / "kc", api.url, insecure=True)
        for command in (("inspect",), ("audit",)):
            done = run_gpushare(*command, "--kubeconfig", config, env=no_cluster_env(tmp_path))
            assert done.returncode == 0, done.stderr
            assert INTERNALS.search(done.stderr) is None, done.stderr
    finally:
        api.stop()


@pytest.mark.parametrize("command", [("serve", "--port", "0", "--snapshot"), ("check", POD, "--snapshot"),
                                     ("score", POD, "--snapshot"), ("inspect", "--snapshot"),
                                     ("audit", "--snapshot")], ids=lambda c: c[0])
def test_a_snapshot_without_nodes_is_refused(tmp_path, command):
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(Path(POD).read_text())
    done = run_gpushare(*command, manifest, cwd=tmp_path)
    assert_one_line(done, f"{manifest}: not a cluster snapshot: no Node objects (it holds Job); save the cluster "
                          "with `kubectl get nodes,pods -A -o yaml > cluster.yaml`")
    empty = run_gpushare(*command, "/dev/null", cwd=tmp_path)
    assert_one_line(empty, "/dev/null: not a cluster snapshot: no Node objects (it is empty)")


@pytest.mark.parametrize(("command", "alternatives"), [
    (("certs", "inject", "--ca-bundle", "material/ca.crt"), "pass --kubeconfig FILE (and --context NAME)"),
    (("certs", "issue", "--secrets"), "pass --kubeconfig FILE (and --context NAME), or keep the material in a "
                                      "directory with --cert-dir DIR instead of --secrets"),
    (("certs", "client", "kube-scheduler", "--secrets", "--out", "out"),
     "pass --kubeconfig FILE (and --context NAME), or keep the material in a directory with --cert-dir DIR "
     "instead of --secrets"),
], ids=lambda c: " ".join(c[:2]) if isinstance(c, tuple) else "")
def test_certs_without_a_cluster_name_only_options_the_command_has(tmp_path, command, alternatives):
    ensure_serving_certs(tmp_path / "material", ["localhost"])
    done = run_gpushare(*command, env=no_cluster_env(tmp_path), cwd=tmp_path)
    assert assert_one_line(done) == (f"gpushare: error: no cluster to read: no kubeconfig at $KUBECONFIG="
                                     f"{tmp_path / 'no-kubeconfig'} and not running in a pod; {alternatives}")
    assert "--snapshot" not in done.stderr and "--demo" not in done.stderr


@pytest.mark.parametrize(("present", "missing"), [("tls.crt", "tls.key"), ("tls.key", "tls.crt"),
                                                  ("ca.crt", "ca.key")])
def test_serve_refuses_half_a_pair_and_leaves_it_alone(tmp_path, present, missing):
    source = tmp_path / "source"
    ensure_serving_certs(source, ["localhost"])
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / present).write_bytes((source / present).read_bytes())
    done = run_gpushare("serve", "--port", "0", "--cert-dir", certs, "--snapshot", SNAPSHOT, timeout=60)
    assert_one_line(done)
    assert done.stderr == (f"gpushare: error: {certs} holds {present} but no {missing}: put the matching "
                           f"{missing} beside it, or remove {present} to have a new pair generated\n")
    assert sorted(p.name for p in certs.iterdir()) == [present]
    assert (certs / present).read_bytes() == (source / present).read_bytes()


def test_explain_says_where_a_pod_of_that_name_is_or_how_to_name_its_namespace(tmp_path):
    from tests.support.cluster_builders import gpu_node, gpu_pod, snapshot_yaml

    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(snapshot_yaml(gpu_node("cn-a", "share"), gpu_pod("train", namespace="team-a", mem=4)))
    elsewhere = run_gpushare("explain", "train", "--snapshot", snapshot)
    assert assert_one_line(elsewhere) == (f"gpushare: error: pod default/train in {snapshot}: no such pod in that "
                                          "namespace; one of that name is in team-a: pass -n team-a (or team-a/train)")
    nowhere = run_gpushare("explain", "nosuch", "--demo")
    assert assert_one_line(nowhere) == ("gpushare: error: pod default/nosuch in demo: no such pod; name its namespace "
                                        "with -n NAMESPACE (or NAMESPACE/POD)")
    assert run_gpushare("explain", "-n", "team-a", "train", "--snapshot", snapshot).returncode == 0


@pytest.mark.parametrize("command", [("inspect",), ("audit",), ("score", POD), ("check", POD)], ids=lambda c: c[0])
def test_a_node_whose_gpu_capacity_is_not_a_quantity_is_named(tmp_path, command):
    from tests.support.cluster_builders import gpu_node, snapshot_yaml

    bad = gpu_node("cn-bad", "share")
    bad["status"]["capacity"]["aliyun.com/gpu-mem"] = "abc"
    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(snapshot_yaml(bad, gpu_node("cn-good", "share")))
    done = run_gpushare(*command, "--snapshot", snapshot)
    assert assert_one_line(done) == (f"gpushare: error: {snapshot}: Node cn-bad: status.capacity[aliyun.com/gpu-mem] "
                                     '"abc" is not a quantity (the API server refuses such a node; save the cluster '
                                     "again with `kubectl get nodes,pods -A -o yaml`)")
