"""A newcomer's first hour: the same finding everywhere, rankings that explain, commands that
say which cluster they judged and where the server listens."""

from __future__ import annotations

import socket
import subprocess

import pytest
import yaml

from tests.support.check_helpers import run_gpushare, write_yaml
from tests.support.helpers import DATA, free_port, gpushare_executable, wait_until
from tests.support.manifests import MEM, container

pytestmark = pytest.mark.processes

BAD_SELECTOR = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad-selector"}, "spec": {
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "aliyun.accelerator/nvidia_mem", "operator": "Gt", "values": ["16GiB"]}]}]}}},
    "containers": [container("c", {MEM: 2})]}}
FINE = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fine"},
        "spec": {"containers": [container("c", {MEM: 2})]}}
THOUSANDTHS = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "thousandths"},
               "spec": {"containers": [container("c", {MEM: "4500m"})]}}  # 4.5 GiB; 4000m would be 4
SELECTOR_PROBLEM = ("Pod: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                    ".nodeSelectorTerms[0].matchExpressions[0].values: Gt needs exactly one whole number")


def _manifests(tmp_path, *objects):
    path = tmp_path / "pods.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


def _line_of(path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_a_bad_selector_is_the_same_finding_in_check_score_and_dry_run(tmp_path, server, session):
    path = _manifests(tmp_path, BAD_SELECTOR, FINE, THOUSANDTHS)
    where = f"{path}:{_line_of(path, 'values:')}: {SELECTOR_PROBLEM}"
    check = run_gpushare("check", path)
    score = run_gpushare("score", path)
    for done in (check, score):
        assert done.returncode == 2 and where in done.stderr, done.stderr
        assert "GS003" in done.stdout  # the object beside it is judged
    assert "Pod default/fine" in score.stdout and "bad-selector  (" not in score.stdout
    reply = session.post(server.url + "/dry-run", data=path.read_text(),
                         headers={"Content-Type": "application/yaml"}, timeout=30)
    assert reply.status_code == 200, reply.text
    bad, fine, thousandths = reply.json()["results"]
    assert SELECTOR_PROBLEM in bad["error"] and (bad["name"], bad["allowed"]) == ("bad-selector", False)
    assert fine["allowed"] is True and thousandths["allowed"] is False


def test_a_refused_value_is_named_in_the_ranking_and_4500m_is_use_5(tmp_path, server, session):
    path = _manifests(tmp_path, THOUSANDTHS)
    done = run_gpushare("score", path)
    assert done.returncode == 1
    assert "aliyun.com/gpu-mem=4500m is not a whole number of GiB; use 5\n" in done.stdout
    assert "no GPU requested" not in done.stdout
    assert 'not ranked on GPUs: container "c": aliyun.com/gpu-mem=4500m refused by GS003' in " ".join(
        done.stdout.split())
    reply = session.post(server.url + "/dry-run", data=path.read_text(),
                         headers={"Content-Type": "application/yaml"}, timeout=30).json()
    reasons = {r for node in reply["results"][0]["ranking"] for r in node["reasons"]}
    assert reasons == {'not ranked on GPUs: container "c": aliyun.com/gpu-mem=4500m refused by GS003; '
                       "fix it to see where the pod fits"}


def test_every_command_names_the_cluster_it_judged(tmp_path, server, session):
    pod = write_yaml(tmp_path / "pod.yaml", FINE)
    snapshot = DATA / "inspect-seed001.yaml"
    assert run_gpushare("score", pod).stdout.startswith("cluster state: demo snapshot: 4 nodes, 2 GPU pods\n")
    scored = run_gpushare("score", "--snapshot", snapshot, pod)
    assert scored.stdout.startswith(f"cluster state: snapshot file {snapshot}: 1 node, 1 GPU pod\n")
    checked = run_gpushare("check", "--snapshot", snapshot, pod)
    assert f"gpushare: cluster state: snapshot file {snapshot}: 1 node, 1 GPU pod" in checked.stderr
    inspected = run_gpushare("inspect", "--snapshot", snapshot)
    assert inspected.stderr == f"gpushare: cluster state: snapshot file {snapshot}: 1 node, 1 GPU pod\n"
    reply = session.post(server.url + "/dry-run", data=pod.read_text(),
                         headers={"Content-Type": "application/yaml"}, timeout=30).json()
    assert reply["cluster"] == "demo snapshot: 4 nodes, 2 GPU pods"
    nowhere = run_gpushare("inspect", env={"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)})
    assert nowhere.returncode == 2 and len(nowhere.stderr.splitlines()) == 1
    assert nowhere.stderr.endswith("pass --kubeconfig FILE, --snapshot FILE (saved with `kubectl get nodes,pods -A "
                                   "-o yaml > cluster.yaml`) or --demo (the embedded demo cluster)\n")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_serve_says_where_it_listens_and_a_busy_port_is_one_line(tmp_path):
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([gpushare_executable(), "serve", "--host", "127.0.0.1", "--port", str(port),
                                    "--cert-dir", str(tmp_path / "certs")], stdout=out, stderr=subprocess.STDOUT,
                                   cwd=tmp_path)
    try:
        line = wait_until(lambda: next((ln for ln in log.read_text().splitlines() if "serving on" in ln), None),
                          timeout=30, what="the start line")
        assert line == (f"gpushare: serving on https://127.0.0.1:{port}; cluster state: demo snapshot: 4 nodes, "
                        f"2 GPU pods; clients trust the CA {tmp_path / 'certs' / 'ca.crt'}")
        busy = run_gpushare("serve", "--host", "127.0.0.1", "--port", port, "--cert-dir", tmp_path / "certs",
                            timeout=30)
        assert busy.returncode == 2 and busy.stdout == ""
        assert busy.stderr == (f"gpushare: error: cannot listen on 127.0.0.1:{port}: the port is in use "
                               "(another server? choose one with --port)\n")
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the first server still answers
    finally:
        _stop(process)


def test_serve_without_host_says_it_binds_every_interface(tmp_path):
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([gpushare_executable(), "serve", "--port", str(port), "--cert-dir",
                                    str(tmp_path / "certs")], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        line = wait_until(lambda: next((ln for ln in log.read_text().splitlines() if "serving on" in ln), None),
                          timeout=30, what="the start line")
        assert line.startswith(f"gpushare: serving on https://0.0.0.0:{port} (all interfaces; "
                               f"locally https://localhost:{port}); ")
    finally:
        _stop(process)


def test_text_output_is_sorted_by_file_and_line(tmp_path):
    first = _manifests(tmp_path, FINE, THOUSANDTHS)
    second = write_yaml(tmp_path / "a-first.yaml", THOUSANDTHS)
    done = run_gpushare("check", first, second)
    lines = [ln for ln in done.stdout.splitlines() if ": deny " in ln]
    assert lines == sorted(lines, key=lambda ln: (ln.split(":")[0], int(ln.split(":")[1])))
    assert lines[0].startswith(str(second)) and "(document at line" not in lines[0]  # its object starts the file
    assert "(document at line" in lines[1]  # the second object of pods.yaml
