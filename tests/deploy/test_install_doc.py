"""docs/install.md says what happens; these tests hold it to that: its overlay renders with
the user's image, and its example pod gets the denial and the mutation the doc quotes."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.helpers import admission_review, gpushare_server

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "install.md").read_text()


def heredoc(after: str) -> str:
    """The body of the shell here-document that follows ``after`` in the install guide."""
    match = re.search(re.escape(after) + r"[^\n]*<<'?EOF'?\n(.*?)\nEOF\n", DOC, re.S)
    assert match, f"no here-document after {after!r} in docs/install.md"
    return match.group(1)


def test_the_overlay_of_the_guide_renders_with_the_users_image(tmp_path):
    # The same layout as the guide: the overlay directory beside deploy/ at the repository root.
    shutil.copytree(ROOT / "deploy" / "kustomize", tmp_path / "deploy" / "kustomize")
    overlay = tmp_path / "gpushare-install"
    overlay.mkdir()
    for scheduler in ("ack-co-scheduler", "none"):
        text = heredoc("cat > gpushare-install/kustomization.yaml").replace("$REGISTRY", "registry.example.com/p")
        (overlay / "kustomization.yaml").write_text(text.replace("$SCHEDULER", scheduler))
        done = subprocess.run([shutil.which("kubectl") or "kubectl", "kustomize", str(overlay)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        objects = [d for d in yaml.safe_load_all(done.stdout) if d]
        images = {c["image"] for d in objects if d["kind"] in ("Deployment", "Job")
                  for c in d["spec"]["template"]["spec"]["containers"]}
        assert images == {"registry.example.com/p/gpushare-webhook:0.1.0"}
        (config,) = [d["data"]["config.yaml"] for d in objects if d["kind"] == "ConfigMap"]
        assert yaml.safe_load(config) == {"names": {"scheduler_name": scheduler}}


def test_the_guides_kubelet_configz_component_grants_nodes_proxy_only_when_added(tmp_path):
    shutil.copytree(ROOT / "deploy" / "kustomize", tmp_path / "deploy" / "kustomize")
    overlay = tmp_path / "gpushare-install"
    overlay.mkdir()
    base = heredoc("cat > gpushare-install/kustomization.yaml").replace("$REGISTRY", "registry.example.com/p")
    base = base.replace("$SCHEDULER", "none")

    def rendered(text: str) -> list[dict]:
        (overlay / "kustomization.yaml").write_text(text)
        done = subprocess.run([shutil.which("kubectl") or "kubectl", "kustomize", str(overlay)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return [d for d in yaml.safe_load_all(done.stdout) if d]

    def proxy_rules(objects: list[dict]) -> list[dict]:
        return [r for d in objects if d["kind"] == "ClusterRole" for r in d["rules"] if "nodes/proxy" in r["resources"]]

    assert proxy_rules(rendered(base)) == []
    objects = rendered(base + "\n" + heredoc("cat >> gpushare-install/kustomization.yaml"))
    assert proxy_rules(objects) == [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]
    (deployment,) = [d for d in objects if d["kind"] == "Deployment"]
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "GPUSHARE_STATE__KUBELET_CONFIGZ__ENABLED", "value": "true"} in env
    assert "--set kubeletConfigz.enabled=true" in DOC


def test_the_guide_asks_for_the_scheduler_before_installing():
    first = DOC.index("## First: which scheduler places shared GPUs in your cluster?")
    assert first < DOC.index("## 2. Install") and "SCHEDULER=ack-co-scheduler" in DOC[first:DOC.index("## 0.")]
    assert "`SCHEDULER=none`" in DOC and "--set scheduler=$SCHEDULER" in DOC


def test_the_readme_overlay_line_renders_with_the_users_image(tmp_path):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Install into a cluster"):]
    block = section[section.index("```sh\n") + 6:section.index("```", section.index("```sh\n") + 6)]
    (overlay_line,) = [line for line in block.splitlines() if line.startswith("mkdir -p gpushare-install")]
    shutil.copytree(ROOT / "deploy" / "kustomize", tmp_path / "deploy" / "kustomize")
    made = subprocess.run(["bash", "-c", overlay_line], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          env={"REGISTRY": "registry.example.com/q", "SCHEDULER": "none", "PATH": "/usr/bin:/bin"})
    assert made.returncode == 0, made.stderr
    done = subprocess.run([shutil.which("kubectl") or "kubectl", "kustomize", str(tmp_path / "gpushare-install")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "image: registry.example.com/q/gpushare-webhook:0.1.0" in done.stdout
    assert "config.yaml: 'names: {scheduler_name: none}'" in done.stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with gpushare_server(tmp_path_factory.mktemp("doc")) as running:
        yield running


def doc_pod() -> dict:
    pod = yaml.safe_load(heredoc("kubectl -n gpushare-try apply --dry-run=server -f -"))
    pod["metadata"]["namespace"] = "gpushare-try"
    return pod


def test_the_guides_pod_is_denied_with_the_quoted_message(server):
    reply = server.post_json("/validate", admission_review(doc_pod(), namespace="gpushare-try")).json()
    assert reply["response"]["allowed"] is False
    quoted = re.search(r'denied the request:\s*(GS001:.*?35)`', DOC, re.S)
    assert quoted, "the guide quotes the GS001 denial"
    assert reply["response"]["status"]["message"] == " ".join(quoted.group(1).split())


def test_the_guides_pod_with_30_percent_is_admitted_and_mutated(server):
    pod = doc_pod()
    pod["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-core.percentage"] = 30
    assert server.post_json("/validate", admission_review(pod, namespace="gpushare-try")).json()[
        "response"]["allowed"] is True
    mutated = server.post_json("/mutate", admission_review(pod, namespace="gpushare-try")).json()["response"]
    patch = json.loads(base64.b64decode(mutated["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "ack-co-scheduler"} in patch
    assert "ALIYUN_COM_GPU_MEM_CONTAINER" in json.dumps(patch)
