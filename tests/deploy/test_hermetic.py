"""Everything the tests read is in the repository: a clone with nothing beside it passes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support import hermetic
from tests.support.hermetic import ROOT

TESTS = ROOT / "tests"


def _beside(path) -> re.Pattern[str]:
    # ``parents[N]`` of a file N folders deep in the repository (``parents[2]`` of tests/conftest.py,
    # ``parents[3]`` of tests/domain/test_x.py) is the folder that holds the repository.
    depth = len(path.relative_to(ROOT).parts)
    ancestors = "|".join(str(n) for n in range(depth, 10))
    return re.compile(rf"\.\./shared|/work/shared|parents\[({ancestors})\]|parent(\.parent){{{depth}}}")


def test_no_test_source_names_a_folder_beside_the_repository():
    offenders = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(TESTS.rglob("*.py"))
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if _beside(path).search(line) and path.name != "test_hermetic.py"]
    assert offenders == []


def test_the_audit_hook_catches_an_open_beside_the_repository():
    # A folder beside the repository that nobody has (CI keeps a real shared/ there: listing
    # that would succeed), so the open and the listing fail after the hook has seen them.
    probe = ROOT.parent / "gpushare-hermetic-probe" / "seeds.txt"
    before = len(hermetic.violations)
    with pytest.raises(OSError):
        probe.read_text()  # the hook runs before the open, so a missing file is enough
    caught = hermetic.violations[before:]
    del hermetic.violations[before:]
    assert caught == [f"opened {probe}"]
    with pytest.raises(OSError):
        os.listdir(probe.parent)
    caught = hermetic.violations[before:]
    del hermetic.violations[before:]
    assert caught == [f"listed {probe.parent}"]


@pytest.mark.processes
def test_the_audit_hook_catches_a_path_handed_to_a_command():
    probe = ROOT / ".." / "shared" / "seeds"
    before = len(hermetic.violations)
    subprocess.run([sys.executable, "-c", "pass", f"--snapshot={probe}"], check=True)
    caught = hermetic.violations[before:]
    del hermetic.violations[before:]
    assert caught == [f"passed {os.path.abspath(probe)} to {sys.executable}"]


@pytest.mark.processes
def test_paths_in_the_repository_and_elsewhere_pass(tmp_path):
    assert hermetic.outside(ROOT / "tests" / "data" / "seeds") is None
    assert hermetic.outside(tmp_path / "x") is None
    assert hermetic.outside(sys.executable) is None
