"""Where a certificate set is kept: a directory (local runs, tests) or two Kubernetes Secrets.

Both keep the Kubernetes TLS names (``ca.crt``, ``tls.crt``, ``tls.key``) so a Secret
mounted into the webhook pod looks exactly like a directory written by ``certs issue``.
The CA key never sits beside the serving pair in the cluster: it lives in its own Secret
that only the certificate job may read.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Protocol

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from .issue import CA_CERT, CA_KEY, TLS_CERT, TLS_KEY, Issued, write_atomic
from .material import CertSet, cert_pem, load_certs

PREVIOUS_CA = "previous-ca.crt"
CA_BUNDLE = "ca-bundle.crt"


class CertStoreError(ValueError):
    """Stored material that cannot be used (unreadable, mismatched, missing the CA key)."""


class CertStore(Protocol):
    def describe(self) -> str: ...

    def load(self) -> CertSet: ...

    def save_ca(self, ca: Issued, previous: x509.Certificate | None) -> None: ...

    def save_bundle(self, bundle: bytes) -> None: ...

    def save_serving(self, serving: Issued, bundle: bytes) -> None: ...


def _issued(cert_pem_bytes: bytes | None, key_pem_bytes: bytes | None, where: str) -> Issued | None:
    if not cert_pem_bytes and not key_pem_bytes:
        return None
    if not cert_pem_bytes or not key_pem_bytes:
        raise CertStoreError(f"{where}: a certificate without its key (or a key without its certificate)")
    try:
        cert = x509.load_pem_x509_certificate(cert_pem_bytes)
        key = serialization.load_pem_private_key(key_pem_bytes, password=None)
    except ValueError as exc:
        raise CertStoreError(f"{where}: not a PEM certificate and key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertStoreError(f"{where}: unsupported key type {type(key).__name__}")
    return Issued(cert, key)


def _previous(pem: bytes | None, where: str) -> x509.Certificate | None:
    try:
        certs = load_certs(pem or b"")
    except ValueError as exc:
        raise CertStoreError(f"{where}: not a PEM certificate: {exc}") from None
    return certs[0] if certs else None


class DirectoryStore:
    """``ca.crt``/``ca.key``, ``tls.crt``/``tls.key``, ``previous-ca.crt`` and ``ca-bundle.crt``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def describe(self) -> str:
        return str(self.directory)

    def _read(self, name: str) -> bytes | None:
        path = self.directory / name
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CertStoreError(f"{path}: cannot read: {exc}") from None

    def load(self) -> CertSet:
        d = self.directory
        return CertSet(ca=_issued(self._read(CA_CERT), self._read(CA_KEY), f"{d}/{CA_CERT}"),
                       serving=_issued(self._read(TLS_CERT), self._read(TLS_KEY), f"{d}/{TLS_CERT}"),
                       previous_ca=_previous(self._read(PREVIOUS_CA), f"{d}/{PREVIOUS_CA}"))

    def save_ca(self, ca: Issued, previous: x509.Certificate | None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self.directory / CA_KEY, ca.key_pem(), 0o600)
        write_atomic(self.directory / CA_CERT, ca.cert_pem())
        if previous is not None:
            write_atomic(self.directory / PREVIOUS_CA, cert_pem(previous))
        else:
            (self.directory / PREVIOUS_CA).unlink(missing_ok=True)

    def save_bundle(self, bundle: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self.directory / CA_BUNDLE, bundle)

    def save_serving(self, serving: Issued, bundle: bytes) -> None:
        self.save_bundle(bundle)
        # Key first: a server that sees the new certificate must also find its key.
        write_atomic(self.directory / TLS_KEY, serving.key_pem(), 0o600)
        write_atomic(self.directory / TLS_CERT, serving.cert_pem())


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _text_values(data: dict[str, Any] | None) -> dict[str, str]:
    """A Secret's data as the API returns it: base64 text per key (the client types it loosely)."""
    return {key: value for key, value in (data or {}).items() if isinstance(value, str)}


def _resource_version(obj: Any) -> str | None:
    """An object's metadata.resourceVersion, or None when the API left it out."""
    metadata = getattr(obj, "metadata", None)
    version = getattr(metadata, "resource_version", None)
    return version if isinstance(version, str) else None


def _unb64(data: dict[str, str], key: str) -> bytes | None:
    value = data.get(key)
    return base64.b64decode(value) if value else None


