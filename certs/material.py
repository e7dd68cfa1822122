"""What a certificate set is made of, and the questions rotation asks about it.

A set is the CA that signs (with its key), the serving certificate, and at most one
previous CA that clients must still trust for a while after a CA change. The CA bundle
handed to clients (the webhook configurations' ``caBundle``) is the current CA followed by
the previous one while it is still needed.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from .issue import Issued, PrivateKey


@dataclass(frozen=True)
class CertSet:
    ca: Issued | None
    serving: Issued | None
    previous_ca: x509.Certificate | None = None


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def load_certs(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem) if pem.strip() else []


def lifetime_fraction(cert: x509.Certificate, now: dt.datetime) -> float:
    """How much of the certificate's validity has passed: 0 at issue, 1 at expiry."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    total = (end - start).total_seconds()
    return 1.0 if total <= 0 else (now - start).total_seconds() / total


def is_due(cert: x509.Certificate, renew_after_fraction: float, now: dt.datetime) -> bool:
    return lifetime_fraction(cert, now) >= renew_after_fraction


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def subject_names(cert: x509.Certificate) -> set[str]:
    """DNS names and IP addresses of the certificate's SAN extension, as strings."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return set(sans.get_values_for_type(x509.DNSName)) | {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}


def normalised_names(names: list[str]) -> set[str]:
    out = set()
    for name in names:
        try:
            out.add(str(ipaddress.ip_address(name)))
        except ValueError:
            out.add(name)
    return out


def key_type_of(key: PrivateKey) -> str:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return {"secp256r1": "ecdsa-p256", "secp384r1": "ecdsa-p384"}.get(key.curve.name, key.curve.name)
    if isinstance(key, rsa.RSAPrivateKey):
        return f"rsa-{key.key_size}"
    return type(key).__name__


def previous_still_needed(certs: CertSet, overlap: dt.timedelta, now: dt.datetime) -> bool:
    """Keep the previous CA while servers may still present a certificate it signed.

    That is: until ``overlap`` after the current serving certificate was issued (mounted
    Secrets reach every pod within minutes), and never past the old CA's own expiry.
    """
    previous = certs.previous_ca
    if previous is None or now >= previous.not_valid_after_utc:
        return False
    if certs.serving is None or certs.ca is None or not signed_by(certs.serving.cert, certs.ca.cert):
        return True
    return now < certs.serving.cert.not_valid_before_utc + overlap


def bundle_pem(ca: x509.Certificate, previous: x509.Certificate | None) -> bytes:
    """The CA bundle clients trust: the current CA first, then the previous one."""
    return cert_pem(ca) + (cert_pem(previous) if previous is not None else b"")
