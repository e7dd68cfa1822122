"""Certificate issue and rotation logic, the directory store, the reloading TLS context and the CLI."""

from __future__ import annotations

import datetime as dt
import ssl
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa

from certs.issue import issue_ca, issue_serving, write_atomic, write_pair
from certs.material import signed_by, subject_names
from certs.rotate import RotationRequest, rotate
from certs.store import DirectoryStore
from tests.support.helpers import gpushare_executable
from webhook.server.tls_reload import ReloadingContext
from webhook.settings import CertRotationSettings, CertSettings

# Both Services: the one every review reaches, and the one that selects the binding leader.
SERVICE_NAMES = [f"{svc}{suffix}" for svc in ("gpushare-webhook", "gpushare-webhook-bindings")
                 for suffix in ("", ".gpushare-system", ".gpushare-system.svc", ".gpushare-system.svc.cluster.local")]


def request(**kwargs) -> RotationRequest:
    certs = CertSettings(**kwargs.pop("certs", {}))
    return RotationRequest(certs.service_dns_names(), certs, CertRotationSettings(**kwargs.pop("rotation", {})),
                           **kwargs)


class Recording:
    """A directory store that records the order of saves and publications."""

    def __init__(self, directory: Path) -> None:
        self.inner = DirectoryStore(directory)
        self.events: list[str] = []

    def describe(self) -> str:
        return "recording"

    def load(self):
        return self.inner.load()

    def save_ca(self, ca, previous) -> None:
        self.events.append("save_ca")
        self.inner.save_ca(ca, previous)

    def save_bundle(self, bundle) -> None:
        self.inner.save_bundle(bundle)

    def save_serving(self, serving, bundle) -> None:
        self.events.append("save_serving")
        self.inner.save_serving(serving, bundle)

    def publish(self, bundle: bytes) -> None:
        self.events.append(f"publish:{len(x509.load_pem_x509_certificates(bundle))}")


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def test_issue_names_the_service_in_its_namespace_with_the_configured_key_and_lifetime(tmp_path):
    store = Recording(tmp_path)
    result = rotate(store, request(certs={"key_type": "rsa-2048", "cert_days": 30, "namespace": "gpushare-system"}),
                    store.publish)
    cert = result.serving.cert
    assert subject_names(cert) == set(SERVICE_NAMES)
    assert isinstance(result.serving.key, rsa.RSAPrivateKey) and result.serving.key.key_size == 2048
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 30
    assert store.events == ["save_ca", "publish:1", "save_serving"]
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600


def test_nothing_happens_before_the_renewal_point(tmp_path):
    store = Recording(tmp_path)
    first = rotate(store, request(), store.publish)
    again = rotate(store, request(), store.publish, now=now() + dt.timedelta(days=200))
    assert again.actions == [] and again.serving.cert.serial_number == first.serving.cert.serial_number


def test_serving_certificate_is_reissued_past_the_fraction_with_the_same_ca(tmp_path):
    store = Recording(tmp_path)
    first = rotate(store, request(), store.publish)
    later = now() + dt.timedelta(days=365 * 0.7)
    second = rotate(store, request(), store.publish, now=later)
    assert second.serving.cert.serial_number != first.serving.cert.serial_number
    assert "passed 67% of its lifetime" in second.actions[0]
    assert DirectoryStore(tmp_path).load().previous_ca is None  # the CA stayed


def test_ca_renewal_publishes_both_cas_before_the_new_serving_certificate(tmp_path):
    store = Recording(tmp_path)
    first = rotate(store, request(certs={"ca_days": 30}), store.publish)
    store.events.clear()
    second = rotate(store, request(certs={"ca_days": 30}), store.publish, now=now() + dt.timedelta(days=21))
    assert store.events == ["save_ca", "publish:2", "save_serving"]
    state = DirectoryStore(tmp_path).load()
    assert state.previous_ca.serial_number == signed_ca_serial(first)
    assert signed_by(second.serving.cert, state.ca.cert)
    # the serving certificate never outlives its CA
    assert second.serving.cert.not_valid_after_utc <= state.ca.cert.not_valid_after_utc


def signed_ca_serial(result) -> int:
    issuer_key = result.serving.cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ca = x509.load_pem_x509_certificates(result.bundle)[0]
    assert ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest == issuer_key.key_identifier
    return ca.serial_number


def test_previous_ca_leaves_the_bundle_after_the_overlap(tmp_path):
    store = Recording(tmp_path)
    rotate(store, request(), store.publish)
    rotate(store, request(force_ca=True), store.publish)
    within = rotate(store, request(), store.publish, now=now() + dt.timedelta(hours=23))
    assert len(x509.load_pem_x509_certificates(within.bundle)) == 2 and within.actions == []
    after = rotate(store, request(), store.publish, now=now() + dt.timedelta(hours=25))
    assert after.actions == ["dropped the previous CA from the bundle"]
    assert len(x509.load_pem_x509_certificates(after.bundle)) == 1
    assert not (tmp_path / "previous-ca.crt").exists()


