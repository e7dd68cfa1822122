"""A user's first hour with the CLI, line for line: templates, YAML that is not Kubernetes, empty
input, what `check` did not run, one output flag, the config file it found, --version."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.check_helpers import SEED_33, SEED_OK, run_gpushare
from tests.support.helpers import gpushare_executable
from webhook.settings import Settings, load_settings

pytestmark = pytest.mark.processes

NOT_RUN = ("not run: cluster-aware rules GB001-GB005, GC001, GN006, GQ005 need --snapshot FILE "
           "(`kubectl get nodes,pods,resourcequotas -A -o yaml`)")
RENDER = "render the template first (helm template CHART | gpushare check -)"
TEMPLATED = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: train
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: cuda
        image: "{{ .Values.image }}"
        args: ["--epochs", "{{ .Values.epochs }}"]
        resources:
          limits:
            aliyun.com/gpu-mem: "{{ .Values.gpuMem }}"
"""
ARGO = """\
apiVersion: v1
kind: Pod
metadata:
  name: step
  annotations: {workflows.argoproj.io/node-name: "{{workflow.name}}"}
spec:
  containers:
  - name: main
    image: cuda
    args: ["{{inputs.parameters.lr}}"]
    resources:
      limits: {aliyun.com/gpu-mem: 2}
"""


