"""`gpushare score FILE [--snapshot FILE]`: the ranking as a table, exit codes 0/1/2."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.cluster_builders import allocation, gpu_node, gpu_pod, snapshot_yaml
from tests.support.helpers import DATA, gpushare_executable

pytestmark = pytest.mark.processes


def run(*args: str, cwd, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([gpushare_executable(), "score", *args], capture_output=True, text=True, cwd=cwd,
                          input=stdin, timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_seed_job_table_on_the_demo_cluster(tmp_path):
    result = run(str(DATA / "seeds" / "000-cuda-sample.yaml"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Job default/cuda-sample" in out and "000-cuda-sample.yaml:2" in out
    lines = [ln for ln in out.splitlines() if "cn-" in ln]
    assert "cn-beijing.192.168.1.10" in lines[0] and "yes" in lines[0] and "GPU0 4/15" in lines[0]
    assert any("cn-hangzhou.192.168.2.20" in ln and "GB002" in ln for ln in lines)


def test_snapshot_file_and_binpack_picture(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(snapshot_yaml(gpu_node("cn-shanghai.192.0.2.109", "cgpu", 4, 15),
                                     gpu_pod("a", "cn-shanghai.192.0.2.109", mem=15, annotations=allocation(0, 15)),
                                     gpu_pod("b", "cn-shanghai.192.0.2.109", mem=5, annotations=allocation(1, 5))))
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: four}\nspec:\n  containers:\n"
                   "  - {name: four, image: cuda, resources: {limits: {aliyun.com/gpu-mem: 4}}}\n")
    result = run(str(pod), "--snapshot", str(cluster), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "GPU1 9/15" in result.stdout  # GPU0 is 15/15: binpack takes GPU1 to 9/15


def test_nothing_fits_is_a_warning_and_says_why(tmp_path):
    pod = tmp_path / "huge.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: huge}\nspec:\n  containers:\n"
                   "  - {name: huge, image: cuda, resources: {limits: {aliyun.com/gpu-mem: 64}}}\n")
    result = run(str(pod), cwd=tmp_path)
    # As for check: the scheduler leaves such a pod Pending, it does not refuse it.
    assert result.returncode == 0, result.stdout
    assert "GB004" in result.stdout and "needs 64" in result.stdout
    # A node that does not fit scores 0, as /dry-run and the dashboard show it.
    rows = [ln.split("│") for ln in result.stdout.splitlines() if "cn-" in ln and "│" in ln]
    assert rows and all(r[2].strip() == "no" and r[3].strip() == "0" for r in rows if r[1].strip()), rows
    strict = run(str(pod), "--fail-on", "warn", cwd=tmp_path)
    assert strict.returncode == 1


def test_the_help_names_the_exit_codes(tmp_path):
    result = run("--help", cwd=tmp_path)
    assert result.returncode == 0
    assert ("  Exit codes:\n    0  no object is denied (one that fits no node now is a warning)\n"
            "    1  an object is denied (--fail-on warn: or warned about, or fits no node)\n"
            "    2  unreadable input, invalid YAML, a malformed object, an unknown --node, a bad config\n"
            ) in result.stdout


def test_stdin_and_a_judged_node(tmp_path):
    job = (DATA / "seeds" / "000-cuda-sample.yaml").read_text()
    result = run("-", "--node", "cn-hangzhou.192.168.2.20", cwd=tmp_path, stdin=job)
    assert result.returncode == 1  # denied on that node
    assert "deny GB002: Job default/cuda-sample: node cn-hangzhou.192.168.2.20" in result.stdout
    assert "cn-hangzhou.192.168.2.20 *" in result.stdout


def test_bad_input_exits_2_with_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: [x\n")
    result = run(str(bad), cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert f"{bad}:" in result.stderr and "invalid YAML" in result.stderr and "Traceback" not in result.stderr
    missing = run(str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr
    shape = tmp_path / "shape.yaml"
    shape.write_text("kind: Pod\nmetadata: {name: x}\nspec:\n  containers: {}\n")
    result = run(str(shape), cwd=tmp_path)
    assert result.returncode == 2 and f"{shape}:4: Pod: spec.containers: must be a list" in result.stderr
    unknown = run(str(DATA / "seeds" / "000-cuda-sample.yaml"), "--node", "ghost", cwd=tmp_path)
    assert unknown.returncode == 2 and "ghost" in unknown.stderr
