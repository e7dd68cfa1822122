"""`gpushare certs` against a local Kubernetes API server: Secrets and caBundle injection."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
from cryptography import x509

from certs.material import subject_names

from .helpers import free_port, gpushare_executable
from .object_apiserver import object_apiserver

NS = "gpushare-system"


def webhook_configuration(kind: str, names: list[str]) -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": "gpushare-webhook"},
            "webhooks": [{"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "clientConfig": {"service": {"name": "gpushare-webhook", "namespace": NS,
                                                       "path": "/validate"}}} for name in names]}


@pytest.fixture
def cluster(tmp_path):
    with object_apiserver() as api:
        api.store.put(webhook_configuration("MutatingWebhookConfiguration",
                                            ["pods.mutate.gpushare.io", "daemonsets.mutate.gpushare.io"]))
        api.store.put(webhook_configuration("ValidatingWebhookConfiguration",
                                            ["pods.validate.gpushare.io", "workloads.validate.gpushare.io",
                                             "nodes.validate.gpushare.io"]))
        api.kubeconfig(tmp_path / "kubeconfig")
        yield api


def certs_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([gpushare_executable(), "certs", *args, "--kubeconfig", str(tmp_path / "kubeconfig")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)


def secret_data(api, name: str) -> dict[str, bytes]:
    secret = api.store.get("secrets", name, NS)
    assert secret is not None, f"secret {name} missing"
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def injected_bundles(api) -> list[bytes]:
    out = []
    for resource in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for webhook in api.store.get(resource, "gpushare-webhook")["webhooks"]:
            out.append(base64.b64decode(webhook["clientConfig"]["caBundle"]))
    return out


def test_rotate_into_secrets_and_inject_every_webhook(cluster, tmp_path):
    done = certs_cli(tmp_path, "rotate", "--secrets", "--inject", "-n", NS)
    assert done.returncode == 0, done.stderr
    assert "2 of 2 webhooks changed" in done.stdout and "3 of 3 webhooks changed" in done.stdout
    ca, tls = secret_data(cluster, "gpushare-webhook-ca"), secret_data(cluster, "gpushare-webhook-tls")
    assert cluster.store.get("secrets", "gpushare-webhook-tls", NS)["type"] == "kubernetes.io/tls"
    assert set(ca) == {"ca.crt", "ca.key"} and set(tls) == {"tls.crt", "tls.key", "ca.crt"}
    serving = x509.load_pem_x509_certificate(tls["tls.crt"])
    assert subject_names(serving) == {"gpushare-webhook", f"gpushare-webhook.{NS}", f"gpushare-webhook.{NS}.svc",
                                      f"gpushare-webhook.{NS}.svc.cluster.local"}
    assert injected_bundles(cluster) == [ca["ca.crt"]] * 5
    patches = [r for r in cluster.store.requests if r.method == "PATCH"]
    assert {r.content_type for r in patches} == {"application/json-patch+json"}
    assert all(r.body[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": r.body[0]["value"]}
               for r in patches)
    # A second run changes nothing and patches nothing.
    before = len(cluster.store.requests)
    again = certs_cli(tmp_path, "rotate", "--secrets", "--inject", "-n", NS)
    assert again.returncode == 0 and "up to date" in again.stdout
    assert not [r for r in cluster.store.requests[before:] if r.method in ("PATCH", "PUT", "POST")]


def test_ca_renewal_injects_both_cas_before_the_serving_secret_changes(cluster, tmp_path):
    assert certs_cli(tmp_path, "rotate", "--secrets", "--inject").returncode == 0
    old_ca = secret_data(cluster, "gpushare-webhook-ca")["ca.crt"]
    old_pair = secret_data(cluster, "gpushare-webhook-tls")["tls.crt"]
    mark = len(cluster.store.requests)
    done = certs_cli(tmp_path, "rotate", "--secrets", "--inject", "--force-ca")
    assert done.returncode == 0, done.stderr
    writes = [r for r in cluster.store.requests[mark:] if r.method in ("PUT", "PATCH", "POST")]
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in writes] == [
        ("PUT", "gpushare-webhook-ca"),
        ("PUT", "gpushare-webhook-tls"),  # the bundle copy only: the serving pair is unchanged
        ("PATCH", "gpushare-webhook"), ("PATCH", "gpushare-webhook"),  # the API server trusts both CAs
        ("PUT", "gpushare-webhook-tls")]  # and only now the pair signed by the new CA
    assert base64.b64decode(writes[1].body["data"]["tls.crt"]) == old_pair
    assert base64.b64decode(writes[4].body["data"]["tls.crt"]) != old_pair
    new_ca = secret_data(cluster, "gpushare-webhook-ca")["ca.crt"]
    assert injected_bundles(cluster) == [new_ca + old_ca] * 5
    assert secret_data(cluster, "gpushare-webhook-ca")["previous-ca.crt"] == old_ca


def test_inject_retries_when_the_configuration_changes_under_it(cluster, tmp_path):
    certs_dir = tmp_path / "d"
    assert certs_cli(tmp_path, "issue", "--cert-dir", str(certs_dir)).returncode == 0

    def concurrent_edit(config: dict) -> None:
        config["webhooks"].insert(0, {**config["webhooks"][0], "name": "added.by.someone.else"})

    cluster.store.before_patch = concurrent_edit
    done = certs_cli(tmp_path, "inject", "--cert-dir", str(certs_dir))
    assert done.returncode == 0, done.stderr
    mutating = cluster.store.get("mutatingwebhookconfigurations", "gpushare-webhook")
    assert mutating["webhooks"][0]["name"] == "added.by.someone.else"
    bundle = (certs_dir / "ca-bundle.crt").read_bytes()
    assert all(base64.b64decode(w["clientConfig"]["caBundle"]) == bundle for w in mutating["webhooks"])
    assert len([r for r in cluster.store.requests if r.method == "PATCH"]) == 3  # one refused, retried


def test_missing_configuration_is_a_clear_failure(cluster, tmp_path):
    certs_dir = tmp_path / "d"
    assert certs_cli(tmp_path, "issue", "--cert-dir", str(certs_dir)).returncode == 0
    done = certs_cli(tmp_path, "inject", "--cert-dir", str(certs_dir), "--validating", "absent")
    assert done.returncode == 1
    assert "ValidatingWebhookConfiguration absent: cannot read it: HTTP 404" in done.stderr
    assert "Traceback" not in done.stderr


def test_unreachable_api_server_is_a_clear_failure(tmp_path):
    from .object_apiserver import ObjectStore, RunningApiServer

    RunningApiServer(f"http://127.0.0.1:{free_port()}", ObjectStore()).kubeconfig(tmp_path / "kubeconfig")
    done = certs_cli(tmp_path, "rotate", "--secrets")
    assert done.returncode == 1 and "cannot reach the API server" in done.stderr
    assert "Traceback" not in done.stderr


def test_inject_needs_exactly_one_bundle_source(tmp_path, cluster):
    done = certs_cli(tmp_path, "inject")
    assert done.returncode == 2 and "--ca-bundle FILE, --cert-dir DIR or --secrets" in done.stderr
    (tmp_path / "junk.pem").write_text("junk")
    done = certs_cli(tmp_path, "inject", "--ca-bundle", "junk.pem")
    assert done.returncode == 2 and "junk.pem: not a PEM CA bundle" in done.stderr
