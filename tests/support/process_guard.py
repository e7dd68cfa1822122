"""The ``processes`` marker, held true: a test that starts a process says so, and one that does not
say so starts none, so ``pytest -m "not processes"`` and ``pytest tests/domain`` never wait on one.

An audit hook (PEP 578, as hermetic.py uses) sees every process the test process starts: a
subprocess (the CLI, ``gpushare serve``, kubectl, chromedriver), a fork (the periodic audit's
child, a process pool), an exec or a spawn. conftest.py says which test is running and whether it
is marked (its own marker, its module's, or a fixture that starts the shared server); what an
unmarked test starts, its fixtures included, is recorded and fails that test with its name.
"""

from __future__ import annotations

import sys
from typing import Any

MARKER = "processes"
# Fixtures that start a process for the test that uses them (conftest.py's and test modules' own
# `server`, and the TLS `session` to it): a test using one is marked without saying so.
FIXTURES = frozenset({"server", "session", "worker_kind"})
# Audit events that start a process, and which argument names what was started.
_STARTS: dict[str, int | None] = {"subprocess.Popen": 1, "os.posix_spawn": 1, "os.spawn": 2, "os.exec": 1,
                                  "os.system": 0, "os.fork": None, "os.forkpty": None}
allowed = True  # whether the test running now may start processes (outside any test: yes)
started: list[str] = []  # what an unmarked test started, since the last check


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event in _STARTS and not allowed:
        where = _STARTS[event]
        started.append(event if where is None else f"{event} {str(args[where])[:200]}")


def install() -> None:
    """Once per process: audit hooks cannot be removed."""
    if not getattr(sys, "_gpushare_process_guard", False):
        sys.addaudithook(_hook)
        sys._gpushare_process_guard = True  # type: ignore[attr-defined]


def take() -> list[str]:
    """What was started since the last call (and forget it)."""
    found = started[:]
    del started[:]
    return found
