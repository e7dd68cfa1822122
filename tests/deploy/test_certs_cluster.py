"""`gpushare certs` against a local Kubernetes API server: Secrets and caBundle injection."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
from cryptography import x509

from certs.material import subject_names
from tests.support.fake_apiserver import FakeApiServer
from tests.support.fake_apiserver_writes import writable_apiserver
from tests.support.helpers import gpushare_executable

pytestmark = pytest.mark.processes

NS = "gpushare-system"


def webhook_configuration(kind: str, names: list[str]) -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": "gpushare-webhook"},
            "webhooks": [{"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "clientConfig": {"service": {"name": "gpushare-webhook", "namespace": NS,
                                                       "path": "/validate"}}} for name in names]}


@pytest.fixture
def cluster(tmp_path):
    with writable_apiserver() as api:
        api.add(webhook_configuration("MutatingWebhookConfiguration",
                                      ["pods.mutate.gpushare.io", "daemonsets.mutate.gpushare.io"]),
                webhook_configuration("ValidatingWebhookConfiguration",
                                      ["pods.validate.gpushare.io", "workloads.validate.gpushare.io",
                                       "nodes.validate.gpushare.io"]))
        api.kubeconfig(tmp_path / "kubeconfig")
        yield api


def certs_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([gpushare_executable(), "certs", *args, "--kubeconfig", str(tmp_path / "kubeconfig")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)


def configuration(api, kind: str) -> dict:
    return api.get(f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/gpushare-webhook")


def secret(api, name: str) -> dict | None:
    return api.get(f"/api/v1/namespaces/{NS}/secrets/{name}")


def secret_data(api, name: str) -> dict[str, bytes]:
    secret = globals()["secret"](api, name)
    assert secret is not None, f"secret {name} missing"
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def injected_bundles(api) -> list[bytes]:
    out = []
    for kind in ("mutating", "validating"):
        for webhook in configuration(api, kind)["webhooks"]:
            out.append(base64.b64decode(webhook["clientConfig"]["caBundle"]))
    return out


def test_rotate_into_secrets_and_inject_every_webhook(cluster, tmp_path):
    done = certs_cli(tmp_path, "rotate", "--secrets", "--inject", "-n", NS)
    assert done.returncode == 0, done.stderr
    assert "2 of 2 webhooks changed" in done.stdout and "3 of 3 webhooks changed" in done.stdout
    ca, tls = secret_data(cluster, "gpushare-webhook-ca"), secret_data(cluster, "gpushare-webhook-tls")
    assert secret(cluster, "gpushare-webhook-tls")["type"] == "kubernetes.io/tls"
    assert set(ca) == {"ca.crt", "ca.key"} and set(tls) == {"tls.crt", "tls.key", "ca.crt"}
    serving = x509.load_pem_x509_certificate(tls["tls.crt"])
    # Both Services name the pods: the one for every review and the one selecting the binding leader.
    assert subject_names(serving) == {f"{svc}{suffix}" for svc in ("gpushare-webhook", "gpushare-webhook-bindings")
                                      for suffix in ("", f".{NS}", f".{NS}.svc", f".{NS}.svc.cluster.local")}
    assert injected_bundles(cluster) == [ca["ca.crt"]] * 5
    patches = [w for w in cluster.writes if w.method == "PATCH"]
    assert {w.content_type for w in patches} == {"application/json-patch+json"}
    assert all(w.body[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": w.body[0]["value"]}
               for w in patches)
    # A second run changes nothing and writes nothing.
    before = len(cluster.writes)
    again = certs_cli(tmp_path, "rotate", "--secrets", "--inject", "-n", NS)
    assert again.returncode == 0 and "up to date" in again.stdout
    assert cluster.writes[before:] == []


def test_ca_renewal_injects_both_cas_before_the_serving_secret_changes(cluster, tmp_path):
    assert certs_cli(tmp_path, "rotate", "--secrets", "--inject").returncode == 0
    old_ca = secret_data(cluster, "gpushare-webhook-ca")["ca.crt"]
    old_pair = secret_data(cluster, "gpushare-webhook-tls")["tls.crt"]
    mark = len(cluster.writes)
    done = certs_cli(tmp_path, "rotate", "--secrets", "--inject", "--force-ca")
    assert done.returncode == 0, done.stderr
    writes = cluster.writes[mark:]
    assert [(w.method, w.name) for w in writes] == [
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

    def concurrent_edit(api) -> None:
        config = configuration(api, "mutating")
        config["webhooks"].insert(0, {**config["webhooks"][0], "name": "added.by.someone.else"})
        api.update(config)

    cluster.before("PATCH", concurrent_edit)
    done = certs_cli(tmp_path, "inject", "--cert-dir", str(certs_dir))
    assert done.returncode == 0, done.stderr
    mutating = configuration(cluster, "mutating")
    assert mutating["webhooks"][0]["name"] == "added.by.someone.else"
    bundle = (certs_dir / "ca-bundle.crt").read_bytes()
    assert all(base64.b64decode(w["clientConfig"]["caBundle"]) == bundle for w in mutating["webhooks"])
    assert len([w for w in cluster.writes if w.method == "PATCH"]) == 3  # one refused, retried


def test_a_rotation_racing_another_loses_cleanly(cluster, tmp_path):
    assert certs_cli(tmp_path, "rotate", "--secrets").returncode == 0

    def other_job_renews(api) -> None:  # another job writes the CA Secret first
        api.update(api.get(f"/api/v1/namespaces/{NS}/secrets/gpushare-webhook-ca"))

    cluster.before("PUT", other_job_renews)
    done = certs_cli(tmp_path, "rotate", "--secrets", "--force-ca")
    assert done.returncode == 1 and "HTTP 409" in done.stderr and "Traceback" not in done.stderr
    # The serving pair was not touched: what the webhook pods mount still matches the trusted CA.
    state = secret_data(cluster, "gpushare-webhook-tls")
    ca = secret_data(cluster, "gpushare-webhook-ca")
    assert x509.load_pem_x509_certificate(state["tls.crt"]).issuer == \
        x509.load_pem_x509_certificate(ca["ca.crt"]).subject


def test_missing_configuration_is_a_clear_failure(cluster, tmp_path):
    certs_dir = tmp_path / "d"
    assert certs_cli(tmp_path, "issue", "--cert-dir", str(certs_dir)).returncode == 0
    done = certs_cli(tmp_path, "inject", "--cert-dir", str(certs_dir), "--validating", "absent")
    assert done.returncode == 1
    assert "ValidatingWebhookConfiguration absent: cannot read it: HTTP 404" in done.stderr
    assert "Traceback" not in done.stderr


def test_unreachable_api_server_is_a_clear_failure(tmp_path):
    gone = FakeApiServer().start()
    gone.kubeconfig(tmp_path / "kubeconfig")
    url = gone.url
    gone.stop()  # nothing listens on its port any more
    done = certs_cli(tmp_path, "rotate", "--secrets")
    assert (done.returncode, done.stderr) == (2, f"gpushare: error: cannot reach the API server {url}: "
                                                 "connection refused\n")


def test_inject_needs_exactly_one_bundle_source(tmp_path, cluster):
    done = certs_cli(tmp_path, "inject")
    assert done.returncode == 2 and "--ca-bundle FILE, --cert-dir DIR or --secrets" in done.stderr
    (tmp_path / "junk.pem").write_text("junk")
    done = certs_cli(tmp_path, "inject", "--ca-bundle", "junk.pem")
    assert done.returncode == 2 and "junk.pem: not a PEM CA bundle" in done.stderr
