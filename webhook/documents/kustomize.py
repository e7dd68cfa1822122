"""Kustomizations in ``gpushare check``: a directory holding ``kustomization.yaml`` is what it renders
to, not the files in it (a patch alone is no object, and an overlay's bad patch is found only in the
result). It is rendered with ``kubectl kustomize`` (kustomize is built into kubectl) or, without
kubectl, a standalone ``kustomize build``; with neither on PATH, ``check`` reads its files one by
one and says how to render it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import yaml

from webhook.documents.manifests import ManifestError

# The names kustomize itself looks for, in its order (sigs.k8s.io/kustomize/api/konfig).
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
RENDER_TIMEOUT = 120


def kustomization_in(directory: str, names: list[str] | None = None) -> str | None:
    """The kustomization file of ``directory`` (``names``: its file names, when already listed)."""
    present = set(names) if names is not None else None
    for name in KUSTOMIZATION_FILES:
        if (name in present) if present is not None else os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    return None


def is_kustomization(path: str) -> bool:
    return os.path.basename(path) in KUSTOMIZATION_FILES


def is_component(path: str) -> bool:
    """A ``kind: Component``: included by kustomizations, never rendered alone."""
    try:
        with open(path, encoding="utf-8") as stream:
            data = yaml.safe_load(stream)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and data.get("kind") == "Component"


def renderer() -> list[str] | None:
    """The command that renders a kustomization directory, or None when neither tool is on PATH."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        return [kubectl, "kustomize"]
    kustomize = shutil.which("kustomize")
    return [kustomize, "build"] if kustomize else None


def how_to_render(directory: str) -> str:
    return f"`kubectl kustomize {directory} | gpushare check --stdin-filename {directory} -`"


def render(kustomization: str) -> str:
    """The objects the kustomization of this file's directory renders to, as YAML text."""
    command = renderer()
    directory = os.path.dirname(kustomization) or "."
    if command is None:
        raise ManifestError(kustomization, None, f"cannot render this kustomization: neither kubectl nor "
                                                 f"kustomize is on PATH; render it with {how_to_render(directory)}")
    try:
        done = subprocess.run([*command, directory], capture_output=True, text=True, timeout=RENDER_TIMEOUT,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ManifestError(kustomization, None, f"cannot render this kustomization: {exc}") from None
    if done.returncode != 0:
        why = " ".join(done.stderr.split()).removeprefix("error: ") or f"exit code {done.returncode}"
        raise ManifestError(kustomization, None, f"`{os.path.basename(command[0])} {' '.join(command[1:])} "
                                                 f"{directory}` failed: {why}")
    return done.stdout
