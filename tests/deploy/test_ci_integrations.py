"""The two ways into CI, each run as its platform runs it, and the base install they rely on.

- The GitHub Action (``action.yml``, composite): its ``run`` steps in bash with ``-eo pipefail``
  (GitHub's ``shell: bash``), ``${{ inputs.* }}`` substituted and ``GITHUB_ACTION_PATH`` set, with
  a fresh Python standing in for ``actions/setup-python``. Its install step is a real ``pip
  install`` of this repository into that fresh environment: the base install, without
  ``[server]``, which these tests also hold to its promise (``check`` runs; ``serve`` names the
  extra).
- The pre-commit hook (``.pre-commit-hooks.yaml``): pre-commit itself, from a
  ``.pre-commit-config.yaml`` naming this repository and a commit as users name a tag; it builds
  the hook's environment once and every run after uses it.

Both install from the package index pip is configured with, as ``.ci/run`` does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support.check_helpers import SEED_33, SEED_OK
from tests.support.hermetic import ROOT

pytestmark = pytest.mark.processes

SERVER_ONLY = ("flask", "gunicorn", "kubernetes", "cryptography", "prometheus_client", "pythonjsonlogger")
BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]  # GitHub's `shell: bash`


def _environment(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSHARE_", "VIRTUAL_ENV", "PYTHON"))}
    return {**keep, **extra}


@pytest.fixture
def runner(tmp_path_factory) -> dict[str, Path]:
    """A workspace, and a fresh Python as actions/setup-python leaves it (python and pip on PATH);
    one test uses it, so that one process installs into it."""
    base = tmp_path_factory.mktemp("runner")
    tool = base / "hostedtoolcache"
    # virtualenv (pre-commit's own) seeds pip from its cache in a fraction of a second, where
    # `python -m venv` runs ensurepip, a pip install of pip (seconds of CPU).
    subprocess.run([sys.executable, "-m", "virtualenv", "--quiet", str(tool)], check=True, timeout=120,
                   env=_environment())
    # The runner checks the action's repository out under _actions/; a copy keeps pip's in-tree
    # build (build/, *.egg-info) out of this repository.
    action = base / "_actions" / "gpushare-webhook"
    shutil.copytree(ROOT, action, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                                 ".pytest_cache", ".ruff_cache", ".hypothesis",
                                                                 ".mypy_cache", "certs-dev"))
    workspace = base / "workspace"
    (workspace / "deploy").mkdir(parents=True)
    shutil.copy(SEED_OK[0], workspace / "deploy" / "job.yaml")
    (workspace / ".github" / "workflows").mkdir(parents=True)
    (workspace / ".github" / "workflows" / "ci.yml").write_text("on: push\njobs: {}\n")
    return {"tool": tool, "workspace": workspace, "action": action}


def _steps() -> list[dict]:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    return action["runs"]["steps"]


def _substitute(text: str, inputs: dict[str, str], steps: dict[str, dict[str, str]] | None = None) -> str:
    def value(match: re.Match[str]) -> str:
        expression = match.group(1).strip()
        if expression.startswith("steps.") and steps is not None:
            step, _, name = expression.removeprefix("steps.").partition(".outputs.")
            return steps.get(step, {}).get(name, "")
        assert expression.startswith("inputs."), expression
        return inputs[expression.removeprefix("inputs.")]
    return re.sub(r"\$\{\{(.*?)\}\}", value, text)


def _read_outputs(path: Path) -> dict[str, str]:
    """A step's $GITHUB_OUTPUT file: ``name=value`` lines (and ``name<<EOF`` blocks, as the runner reads them)."""
    outputs: dict[str, str] = {}
    lines = iter(path.read_text().splitlines()) if path.exists() else iter(())
    for line in lines:
        if "<<" in line and "=" not in line.split("<<")[0]:
            name, _, delimiter = line.partition("<<")
            block = []
            for inner in lines:
                if inner == delimiter:
                    break
                block.append(inner)
            outputs[name] = "\n".join(block)
        elif "=" in line:
            name, _, text = line.partition("=")
            outputs[name] = text
    return outputs