def test_a_failed_injection_leaves_the_old_pair_serving_and_the_next_run_finishes(tmp_path):
    store = Recording(tmp_path)
    first = rotate(store, request(), store.publish)

    def refuse(bundle: bytes) -> None:
        raise RuntimeError("API server down")

    with pytest.raises(RuntimeError):
        rotate(store, request(force_ca=True), refuse)
    state = DirectoryStore(tmp_path).load()
    assert state.serving.cert.serial_number == first.serving.cert.serial_number  # still the trusted pair
    assert not signed_by(state.serving.cert, state.ca.cert)
    store.events.clear()
    done = rotate(store, request(), store.publish)
    assert store.events == ["publish:2", "save_serving"]
    assert "not signed by the current CA" in done.actions[0]


def test_changed_names_or_key_type_reissue(tmp_path):
    store = Recording(tmp_path)
    rotate(store, request(), store.publish)
    renamed = rotate(store, request(certs={"namespace": "gpu"}), store.publish)
    assert "lacks configured names" in renamed.actions[0]
    assert "gpushare-webhook.gpu.svc" in subject_names(renamed.serving.cert)
    rekeyed = rotate(store, request(certs={"namespace": "gpu", "key_type": "ecdsa-p384"}), store.publish)
    assert "configured ecdsa-p384" in rekeyed.actions[0]


def _pair(directory: Path, serial_hint: str) -> int:
    ca = issue_ca("test-ca", 10)
    serving = issue_serving(ca, ["localhost", serial_hint], 10)
    write_pair(directory, serving, "tls.crt", "tls.key")
    return serving.cert.serial_number


def test_reloading_context_keeps_the_old_certificate_while_a_pair_is_half_written(tmp_path):
    _pair(tmp_path, "a.example")
    paths = (str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    built: list[int] = []

    def factory() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*paths)
        built.append(1)
        return context

    reloader = ReloadingContext()
    first = reloader.get(paths, factory)
    assert reloader.get(paths, factory) is first and len(built) == 1  # cached, not rebuilt per connection
    other = tmp_path / "other"
    other.mkdir()
    _pair(other, "b.example")
    write_atomic(tmp_path / "tls.key", (other / "tls.key").read_bytes())  # new key, old certificate
    assert reloader.get(paths, factory) is first
    write_atomic(tmp_path / "tls.crt", (other / "tls.crt").read_bytes())
    renewed = reloader.get(paths, factory)
    assert renewed is not first and len(built) == 2


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([gpushare_executable(), "certs", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


@pytest.mark.processes
@pytest.mark.parametrize(("args", "message"), [
    ((), "--cert-dir DIR or --secrets"),
    (("--cert-dir", "d", "--secrets"), "--cert-dir DIR or --secrets"),
    (("--cert-dir", "d", "--key-type", "dsa"), "Invalid value for '--key-type'"),
])
def test_cli_usage_errors_exit_2(tmp_path, args, message):
    done = run_cli("rotate", *args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.processes
def test_cli_refuses_broken_material_with_the_file_name(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "tls.crt").write_text("not a certificate")
    (tmp_path / "d" / "tls.key").write_text("not a key")
    done = run_cli("rotate", "--cert-dir", "d", cwd=tmp_path)
    assert done.returncode == 2 and "d/tls.crt: not a PEM certificate and key" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.processes
def test_cli_issue_refuses_to_replace_a_ca_unless_asked(tmp_path):
    assert run_cli("issue", "--cert-dir", "d", cwd=tmp_path).returncode == 0
    ca = (tmp_path / "d" / "ca.crt").read_bytes()
    again = run_cli("issue", "--cert-dir", "d", cwd=tmp_path)
    assert again.returncode == 2 and "gpushare certs rotate" in again.stderr
    assert (tmp_path / "d" / "ca.crt").read_bytes() == ca
    assert run_cli("issue", "--cert-dir", "d", "--overwrite", cwd=tmp_path).returncode == 0
    assert (tmp_path / "d" / "ca.crt").read_bytes() != ca


@pytest.mark.processes
def test_rotate_keeps_the_extra_names_of_the_certificate_it_replaces(tmp_path):
    """The daily CronJob runs `certs rotate` without the `--san` given at issue: those names stay."""
    from tests.support.check_helpers import run_gpushare

    certs = tmp_path / "certs"
    issued = run_gpushare("certs", "issue", "--cert-dir", certs, "--san", "10.0.0.7", "--san", "webhook.example.com")
    assert issued.returncode == 0, issued.stderr
    before = subject_names(DirectoryStore(certs).load().serving.cert)
    assert {"10.0.0.7", "webhook.example.com"} <= before
    rotated = run_gpushare("certs", "rotate", "--cert-dir", certs, "--force")
    assert rotated.returncode == 0, rotated.stderr
    assert subject_names(DirectoryStore(certs).load().serving.cert) == before