def test_a_placeholder_where_a_rule_reads_is_named_not_judged(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(TEMPLATED)
    done = run_gpushare("check", job)
    assert done.returncode == 2
    assert done.stdout == "FAIL: 0 denials, 0 warnings, 1 input error in 0 objects from 1 file\n"
    assert done.stderr == (f'gpushare: error: {job}:15: Job default/train: spec.template.spec.containers[0].resources'
                           f'.limits["aliyun.com/gpu-mem"]: "{{{{ .Values.gpuMem }}}}" is a template placeholder, not '
                           f"a value; the object was not judged: {RENDER}\n")


def test_an_unquoted_template_is_said_to_look_like_one(tmp_path):
    raw = tmp_path / "raw.yaml"
    raw.write_text(TEMPLATED.replace('"{{ .Values.gpuMem }}"', "{{ .Values.gpuMem }}"))
    done = run_gpushare("check", raw)
    assert (done.returncode, done.stderr) == (2, f"gpushare: error: {raw}:15: invalid YAML: found unhashable key; "
                                                 "the file holds {{ ... }} placeholders: it looks like a Helm or Go "
                                                 "template, render it first (helm template CHART | gpushare check -)\n")


def test_placeholders_elsewhere_are_ordinary_strings(tmp_path):
    step = tmp_path / "step.yaml"
    step.write_text(ARGO)
    done = run_gpushare("check", step)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"ok: 0 denials, 0 warnings in 1 object from 1 file\n{NOT_RUN}\n"


def test_yaml_that_is_not_kubernetes_is_skipped_and_counted(tmp_path):
    (tmp_path / "playbook.yml").write_text("- hosts: all\n  tasks: [{ping: {}}]\n")
    (tmp_path / "compose.yaml").write_text("services:\n  web: {image: nginx}\n")
    (tmp_path / "values.yaml").write_text("gpuMem: 4\nimage: cuda\n")
    (tmp_path / "svc.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    (tmp_path / "job.yaml").write_text(SEED_OK[0].read_text())
    done = run_gpushare("check", tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == ("ok: 0 denials, 0 warnings in 1 object from 5 files (and 1 object of kinds no rule "
                           "checks: Service, 3 documents that are not Kubernetes objects)\n" + NOT_RUN + "\n")


def test_nothing_to_check_is_an_error_unless_allowed(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run_gpushare("check", empty)
    assert (done.returncode, done.stderr) == (2, f"gpushare: error: {empty}: nothing to check: no *.yaml, *.yml or "
                                                 "*.json file (--allow-empty accepts that)\n")
    allowed = run_gpushare("check", "--allow-empty", empty)
    assert (allowed.returncode, allowed.stdout) == (0, "ok: 0 denials, 0 warnings in 0 objects from 0 files\n")
    workflow = tmp_path / "ci.yml"
    workflow.write_text("on: push\njobs: {}\n")
    done = run_gpushare("check", workflow)
    assert (done.returncode, done.stderr) == (2, f"gpushare: error: {workflow}: nothing to check: 1 document, none "
                                                 "a Kubernetes object (--allow-empty accepts that)\n")
    assert run_gpushare("check", "--allow-empty", workflow).returncode == 0
    scored = run_gpushare("score", "-", stdin="")
    assert (scored.returncode, scored.stderr) == (2, "gpushare: error: nothing to score in <stdin>: no Kubernetes "
                                                     "object (--allow-empty accepts that)\n")
    assert run_gpushare("score", "--allow-empty", "-", stdin="").returncode == 0
    audited = run_gpushare("audit", "--snapshot", "/dev/null")
    assert (audited.returncode, audited.stderr) == (2, "gpushare: error: /dev/null: not a cluster snapshot: no Node "
                                                       "objects (it is empty); save the cluster with `kubectl get "
                                                       "nodes,pods -A -o yaml > cluster.yaml`\n")


def test_one_output_flag_and_an_output_file_everywhere(tmp_path):
    as_o = run_gpushare("check", "-o", "json", SEED_33)
    as_f = run_gpushare("check", "--format", "json", SEED_33)
    assert as_o.stdout == as_f.stdout and json.loads(as_o.stdout)["summary"]["denials"] == 1
    out = tmp_path / "report.sarif"
    written = run_gpushare("check", "--output", "sarif", "--output-file", out, SEED_33)
    assert (written.returncode, written.stdout) == (1, "")
    assert json.loads(out.read_text())["runs"][0]["results"][0]["ruleId"] == "GS001"
    for command in (["rules"], ["policy", "export"], ["audit", "--demo"], ["inspect", "--demo"],
                    ["explain", "--demo", "default/cuda-sample-m8x2k"], ["score", str(SEED_OK[0])]):
        target = tmp_path / f"{command[0]}.json"
        done = run_gpushare(*command, "-o", "json", "--output-file", target)
        assert done.stdout == "", (command, done.stdout)
        assert json.loads(target.read_text()), command
    scored = json.loads(run_gpushare("score", "-o", "json", SEED_OK[0]).stdout)
    assert scored["cluster"] == "demo snapshot: 4 nodes, 2 GPU pods"
    [result] = scored["results"]
    assert (result["kind"], result["name"], result["allowed"]) == ("Job", "cuda-sample", True)
    assert result["ranking"][0]["fits"] is True


def test_kubectl_inspect_cgpu_h_is_help():
    plugin = str(Path(gpushare_executable()).parent / "kubectl-inspect-cgpu")
    done = subprocess.run([plugin, "-h"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.startswith("Usage: kubectl inspect cgpu [OPTIONS] [NODES]...")
    assert "-o, --output [table|json]" in done.stdout and "--demo" in done.stdout


def test_the_config_is_found_upwards_to_the_repository_root_and_named(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "deploy" / "team").mkdir(parents=True)
    (repo / ".gpushare.yaml").write_text("rules:\n  GS001: {severity: warn}\n")
    job = repo / "deploy" / "team" / "job.yaml"
    job.write_text(SEED_33.read_text())
    done = run_gpushare("check", "job.yaml", cwd=job.parent)
    assert done.returncode == 0
    assert done.stdout.splitlines()[-2] == ("ok: 0 denials, 1 warning in 1 object from 1 file; "
                                            "config ../../.gpushare.yaml")
    # --config names another; above the repository root nothing is looked for.
    other = tmp_path / "strict.yaml"
    other.write_text("check: {fail_on: warn}\n")
    explicit = run_gpushare("check", "--config", other, "job.yaml", cwd=job.parent)
    assert explicit.returncode == 1 and f"; config {os.path.relpath(other, job.parent)}" in explicit.stdout
    (tmp_path / ".gpushare.yaml").write_text("rules:\n  GS001: {enabled: false}\n")
    (repo / ".gpushare.yaml").unlink()
    outside = run_gpushare("check", "job.yaml", cwd=job.parent)
    assert outside.returncode == 1 and "; config" not in outside.stdout


def test_defaults_built_without_validation_equal_validated_ones():
    assert load_settings() == Settings.model_validate({})
    assert load_settings().model_dump() == Settings.model_validate({}).model_dump()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_version_and_shell_completion(shell):
    version = run_gpushare("--version")
    assert version.returncode == 0 and version.stdout.startswith("gpushare 0.")
    script = run_gpushare(env={"_GPUSHARE_COMPLETE": f"{shell}_source"})
    assert script.returncode == 0 and "_GPUSHARE_COMPLETE" in script.stdout
    words = run_gpushare(env={"_GPUSHARE_COMPLETE": "bash_complete", "COMP_WORDS": "gpushare ch", "COMP_CWORD": "1"})
    assert words.stdout.splitlines() == ["plain,check"]
