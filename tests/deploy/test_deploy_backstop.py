"""The backstop in deploy/: the Helm chart renders it only for Kubernetes >= 1.30 (judged from
.Capabilities.KubeVersion), the kustomize component adds it to the base, and both hold exactly
what ``gpushare policy export`` prints with the default config."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_deploy import CHART, KUSTOMIZE, render_helm, render_kustomize
from tests.support.check_helpers import run_gpushare

pytestmark = pytest.mark.processes

COMPONENT = KUSTOMIZE / "components" / "backstop"
KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def _exported() -> list[dict]:
    done = run_gpushare("policy", "export", cwd=Path("/"))
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _backstop(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] in KINDS]


def test_the_checked_in_policy_is_what_policy_export_prints():
    exported = _exported()
    assert [o["kind"] for o in exported] == list(KINDS)
    for path in (CHART / "files" / "backstop.yaml", COMPONENT / "backstop.yaml"):
        shipped = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert shipped == exported, f"{path} is stale: run `gpushare generate`"


def test_helm_renders_it_for_kubernetes_1_30_and_later_only():
    assert _backstop(render_helm()) == []  # opt-in, like the kustomize component
    on = {"enabled": True}
    assert _backstop(render_helm({"backstop": on})) == _exported()  # the offline renderer reports a current version
    assert _backstop(render_helm({"backstop": {**on, "kubeVersion": ">=99.0-0"}})) == []  # an older cluster
    own = _exported()
    own[0]["metadata"]["name"] = own[1]["metadata"]["name"] = own[1]["spec"]["policyName"] = "mine"
    rendered = _backstop(render_helm({"backstop": {**on, "manifest": yaml.safe_dump_all(own)}}))
    assert [o["metadata"]["name"] for o in rendered] == ["mine", "mine"]


def test_kustomize_adds_it_as_a_component_and_the_base_leaves_it_out(tmp_path):
    assert _backstop(render_kustomize()) == []
    shutil.copytree(KUSTOMIZE, tmp_path / "kustomize")  # kustomize takes relative paths only
    overlay = tmp_path / "install"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../kustomize]\ncomponents: [../kustomize/components/backstop]\n")
    assert _backstop(render_kustomize(overlay)) == _exported()
