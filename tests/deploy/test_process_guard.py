"""The `processes` marker is held true (tests/support/process_guard.py): what a test not marked
`processes` starts is seen and fails it, and a test using the shared server is marked on its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import process_guard
from tests.support.hermetic import ROOT


@pytest.fixture
def unmarked():
    """The guard as it stands during a test that is not marked (restored afterwards)."""
    process_guard.take()
    process_guard.allowed = False
    try:
        yield
    finally:
        process_guard.allowed = True


def test_a_command_an_unmarked_test_starts_is_named(unmarked):
    process_guard._hook("subprocess.Popen", ("kubectl", ["kubectl", "version"], None, None))
    process_guard._hook("os.fork", ())
    process_guard._hook("open", ("/etc/hosts", "r", 0))  # not a process
    assert process_guard.take() == ["subprocess.Popen ['kubectl', 'version']", "os.fork"]
    assert process_guard.take() == []


def test_a_marked_test_may_start_processes():
    before = process_guard.allowed
    process_guard.allowed = True  # as conftest.py sets it for a marked test
    try:
        process_guard._hook("subprocess.Popen", ("kubectl", ["kubectl", "version"], None, None))
        assert process_guard.take() == []
    finally:
        process_guard.allowed = before


@pytest.mark.processes
def test_the_audit_hook_sees_a_real_subprocess_and_a_real_fork(unmarked):
    subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    started = process_guard.take()
    assert len(started) == 2, started
    assert started[0].startswith("subprocess.Popen [") and sys.executable in started[0]
    assert started[1] == "os.fork"


@pytest.mark.processes
def test_tests_using_the_server_are_marked_without_saying_so():
    # test_warning_limit.py marks nothing itself; one of its tests uses the shared `server`.
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly",
                           "-m", "not processes", "tests/server/test_warning_limit.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    selected = {line.split("::")[1].split("[")[0] for line in done.stdout.splitlines() if "::" in line}
    assert "test_the_server_passes_gc001_on_whole" not in selected
    assert "test_fail_open_warnings_fold_rule_ids_and_keep_what_was_done" in selected
    assert "(1 deselected)" in done.stdout, done.stdout
