"""A CA and a serving certificate, issued with ``cryptography``.

Files follow the Kubernetes TLS secret names: ``ca.crt``, ``ca.key``, ``tls.crt``,
``tls.key``. Keys are written 0600 and files are replaced atomically, so a server reading
them never sees half a certificate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KeyType = str  # "ecdsa-p256" | "ecdsa-p384" | "rsa-2048" | "rsa-4096"
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
# Certificates are back-dated a little so that a skewed clock does not reject a fresh one.
_BACKDATE = dt.timedelta(minutes=5)


def new_key(key_type: KeyType) -> PrivateKey:
    if key_type == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "ecdsa-p384":
        return ec.generate_private_key(ec.SECP384R1())
    if key_type in ("rsa-2048", "rsa-4096"):
        return rsa.generate_private_key(public_exponent=65537, key_size=int(key_type.split("-")[1]))
    raise ValueError(f"unknown key type {key_type!r}; use ecdsa-p256, ecdsa-p384, rsa-2048 or rsa-4096")


@dataclass(frozen=True)
class Issued:
    cert: x509.Certificate
    key: PrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def issue_ca(common_name: str, days: float, key_type: KeyType = "ecdsa-p256") -> Issued:
    key = new_key(key_type)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def issue_serving(ca: Issued, dns_names: list[str], days: float, key_type: KeyType = "ecdsa-p256") -> Issued:
    """A server certificate signed by ``ca`` for the given DNS names and IP addresses."""
    if not dns_names:
        raise ValueError("a serving certificate needs at least one name")
    return _leaf(ca, dns_names[0], days, key_type, ExtendedKeyUsageOID.SERVER_AUTH, _san(dns_names))


def issue_client(ca: Issued, common_name: str, days: float, key_type: KeyType = "ecdsa-p256") -> Issued:
    """A TLS client certificate signed by ``ca``: subject CN ``common_name`` (what
    ``auth.client_names`` accepts), extended key usage clientAuth only, so it cannot serve."""
    if not common_name:
        raise ValueError("a client certificate needs a name")
    return _leaf(ca, common_name, days, key_type, ExtendedKeyUsageOID.CLIENT_AUTH)


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write a file by rename so readers see the old or the new content, never a mix."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_issued(cert_path: Path, key_path: Path) -> Issued:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError(f"{key_path}: unsupported key type {type(key).__name__}")
    return Issued(cert, key)


def write_pair(directory: Path, issued: Issued, cert_name: str, key_name: str) -> None:
    # Key first: a reader that sees the new certificate must also find its key.
    write_atomic(directory / key_name, issued.key_pem(), 0o600)
    write_atomic(directory / cert_name, issued.cert_pem(), 0o644)


def ensure_serving_certs(directory: Path, dns_names: list[str], *, ca_days: int = 3650,
                         cert_days: int = 365, key_type: KeyType = "ecdsa-p256") -> bool:
    """Create CA and serving certificate in ``directory`` unless tls.crt/tls.key exist.

    Returns True when new material was generated.
    """
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / TLS_CERT).exists() and (directory / TLS_KEY).exists():
        return False
    if (directory / CA_CERT).exists() and (directory / CA_KEY).exists():
        ca = load_issued(directory / CA_CERT, directory / CA_KEY)
    else:
        ca = issue_ca("gpushare-webhook-ca", ca_days, key_type)
        write_pair(directory, ca, CA_CERT, CA_KEY)
    write_pair(directory, issue_serving(ca, dns_names, cert_days, key_type), TLS_CERT, TLS_KEY)
    return True


def _leaf(ca: Issued, common_name: str, days: float, key_type: KeyType, usage: x509.ObjectIdentifier,
          names: x509.SubjectAlternativeName | None = None) -> Issued:
    """A certificate signed by ``ca`` for one extended key usage (server or client), not a CA."""
    key = new_key(key_type)
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True,
                                     content_commitment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if names is not None:
        builder = builder.add_extension(names, critical=False)
    builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
                                    critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)