class SecretStore:
    """Two Secrets in one namespace, read and written with the official kubernetes client.

    Writes carry the resourceVersion they read, so two rotation jobs racing cannot both win:
    the loser gets a 409 and exits non-zero, and its Job retries from a fresh read.
    """

    def __init__(self, api_client: Any, namespace: str, ca_secret: str, tls_secret: str) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self.namespace, self.ca_secret, self.tls_secret = namespace, ca_secret, tls_secret
        self._versions: dict[str, str | None] = {}

    def describe(self) -> str:
        return f"secrets {self.namespace}/{self.ca_secret} and {self.namespace}/{self.tls_secret}"

    def _get(self, name: str) -> dict[str, str]:
        from kubernetes.client.exceptions import ApiException

        try:
            secret = self._core.read_namespaced_secret(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                self._versions[name] = None
                return {}
            raise
        self._versions[name] = _resource_version(secret)
        return _text_values(secret.data)

    def load(self) -> CertSet:
        ca_data, tls_data = self._get(self.ca_secret), self._get(self.tls_secret)
        where = f"secret {self.namespace}/"
        return CertSet(
            ca=_issued(_unb64(ca_data, CA_CERT), _unb64(ca_data, CA_KEY), where + self.ca_secret),
            serving=_issued(_unb64(tls_data, TLS_CERT), _unb64(tls_data, TLS_KEY), where + self.tls_secret),
            previous_ca=_previous(_unb64(ca_data, PREVIOUS_CA), where + self.ca_secret),
        )

    def _put(self, name: str, secret_type: str, data: dict[str, bytes]) -> None:
        from kubernetes import client

        labels = {"app.kubernetes.io/name": "gpushare-webhook", "app.kubernetes.io/component": "certificates"}
        body = client.V1Secret(
            api_version="v1", kind="Secret",
            metadata=client.V1ObjectMeta(name=name, namespace=self.namespace, labels=labels,
                                         resource_version=self._versions.get(name)),
            type=secret_type, data={k: _b64(v) for k, v in data.items()})
        if self._versions.get(name) is None:
            written = self._core.create_namespaced_secret(self.namespace, body)
        else:
            written = self._core.replace_namespaced_secret(name, self.namespace, body)
        self._versions[name] = _resource_version(written)

    def save_ca(self, ca: Issued, previous: x509.Certificate | None) -> None:
        data = {CA_CERT: ca.cert_pem(), CA_KEY: ca.key_pem()}
        if previous is not None:
            data[PREVIOUS_CA] = cert_pem(previous)
        self._put(self.ca_secret, "Opaque", data)

    def save_bundle(self, bundle: bytes) -> None:
        """Refresh the bundle copy in the serving Secret (when it exists) without touching the pair."""
        data = self._get(self.tls_secret)
        if data and _unb64(data, CA_CERT) != bundle:
            self._put(self.tls_secret, "kubernetes.io/tls",
                      {**{k: base64.b64decode(v) for k, v in data.items()}, CA_CERT: bundle})

    def save_serving(self, serving: Issued, bundle: bytes) -> None:
        # A kubernetes.io/tls Secret may carry ca.crt: here it is the bundle clients should trust.
        self._put(self.tls_secret, "kubernetes.io/tls",
                  {TLS_CERT: serving.cert_pem(), TLS_KEY: serving.key_pem(), CA_CERT: bundle})


class FreshStore:
    """A store seen as empty: ``certs issue --overwrite`` starts over, saving through to ``inner``."""

    def __init__(self, inner: CertStore) -> None:
        self.inner = inner

    def describe(self) -> str:
        return self.inner.describe()

    def load(self) -> CertSet:
        return CertSet(ca=None, serving=None)

    def save_ca(self, ca: Issued, previous: x509.Certificate | None) -> None:
        self.inner.save_ca(ca, previous)

    def save_bundle(self, bundle: bytes) -> None:
        self.inner.save_bundle(bundle)

    def save_serving(self, serving: Issued, bundle: bytes) -> None:
        self.inner.save_serving(serving, bundle)


def read_secret_bundle(api_client: Any, namespace: str, tls_secret: str) -> tuple[bytes, str]:
    """The CA bundle kept in the serving Secret, and where it came from."""
    from kubernetes import client

    secret = client.CoreV1Api(api_client).read_namespaced_secret(tls_secret, namespace)
    source = f"secret {namespace}/{tls_secret}"
    bundle = _unb64(_text_values(secret.data), CA_CERT)
    if not bundle:
        raise CertStoreError(f"{source}: has no ca.crt; run `gpushare certs rotate --secrets` first")
    return bundle, source
