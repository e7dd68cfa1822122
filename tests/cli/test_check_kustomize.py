"""`gpushare check` on kustomizations and Helm chart templates: what they render to is checked
(kustomizations through `kubectl kustomize`), and what cannot be rendered is named with the command
that renders it. kubectl is part of the machine image; .ci/run installs a pinned one where it is not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support.check_helpers import SEED_OK, run_gpushare

pytestmark = pytest.mark.processes

# An overlay whose patch (RFC 6902, inline: no file of it is an object) asks for 1.5 GiB, which only
# the rendered Job shows.
OVERLAY = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
           "resources": ["../../base"],
           "patches": [{"target": {"kind": "Job", "name": "cuda-sample"}, "patch": yaml.safe_dump([
               {"op": "replace", "path": "/spec/template/spec/containers/0/resources/limits/aliyun.com~1gpu-mem",
                "value": "1.5"}])}]}


def _repository(root: Path) -> Path:
    (root / "base").mkdir(parents=True)
    shutil.copy(SEED_OK[0], root / "base" / "job.yaml")
    (root / "base" / "kustomization.yaml").write_text("resources: [job.yaml]\n")
    (root / "overlays" / "prod").mkdir(parents=True)
    (root / "overlays" / "prod" / "kustomization.yaml").write_text(yaml.safe_dump(OVERLAY, sort_keys=False))
    (root / "components" / "quota").mkdir(parents=True)
    (root / "components" / "quota" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n")
    return root


def _without_kubectl(tmp_path: Path) -> dict[str, str]:
    """A PATH on which neither kubectl nor kustomize is found (gpushare itself is run by its full path)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    return {"PATH": str(empty)}


def test_an_overlays_bad_patch_is_found_where_kubectl_renders_it(tmp_path):
    assert shutil.which("kubectl"), "kubectl is part of the machine image (.ci/run installs .ci/kubectl.txt)"
    root = _repository(tmp_path / "repo")
    done = run_gpushare("check", "-o", "json", ".", cwd=root)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    [finding] = report["findings"]
    assert (finding["file"], finding["line"], finding["rule"]) == ("./overlays/prod/kustomization.yaml", 1, "GS003")
    assert 'aliyun.com/gpu-mem=1.5 is not a whole number of GiB' in finding["message"]
    assert report["summary"]["objects"] == 2  # the base's Job and the overlay's
    assert done.stderr == ("gpushare: note: ./components/quota: skipped kustomize Component; it is checked in the "
                           "kustomizations that include it\n")
    # Named on the command line (pre-commit names changed files), a kustomization is rendered too.
    named = run_gpushare("check", "overlays/prod/kustomization.yaml", cwd=root)
    assert named.returncode == 1 and named.stdout.startswith("overlays/prod/kustomization.yaml:1: deny GS003: Job "
                                                             "default/cuda-sample")


def test_without_kubectl_the_overlay_is_named_with_the_command_that_renders_it(tmp_path):
    root = _repository(tmp_path / "repo")
    done = run_gpushare("check", ".", cwd=root, env=_without_kubectl(tmp_path))
    assert done.returncode == 0, done.stdout  # the patch was not applied: nothing found, and said so
    notes = done.stderr.splitlines()
    how = "a kustomization, read file by file without its patches (neither kubectl nor kustomize is on PATH)"
    assert notes == [f"gpushare: note: ./base: {how}; check what it renders with `kubectl kustomize ./base | "
                     "gpushare check --stdin-filename ./base -`",
                     f"gpushare: note: ./overlays/prod: {how}; check what it renders with `kubectl kustomize "
                     "./overlays/prod | gpushare check --stdin-filename ./overlays/prod -`"]


def test_a_kustomization_that_does_not_render_is_an_input_error(tmp_path):
    assert shutil.which("kubectl"), "kubectl is part of the machine image (.ci/run installs .ci/kubectl.txt)"
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources: [missing.yaml]\n")
    done = run_gpushare("check", "overlay", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout.startswith("FAIL: 0 denials")
    [line] = done.stderr.splitlines()
    assert line.startswith("gpushare: error: overlay/kustomization.yaml: `kubectl kustomize overlay` failed: "), line
    assert "missing.yaml" in line


def test_a_named_chart_template_says_how_to_render_the_chart(tmp_path):
    chart = tmp_path / "charts" / "gpu"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: gpu\nversion: 0.1.0\n")
    (chart / "templates" / "job.yaml").write_text("kind: Job\nmetadata:\n  name: {{ .Release.Name }}\n")
    done = run_gpushare("check", "charts/gpu/templates/job.yaml", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "gpushare: note: charts/gpu/templates/job.yaml: skipped Helm chart template, which is Go template text, "
        "not a manifest; check what the chart renders with `helm template charts/gpu | gpushare check -`",
        "gpushare: error: charts/gpu/templates/job.yaml: nothing to check: passed over, as the note above says "
        "(--allow-empty accepts that)"]
