"""Optional authentication: client certificates on the admission paths, a bearer token guard."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from flask import Flask

from certs.issue import Issued, issue_ca, new_key, write_pair
from tests.support.helpers import admission_review, gpushare_server, load_json
from webhook.http.auth import AuthConfigError, BearerToken, bearer_guard, configured_guards, guarded
from webhook.settings import AuthSettings

# Client certificates and the token, served by either gunicorn worker (server.worker).
pytestmark = [pytest.mark.both_workers, pytest.mark.processes]


def issue_client(ca: Issued, name: str) -> Issued:
    key = new_key("ecdsa-p256")
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca.key, hashes.SHA256()))
    return Issued(cert, key)


@pytest.fixture(scope="module")
def client_pki(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    ca, stranger_ca = issue_ca("api-server-clients", 1), issue_ca("someone-else", 1)
    write_pair(directory, ca, "client-ca.crt", "client-ca.key")
    write_pair(directory, issue_client(ca, "kube-apiserver"), "apiserver.crt", "apiserver.key")
    write_pair(directory, issue_client(ca, "intruder"), "intruder.crt", "intruder.key")
    write_pair(directory, issue_client(stranger_ca, "kube-apiserver"), "forged.crt", "forged.key")
    return directory


@pytest.fixture(scope="module")
def secured(tmp_path_factory, client_pki, worker_kind):
    token = client_pki / "token"
    token.write_text("s3cret-token\n")
    env = {"GPUSHARE_AUTH__CLIENT_CA_FILE": str(client_pki / "client-ca.crt"),
           "GPUSHARE_AUTH__CLIENT_NAMES": '["kube-apiserver"]',
           "GPUSHARE_AUTH__BEARER_TOKEN_FILE": str(token)}
    with gpushare_server(tmp_path_factory.mktemp("secured"), env=env, worker=worker_kind) as running:
        yield running


def _post(server, pki: Path, who: str | None, path: str = "/validate") -> requests.Response:
    session = server.session()
    if who:
        session.cert = (str(pki / f"{who}.crt"), str(pki / f"{who}.key"))
    return server.post_json(path, admission_review(load_json("pod-realistic.json")), session)


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_api_server_certificate_is_accepted(secured, client_pki, path):
    reply = _post(secured, client_pki, "apiserver", path)
    assert reply.status_code == 200 and reply.json()["response"]["allowed"] is True


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_missing_or_unaccepted_certificates_are_refused(secured, client_pki, path):
    missing = _post(secured, client_pki, None, path)
    assert missing.status_code == 401 and "client certificate" in missing.json()["error"]["reason"]
    intruder = _post(secured, client_pki, "intruder", path)
    assert intruder.status_code == 403
    assert "intruder" in intruder.json()["error"]["reason"] and "kube-apiserver" in intruder.json()["error"]["reason"]
    with pytest.raises(requests.exceptions.SSLError):  # signed by another CA: TLS itself refuses it
        _post(secured, client_pki, "forged", path)


def test_probes_and_scrapes_need_no_certificate(secured):
    session = secured.session()
    assert session.get(secured.url + "/healthz", timeout=5).status_code == 200
    assert session.get(secured.url + "/metrics", timeout=5).status_code == 200


def test_dry_run_path_requires_the_bearer_token(secured, client_pki):
    session = secured.session()
    url = secured.url + "/dry-run"
    assert session.post(url, data=b"{}", timeout=5).status_code == 401
    wrong = session.post(url, data=b"{}", headers={"Authorization": "Bearer nope"}, timeout=5)
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"].startswith("Bearer")
    # The right token passes the guard and reaches the dry-run itself.
    pod = b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}'
    right = session.post(url, data=pod, headers={"Authorization": "Bearer s3cret-token"}, timeout=5)
    assert right.status_code == 200 and right.json()["results"][0]["name"] == "p"


def test_bearer_guard_as_a_decorator_and_token_rotation(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("first")
    guard = bearer_guard(BearerToken(token_file))
    app = Flask("t")

    @app.post("/x")
    @guarded(guard)
    def view() -> str:
        return "ok"

    client = app.test_client()
    assert client.post("/x").status_code == 401
    assert client.post("/x", headers={"Authorization": "Bearer first"}).data == b"ok"
    token_file.write_text("second-token")  # a rotated Secret
    assert client.post("/x", headers={"Authorization": "Bearer first"}).status_code == 401
    assert client.post("/x", headers={"Authorization": "Bearer second-token"}).data == b"ok"


def test_unusable_auth_files_are_refused_at_start(tmp_path):
    with pytest.raises(AuthConfigError, match="not found"):
        configured_guards(AuthSettings(client_ca_file=tmp_path / "missing.crt"))
    (tmp_path / "empty").write_text("")
    with pytest.raises(AuthConfigError, match="empty"):
        configured_guards(AuthSettings(bearer_token_file=tmp_path / "empty"))
