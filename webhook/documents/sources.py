"""Which files ``gpushare check`` reads: paths, directories (recursively) and ``-`` for stdin.

Directory walks take ``*.yaml``, ``*.yml`` and ``*.json``; they skip hidden entries
(``.git``, ``.github``, ``.venv``), paths matching an ``--exclude`` glob, and the ``templates/``
of Helm charts, which are Go templates and become manifests only through ``helm template``.
A directory holding a kustomization is its kustomization file, rendered when read
(``webhook.documents.kustomize``), instead of its files, when kubectl or kustomize is on PATH.
A file named on the command line is always read, unless it is a Helm template or excluded.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from webhook.documents.kustomize import how_to_render, is_component, kustomization_in, renderer
from webhook.documents.manifests import ManifestError

STDIN = "-"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class Selection:
    """The files to read, in a stable order, and what was passed over (told on stderr)."""

    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Files named on the command line and passed over (told in notes), so that "nothing to check"
    # does not say there was no file.
    passed_over: list[str] = field(default_factory=list)


def _excluded(path: str, patterns: Sequence[str]) -> bool:
    posix = path.replace(os.sep, "/")
    name = posix.rstrip("/").rsplit("/", 1)[-1]
    return any(fnmatchcase(posix, p) or fnmatchcase(name, p) or fnmatchcase(posix, p.rstrip("/") + "/*")
               for p in patterns)


def _chart_of(template: str) -> str:
    """The chart directory a template belongs to, as the user named the template."""
    path = Path(template)
    for parent in path.parents:
        if parent.name == "templates" and (parent.parent / "Chart.yaml").is_file():
            return str(parent.parent) or "."
    return str(path.parent)


def is_helm_template(path: str) -> bool:
    """Below a ``templates`` directory that sits beside a ``Chart.yaml``."""
    for parent in Path(path).resolve().parents:
        if parent.name == "templates" and (parent.parent / "Chart.yaml").is_file():
            return True
    return False


def _walk(root: str, patterns: Sequence[str], notes: list[str], can_render: bool) -> Iterable[str]:
    for current, dirs, files in os.walk(root):
        kustomization = kustomization_in(current, files)
        if kustomization is not None and not _excluded(kustomization, patterns):
            component = is_component(kustomization)
            if can_render:  # the directory is what it renders to; its files are its inputs
                dirs[:] = []
                if component:
                    notes.append(f"{current}: skipped kustomize Component; it is checked in the "
                                 "kustomizations that include it")
                else:
                    yield kustomization
                continue
            if not component:
                notes.append(f"{current}: a kustomization, read file by file without its patches (neither "
                             f"kubectl nor kustomize is on PATH); check what it renders with "
                             f"{how_to_render(current)}")
        keep = []
        for name in sorted(dirs):
            path = os.path.join(current, name)
            if name.startswith(".") or _excluded(path, patterns):
                continue
            if name == "templates" and os.path.isfile(os.path.join(current, "Chart.yaml")):
                notes.append(f"{path}: skipped Helm chart templates; check them with "
                             f"`helm template {current} | gpushare check -`")
                continue
            keep.append(name)
        dirs[:] = keep
        for name in sorted(files):
            path = os.path.join(current, name)
            if name.endswith(MANIFEST_SUFFIXES) and not name.startswith(".") and not _excluded(path, patterns):
                yield path


def select_files(paths: Sequence[str], exclude: Sequence[str] = ()) -> Selection:
    """Expand the command line's paths into files; a missing path is a ManifestError."""
    selection = Selection()
    seen: set[str] = set()
    can_render = renderer() is not None

    def add(path: str) -> None:
        key = path if path == STDIN else os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            selection.files.append(path)

    for path in paths:
        if path == STDIN:
            add(path)
        elif os.path.isdir(path):
            for file in _walk(path, exclude, selection.notes, can_render):
                add(file)
        elif os.path.exists(path):
            if _excluded(path, exclude):
                selection.notes.append(f"{path}: skipped (matches --exclude)")
                selection.passed_over.append(path)
            elif is_helm_template(path):
                chart = _chart_of(path)
                selection.notes.append(f"{path}: skipped Helm chart template, which is Go template text, not a "
                                       f"manifest; check what the chart renders with "
                                       f"`helm template {chart} | gpushare check -`")
                selection.passed_over.append(path)
            else:
                add(path)
        else:
            raise ManifestError(path, None, "no such file or directory")
    return selection


def read_text(path: str, source: str) -> str:
    """The file (or stdin for ``-``) as text; unreadable or non-UTF-8 input is a ManifestError."""
    try:
        data = sys.stdin.buffer.read() if path == STDIN else Path(path).read_bytes()
    except OSError as exc:
        raise ManifestError(source, None, f"cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ManifestError(source, line, f"not UTF-8 text (byte {exc.start})") from None
