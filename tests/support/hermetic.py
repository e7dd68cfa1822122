"""Hermetic tests: nothing a test reads may live beside the repository (a sibling folder).

CI keeps other folders next to its clone, so a test that reads one passes there and fails in
any other clone. An audit hook (PEP 578) sees every ``open`` of the test process and every
command line it starts; a path under the repository's parent folder but outside the
repository is recorded, and the test that caused it fails (``conftest.py``). Temporary
directories, the interpreter and its packages live elsewhere and are not affected.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_ROOT = str(ROOT)
_BESIDE = str(ROOT.parent)
# Where the interpreter, its packages and temporary files live, even when that is beside the
# repository (a clone in /tmp, a virtualenv next to the clone): reading there is not a test input.
_RUNTIME = tuple(sorted({os.path.realpath(p) + os.sep for p in (
    tempfile.gettempdir(), sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path)
    if p and not _BESIDE.startswith(os.path.realpath(p))}))
# A clone may sit in the temporary directory itself (/tmp/clone): its siblings there are then
# both other folders (/tmp/shared, refused) and the tests' own temporary files, which are told
# apart by the names pytest and the tempfile module give them.
_TMP = os.path.realpath(tempfile.gettempdir())
_TEMP_NAMES = ("pytest-of-", "tmp")
violations: list[str] = []


def _temporary(resolved: str) -> bool:
    if not resolved.startswith(_TMP + os.sep):
        return False
    return resolved[len(_TMP) + 1:].split(os.sep, 1)[0].startswith(_TEMP_NAMES)


def outside(path: object) -> str | None:
    """``path`` resolved when it is beside the repository (under its parent, not in it)."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str | os.PathLike) or isinstance(path, int):
        return None
    text = os.fspath(path)
    if not text or "\0" in text:
        return None
    # Both the path as written (a sibling may be a symbolic link to anywhere) and where it leads.
    for candidate in (os.path.abspath(text), os.path.realpath(text)):
        if _beside(candidate):
            return candidate
    return None


def _beside(resolved: str) -> bool:
    if resolved == _ROOT or resolved.startswith(_ROOT + os.sep):
        return False
    if resolved == _BESIDE or not resolved.startswith(_BESIDE + os.sep):
        return False  # the parent itself (os.getcwd, path searches) or somewhere else entirely
    return not (resolved.startswith(_RUNTIME) or _temporary(resolved))


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event in ("open", "os.scandir", "os.listdir"):
        found = outside(args[0])
        if found:
            violations.append(f"{'opened' if event == 'open' else 'listed'} {found}")
    elif event == "subprocess.Popen":
        for arg in args[1] or ():
            for part in str(arg).split("="):  # --flag=PATH as well as PATH
                found = outside(part) if os.sep in part else None
                if found:
                    violations.append(f"passed {found} to {args[0]}")


def install() -> None:
    """Once per process: audit hooks cannot be removed."""
    if not getattr(sys, "_gpushare_hermetic_hook", False):
        sys.addaudithook(_hook)
        sys._gpushare_hermetic_hook = True  # type: ignore[attr-defined]
