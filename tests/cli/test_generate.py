"""``gpushare generate``: the one command that rewrites every generated file, and ``--check``, which
lists the stale ones. Adding the toy rule of CONTRIBUTING.md ("Add a rule", read from its code blocks)
to a copy of the checkout and running the command changes the rule's module, its test and generated
files, nothing else, and every generic test that would catch a forgotten companion file passes there."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from webhook.cli.generate import DEPLOY_FILES, generated_paths

ROOT = Path(__file__).resolve().parents[2]


def contributing_example() -> dict[str, str]:
    """The files CONTRIBUTING.md's "Add a rule" has a contributor write: each ```python block of the
    section, under the path that ends the line before it (a toy rule's module, then its test)."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("\n## Add a rule\n", 1)[1].split("\n## ", 1)[0]
    files = {}
    for path, indent, code in re.findall(r"`([\w/]+\.py)`:\n[^`]*?\n( *)```python\n(.*?)\n\2```", section, re.S):
        files[path] = "".join(line.removeprefix(indent) for line in code.splitlines(keepends=True)) + "\n"
    return files


EXAMPLE = contributing_example()
RULE_FILE, TEST_FILE = "policies/rules/toy_rules.py", "tests/domain/test_toy_rules.py"
# The tests that would catch a companion file the toy rule forgot: its relevance (the generic
# generator), its warnings' length (a generated object makes it speak; the in-process tests only),
# its family test, the layout's imports; and the staleness check after them.
COMPANION_TESTS = ["tests/deploy/test_rule_relevance.py", "tests/server/test_warning_limit.py",
                   "tests/domain/test_rule_families.py", "tests/domain/test_layout.py"]
IN_PROCESS = "not caught and not server_passes"  # the planted relevances and the one test starting a server


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


@pytest.mark.processes
def test_the_checked_in_files_are_fresh():
    done = gpushare("generate", "--check", cwd=ROOT)
    assert done.returncode == 0, f"stale: {done.stdout}{done.stderr} run `gpushare generate`"
    assert done.stdout == ""


@pytest.mark.processes
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


@pytest.mark.processes
def test_a_block_naming_no_generator_is_an_error_with_file_and_line(checkout):
    doc = checkout / "docs" / "design.md"
    doc.write_text(doc.read_text() + "\n<!-- generated by hand -->\n| a |\n<!-- end of generated table -->\n")
    done = gpushare("generate", "--check", cwd=checkout)
    assert done.returncode == 2
    lines = len(doc.read_text().splitlines())
    assert f"docs/design.md:{lines - 2}: a generated block whose marker names no generator" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.processes
def test_outside_a_checkout_it_asks_for_one(tmp_path):
    done = gpushare("generate", "--root", str(tmp_path), cwd=ROOT)
    assert done.returncode == 2
    assert "is not a gpushare-webhook source checkout" in done.stderr and "--root" in done.stderr


def test_contributing_shows_the_toy_rule_and_its_test():
    assert sorted(EXAMPLE) == sorted([RULE_FILE, TEST_FILE])
    assert '@rule("GS099"' in EXAMPLE[RULE_FILE] and "def test_gs099" in EXAMPLE[TEST_FILE]


@pytest.mark.processes
def test_the_toy_rule_touches_its_module_its_test_and_generated_files_only(checkout):
    for path, text in EXAMPLE.items():
        (checkout / path).write_text(text)
    done = gpushare("generate", cwd=checkout)
    assert done.returncode == 0, done.stderr
    touched = changed(checkout)
    generated = {str(p) for p in generated_paths(checkout)}
    assert touched - generated == {RULE_FILE, TEST_FILE}
    # Its id joins the rule tables, its variable the pods' conditions and the outage table's words.
    assert {"README.md", "docs/design.md", "docs/operations.md", *(str(p) for p in DEPLOY_FILES[:2])} <= touched
    assert "| GS099 | warn | No container sets TOY_GPU_SETTING |" in (checkout / "README.md").read_text()
    assert "TOY_GPU_SETTING" in (checkout / DEPLOY_FILES[0]).read_text()
    # Its own test passes, and so does every generic test that would catch a forgotten companion file.
    done = _run(sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p",
                "no:xdist", TEST_FILE, *COMPANION_TESTS, "-k", IN_PROCESS, cwd=checkout, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " failed" not in done.stdout and " error" not in done.stdout and " passed" in done.stdout
    assert gpushare("generate", "--check", cwd=checkout).returncode == 0
    assert changed(checkout) == touched  # the tests rewrote nothing


# CONTRIBUTING.md, "A resource name": one field of ResourceNames (here a resource containers ask for).
NEW_RESOURCE = '''    gpu_exclusive: str = "nvidia.com/gpu"
    # A toy: another GPU resource containers ask for.
    gpu_toy: str = "example.com/toy-gpu"
'''
PROBE = '''\
from policies.model.cluster_manifests import node_resource_names
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


@pytest.mark.processes
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