@dataclass
class ActionRun:
    steps: list[subprocess.CompletedProcess[str]]
    outputs: dict[str, str]  # the action's outputs, as the workflow reads them
    summary: str  # what the job summary shows


def run_action(runner: dict[str, Path], *, install: bool = True, **given: str) -> ActionRun:
    """Every `run` step in order, as the runner does (``install=False``: all but the install step, which
    a second run in the same job would repeat to no effect); `uses` steps are the platform's own. Each
    step gets a $GITHUB_OUTPUT file of its own; the job shares $GITHUB_STEP_SUMMARY and $RUNNER_TEMP."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    inputs = {name: given.get(name.replace("-", "_"), spec.get("default", ""))
              for name, spec in action["inputs"].items()}
    path = f"{runner['tool'] / 'bin'}{os.pathsep}{os.environ['PATH']}"
    job = runner["workspace"].parent / f"job-{len(list(runner['workspace'].parent.glob('job-*')))}"
    (job / "temp").mkdir(parents=True)
    summary = job / "step_summary.md"
    summary.touch()
    done, outputs = [], {}
    for number, step in enumerate(_steps()):
        if "run" not in step or (not install and "pip install" in step["run"]):
            continue
        assert step["shell"] == "bash"
        output = job / f"output-{number}"
        output.touch()
        env = {k: _substitute(str(v), inputs) for k, v in (step.get("env") or {}).items()}
        result = subprocess.run([*BASH, "-c", _substitute(step["run"], inputs)], cwd=runner["workspace"],
                                capture_output=True, text=True, timeout=600,
                                env=_environment(PATH=path, GITHUB_ACTION_PATH=str(runner["action"]),
                                                 GITHUB_OUTPUT=str(output), GITHUB_STEP_SUMMARY=str(summary),
                                                 RUNNER_TEMP=str(job / "temp"), **env))
        done.append(result)
        if "id" in step:
            outputs[step["id"]] = _read_outputs(output)
        if result.returncode != 0:
            break
    declared = {name: _substitute(spec["value"], inputs, outputs) for name, spec in action["outputs"].items()}
    return ActionRun(done, declared, summary.read_text())


def test_the_action_annotates_the_pull_request_from_the_base_install(runner):
    first = run_action(runner, paths="deploy")
    cache, install, check = first.steps
    assert cache.returncode == 0 and cache.stdout == "" and "dir=" in (runner["workspace"].parent / "job-0" /
                                                                       "output-1").read_text()
    assert install.returncode == 0, install.stderr[-2000:]
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("0 denials, 0 warnings in 1 object from 1 file\n")
    assert first.outputs == {"exit-code": "0", "denials": "0", "warnings": "0", "exempted": "0", "errors": "0",
                             "objects": "1", "sarif-file": "gpushare.sarif"}
    assert first.summary.startswith("### gpushare check: passed\n")
    shutil.copy(SEED_33, runner["workspace"] / "deploy" / "job-33.yaml")
    failing = run_action(runner, install=False, paths="deploy", output="sarif", sarif_file="out.sarif")
    [_, check] = failing.steps
    assert check.returncode == 1
    # Annotations and the SARIF file from one run.
    assert check.stdout.startswith("::error file=deploy/job-33.yaml,line=24,title=GS001::GS001: Job "
                                   "default/cuda-sample-33 container \"cuda-sample\"")
    written = (runner["workspace"] / "out.sarif").read_text()
    assert '"ruleId": "GS001"' in written and '"uri": "deploy/job-33.yaml"' in written
    assert failing.outputs == {"exit-code": "1", "denials": "1", "warnings": "0", "exempted": "0", "errors": "0",
                               "objects": "2", "sarif-file": "out.sarif"}
    # The job summary: the verdict, the counts per rule, the first findings with where they are.
    assert failing.summary.startswith("### gpushare check: failed\n\n1 denial, 0 warnings in 2 objects from 2 "
                                      "files\n\n| rule | severity | findings |\n|---|---|---:|\n| GS001 | deny | 1 |\n")
    assert "- `deploy/job-33.yaml:24` **deny** GS001: Job default/cuda-sample-33 container" in failing.summary
    # A usage error still sets the exit code output, and fails the step.
    broken = run_action(runner, install=False, paths="deploy", args="--no-such-flag")
    assert broken.steps[-1].returncode == 2 and broken.outputs["exit-code"] == "2"
    assert broken.outputs["denials"] == "" and broken.summary == ""
    _holds_the_base_install(runner)


def _holds_the_base_install(runner: dict[str, Path]) -> None:
    """The install step put no server dependency in; the commands that need one say how to add it."""
    python = str(runner["tool"] / "bin" / "python")
    probe = ("import importlib.util as u; "
             f"print(','.join(m for m in {SERVER_ONLY!r} if u.find_spec(m)))")
    assert subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == ""
    gpushare = str(runner["tool"] / "bin" / "gpushare")
    for command, name, missing in (("serve", "serve", "flask"), ("certs issue --cert-dir x", "certs issue",
                                                                  "cryptography"),
                                   ("dashboard --demo", "dashboard", "werkzeug")):
        done = subprocess.run([gpushare, *command.split()], capture_output=True, text=True, timeout=60,
                              cwd=runner["workspace"], env=_environment())
        assert (done.returncode, done.stderr) == (2, f"gpushare: error: gpushare {name} needs the server extra "
                                                     f"({missing} is not installed): pip install "
                                                     "'gpushare-webhook[server]'\n")


def _git(*args: str, cwd: Path, env: dict[str, str], stdin: bytes | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, input=stdin, check=True, capture_output=True, env=env,
                          timeout=60)
    return done.stdout.decode().strip()


def _hook_commit(shadow: Path, env: dict[str, str]) -> tuple[Path, str]:
    """This repository and the commit pre-commit installs the hook from: HEAD, or, when tracked files
    have changes, as ``pre-commit try-repo`` takes them: a commit of HEAD and those changes in a
    clone (so a change under test is what the hook runs, and this repository is left as it is)."""
    head = _git("rev-parse", "HEAD", cwd=ROOT, env=env)
    changes = subprocess.run(["git", "diff", "HEAD", "--binary"], cwd=ROOT, check=True, capture_output=True,
                             env=env, timeout=60).stdout
    if not changes:
        return ROOT, head
    _git("clone", "-q", "--no-checkout", str(ROOT), str(shadow), cwd=ROOT, env=env)
    _git("checkout", "-q", head, cwd=shadow, env=env)
    _git("apply", "--index", "--binary", "-", cwd=shadow, env=env, stdin=changes)
    _git("commit", "-q", "--no-verify", "-m", "changes under test", cwd=shadow, env=env)
    return shadow, _git("rev-parse", "HEAD", cwd=shadow, env=env)


def test_the_pre_commit_hook_as_pre_commit_runs_it(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    env = _environment(PRE_COMMIT_HOME=str(tmp_path / "cache"), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                       GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    pre_commit = str(Path(sys.executable).parent / "pre-commit")

    def git(*args: str) -> None:
        _git(*args, cwd=repo, env=env)

    def hook(*files: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([pre_commit, "run", "gpushare-check", "--files", *files],
                              cwd=repo, capture_output=True, text=True, env=env, timeout=600)

    source, rev = _hook_commit(tmp_path / "shadow", env)
    git("init", "-q", ".")
    # As the hook's users configure it (.pre-commit-hooks.yaml): a repository, a revision, the hook.
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(
        {"repos": [{"repo": str(source), "rev": rev, "hooks": [{"id": "gpushare-check"}]}]}))
    (repo / ".github" / "workflows" / "ci.yml").write_text("on: push\njobs: {}\n")
    shutil.copy(SEED_33, repo / "job.yaml")
    git("add", ".")
    only_ci = hook(".github/workflows/ci.yml")  # a commit touching only a CI workflow passes
    assert only_ci.returncode == 0, only_ci.stdout + only_ci.stderr
    assert re.search(r"gpushare check \(shared-GPU manifest rules\)\.+Passed", only_ci.stdout), only_ci.stdout
    bad = hook("job.yaml", ".github/workflows/ci.yml")
    assert bad.returncode == 1
    assert "job.yaml:24: deny GS001: Job default/cuda-sample-33" in bad.stdout
    assert "(and 1 document that is not a Kubernetes object)" in bad.stdout
