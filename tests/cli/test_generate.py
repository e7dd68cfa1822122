"""``gpushare generate``: the one command that rewrites every generated file, and ``--check``, which
lists the stale ones. Adding the toy rule of CONTRIBUTING.md ("A rule") to a copy of the checkout and
running the command changes the rule's module, its test and generated files, nothing else."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from webhook.cli.generate import DEPLOY_FILES, generated_paths

ROOT = Path(__file__).resolve().parents[1]

# CONTRIBUTING.md's toy rule, as a contributor writes it: one decorated function in a family module.
TOY_RULE = '''\
"""GS099, a toy (CONTRIBUTING.md, "A rule"): no container sets TOY_GPU_SETTING."""

from __future__ import annotations

from collections.abc import Iterator

from policies.model.subject import Subject
from policies.rules.base import Found, rule
from policies.rules.relevance import Relevance

TOY_VARIABLE = "TOY_GPU_SETTING"


@rule("GS099", severity="warn", seed="project decision", kinds=("Pod",), relevance=Relevance(env=(TOY_VARIABLE,)),
      title="No container sets TOY_GPU_SETTING",
      doc="A toy rule, CONTRIBUTING.md's example: a container that sets TOY_GPU_SETTING is warned.")
def sets_toy_variable(subject: Subject) -> Iterator[Found]:
    spec, base = subject.pod_spec
    containers = spec.get("containers") if isinstance(spec, dict) else None
    for index, container in enumerate(containers if isinstance(containers, list) else []):
        env = container.get("env") if isinstance(container, dict) else None
        if isinstance(env, list) and any(isinstance(e, dict) and e.get("name") == TOY_VARIABLE for e in env):
            yield Found(f"container {container.get('name')!r} sets {TOY_VARIABLE}; remove it",
                        (*base, "containers", index, "env"))
'''
# ... and its test.
TOY_TEST = '''\
from policies.admission.engine import Engine
from webhook.settings import Settings

ENGINE = Engine(Settings())


def _pod(*env: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "cuda:12", "env": list(env)}]}}


def test_gs099_warns_of_a_container_that_sets_the_toy_variable():
    pod = _pod({"name": "TOY_GPU_SETTING", "value": "1"})
    verdict = ENGINE.validate(ENGINE.subject("Pod", pod, namespace="default"))
    assert [(f.rule, f.severity) for f in verdict.findings] == [("GS099", "warn")]
    assert "container 'app' sets TOY_GPU_SETTING" in verdict.findings[0].message


def test_gs099_says_nothing_of_other_variables():
    verdict = ENGINE.validate(ENGINE.subject("Pod", _pod({"name": "TOY_OTHER", "value": "1"}), namespace="default"))
    assert verdict.findings == []
'''
RULE_FILE, TEST_FILE = "policies/rules/toy_rules.py", "tests/domain/test_toy_rules.py"


def _run(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}  # the copy's code, not the installed checkout's
    env.pop("GPUSHARE_CONFIG", None)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def gpushare(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run(sys.executable, "-m", "webhook.cli.commands", *args, cwd=cwd)


def git(*args: str, cwd: Path) -> str:
    done = _run("git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of this checkout's files (tracked and new, as they are now) in a repository of its own."""
    listed = _run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    tree = tmp_path / "tree"
    for name in filter(None, listed.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    git("init", "-q", cwd=tree)
    git("add", "-A", cwd=tree)
    git("commit", "-q", "-m", "copy", cwd=tree)
    return tree


def changed(tree: Path) -> set[str]:
    return {line[3:] for line in git("status", "--porcelain", "--untracked-files=all", cwd=tree).splitlines()}


def test_the_checked_in_files_are_fresh():
    done = gpushare("generate", "--check", cwd=ROOT)
    assert done.returncode == 0, f"stale: {done.stdout}{done.stderr} run `gpushare generate`"
    assert done.stdout == ""


def test_check_lists_each_stale_file_and_generate_rewrites_them(checkout):
    edits = {DEPLOY_FILES[0]: ("\n", "\n# edited by hand\n"), Path("README.md"): ("| GS001 |", "| GS001x |"),
             Path("docs/operations.md"): ("| `pods.mutate.gpushare.io` |", "| `pods.mutated` |")}
    for path, (old, new) in edits.items():
        text = (checkout / path).read_text()
        assert old in text
        (checkout / path).write_text(text.replace(old, new, 1))
    done = gpushare("generate", "--check", cwd=checkout)
    assert done.returncode == 1
    assert sorted(done.stdout.splitlines()) == sorted(str(p) for p in edits)
    assert "run `gpushare generate`" in done.stderr
    done = gpushare("generate", cwd=checkout)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == sorted(f"rewrote {p}" for p in edits)
    assert changed(checkout) == set()
    done = gpushare("generate", "--check", cwd=checkout)
    assert (done.returncode, done.stdout) == (0, "")


def test_a_block_naming_no_generator_is_an_error_with_file_and_line(checkout):
    doc = checkout / "docs" / "design.md"
    doc.write_text(doc.read_text() + "\n<!-- generated by hand -->\n| a |\n<!-- end of generated table -->\n")
    done = gpushare("generate", "--check", cwd=checkout)
    assert done.returncode == 2
    lines = len(doc.read_text().splitlines())
    assert f"docs/design.md:{lines - 2}: a generated block whose marker names no generator" in done.stderr
    assert "Traceback" not in done.stderr


def test_outside_a_checkout_it_asks_for_one(tmp_path):
    done = gpushare("generate", "--root", str(tmp_path), cwd=ROOT)
    assert done.returncode == 2
    assert "is not a gpushare-webhook source checkout" in done.stderr and "--root" in done.stderr


def test_the_toy_rule_touches_its_module_its_test_and_generated_files_only(checkout):
    (checkout / RULE_FILE).write_text(TOY_RULE)
    (checkout / TEST_FILE).write_text(TOY_TEST)
    done = gpushare("generate", cwd=checkout)
    assert done.returncode == 0, done.stderr
    touched = changed(checkout)
    generated = {str(p) for p in generated_paths(checkout)}
    assert touched - generated == {RULE_FILE, TEST_FILE}
    # Its id joins the rule tables, its variable the pods' conditions and the outage table's words.
    assert {"README.md", "docs/design.md", "docs/operations.md", *(str(p) for p in DEPLOY_FILES[:2])} <= touched
    assert "| GS099 | warn | No container sets TOY_GPU_SETTING |" in (checkout / "README.md").read_text()
    assert "TOY_GPU_SETTING" in (checkout / DEPLOY_FILES[0]).read_text()
    assert gpushare("generate", "--check", cwd=checkout).returncode == 0
    # Its own test passes, and so does the generic relevance test with it registered.
    done = _run(sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", TEST_FILE,
                "tests/deploy/test_rule_relevance.py", "-k", "not caught", cwd=checkout, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "4 passed" in done.stdout


# CONTRIBUTING.md, "A resource name": one field of ResourceNames (here a resource containers ask for).
NEW_RESOURCE = '''    gpu_exclusive: str = "nvidia.com/gpu"
    # A toy: another GPU resource containers ask for.
    gpu_toy: str = "example.com/toy-gpu"
'''
PROBE = '''\
from policies.model.cluster import node_resource_names
from policies.model.near_miss import skipped_keys
from policies.model.resources import watched_resources
from policies.quota.quota_objects import gpu_resources
from policies.rules.base import REGISTRY
from policies.rules.relevance import resolve
from webhook.settings import Settings

s = Settings()
name = "example.com/toy-gpu"
assert name in watched_resources(s.names) and name in node_resource_names(s.names)
assert name in gpu_resources(s.names) and name in skipped_keys(s)
for rule_id in ("GS004", "GS010", "GB001"):
    triggers = resolve([REGISTRY[rule_id].relevance], s)
    assert name in triggers.custom_requests | triggers.env_from | triggers.placed_resources, rule_id
print("reached")
'''


def test_a_new_resource_name_reaches_every_list_and_the_generated_files_only(checkout):
    names = checkout / "policies" / "model" / "names.py"
    text = names.read_text()
    assert text.count(NEW_RESOURCE.splitlines()[0] + "\n") == 1
    names.write_text(text.replace(NEW_RESOURCE.splitlines()[0] + "\n", NEW_RESOURCE))
    done = gpushare("generate", cwd=checkout)
    assert done.returncode == 0, done.stderr
    touched = changed(checkout)
    assert touched - {str(p) for p in generated_paths(checkout)} == {"policies/model/names.py"}
    # The webhooks send what GS004, GS010 and the placement rules judge of it; the backstop's GS010 reads it.
    assert {*(str(p) for p in DEPLOY_FILES), "docs/operations.md"} <= touched
    done = _run(sys.executable, "-c", PROBE, cwd=checkout)
    assert (done.returncode, done.stdout) == (0, "reached\n"), done.stderr
