"""Certificate rotation against the real `gpushare serve` under load: no failed request."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509

from tests.support.helpers import admission_review, gpushare_executable, gpushare_server, load_json, wait_until

pytestmark = pytest.mark.processes

NAMES = ("--san", "localhost", "--san", "127.0.0.1")


def gpushare(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([gpushare_executable(), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def served_certificate(port: int, cafile: Path) -> x509.Certificate:
    """The certificate a brand-new TLS connection is given, verified against ``cafile``."""
    context = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def project_secret(secret_dir: Path, mounted: Path) -> None:
    """Do what the kubelet does for a Secret volume: a new timestamped directory, then one
    atomic swap of the ``..data`` symlink that the visible file names point through."""
    version = mounted / f"..{uuid.uuid4().hex}"
    version.mkdir(parents=True)
    for visible, source in (("tls.crt", "tls.crt"), ("tls.key", "tls.key"), ("ca.crt", "ca-bundle.crt")):
        shutil.copyfile(secret_dir / source, version / visible)
    staging = mounted / "..data_tmp"
    os.symlink(version.name, staging)
    os.replace(staging, mounted / "..data")
    for visible in ("tls.crt", "tls.key", "ca.crt"):
        if not (mounted / visible).is_symlink():
            os.symlink(f"..data/{visible}", mounted / visible)


@dataclass
class Traffic:
    """Clients posting real AdmissionReviews until stopped; every failure is kept."""

    port: int
    bundle: Path
    body: bytes
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    per_connection: dict[str, list[int]] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)

    def _connect(self) -> http.client.HTTPSConnection:
        # The trust store is read now, as a client picks up an injected caBundle for new connections.
        context = ssl.create_default_context(cafile=str(self.bundle))
        return http.client.HTTPSConnection("localhost", self.port, context=context, timeout=15)

    def _post(self, conn: http.client.HTTPSConnection) -> None:
        conn.request("POST", "/validate", self.body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        payload = reply.read()
        if reply.status != 200 or json.loads(payload)["response"]["allowed"] is not True:
            raise AssertionError(f"HTTP {reply.status}: {payload[:200]!r}")

    def _record(self, name: str, error: Exception | None) -> None:
        with self.lock:
            if error is None:
                self.ok += 1
                self.per_connection[name].append(self.ok)
            else:
                self.failures.append(f"{name}: {error!r}")

    def keep_alive_client(self, name: str) -> None:
        """One connection for the whole test: its TLS session outlives the rotation."""
        self.per_connection[name] = []
        conn = self._connect()
        try:
            while not self.stop.is_set():
                try:
                    self._post(conn)
                    self._record(name, None)
                except Exception as exc:
                    self._record(name, exc)
                    return
        finally:
            conn.close()

    def reconnecting_client(self, name: str, requests_per_connection: int) -> None:
        """New TLS handshakes all through the rotation, each on a keep-alive connection."""
        self.per_connection[name] = []
        while not self.stop.is_set():
            conn = self._connect()
            try:
                for _ in range(requests_per_connection):
                    self._post(conn)
                    self._record(name, None)
            except Exception as exc:
                self._record(name, exc)
            finally:
                conn.close()

    def start(self, keep_alive: int, reconnecting: int) -> None:
        for i in range(keep_alive):
            self.threads.append(threading.Thread(target=self.keep_alive_client, args=(f"keepalive-{i}",)))
        for i in range(reconnecting):
            self.threads.append(threading.Thread(target=self.reconnecting_client, args=(f"reconnect-{i}", 3)))
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def count(self) -> int:
        with self.lock:
            return self.ok


def _review_body() -> bytes:
    return json.dumps(admission_review(load_json("pod-realistic.json"), namespace="ml-serving")).encode()


def test_ca_rotation_through_a_secret_volume_fails_no_request(tmp_path):
    secret_dir = tmp_path / "secret"  # what the certificate job writes (the Secret)
    mounted = tmp_path / "certs"  # what the server reads (the Secret volume)
    gpushare("certs", "issue", "--cert-dir", str(secret_dir), *NAMES)
    project_secret(secret_dir, mounted)
    old_serial = serial_of(secret_dir / "tls.crt")
    with gpushare_server(tmp_path) as server:
        port = int(server.url.rsplit(":", 1)[1])
        traffic = Traffic(port, secret_dir / "ca-bundle.crt", _review_body())
        traffic.start(keep_alive=3, reconnecting=2)
        try:
            wait_until(lambda: traffic.count() >= 60, what="traffic before the rotation")
            done = gpushare("certs", "rotate", "--cert-dir", str(secret_dir), "--force-ca", *NAMES)
            assert "renewed the CA" in done.stdout
            new_serial = serial_of(secret_dir / "tls.crt")
            assert new_serial != old_serial
            # The bundle clients trust now holds both CAs, so the switch below cannot break them.
            assert len(x509.load_pem_x509_certificates((secret_dir / "ca-bundle.crt").read_bytes())) == 2
            project_secret(secret_dir, mounted)
            switched_at = traffic.count()
            wait_until(lambda: served_certificate(port, secret_dir / "ca.crt").serial_number == new_serial,
                       what="the new certificate served on new connections")
            wait_until(lambda: traffic.count() >= switched_at + 60, what="traffic after the rotation")
        finally:
            traffic.finish()
        assert traffic.failures == []
        # Every keep-alive connection carried requests before and after the switch.
        for name, marks in traffic.per_connection.items():
            if name.startswith("keepalive"):
                assert marks[0] < switched_at < marks[-1], name
        # Served afterwards: the certificate signed by the new CA, trusted by the new CA alone.
        served = served_certificate(port, secret_dir / "ca.crt")
        assert served.serial_number == new_serial
        assert served.issuer == x509.load_pem_x509_certificate((secret_dir / "ca.crt").read_bytes()).subject
        assert "loaded a renewed serving certificate" in server.log()


def test_rotation_in_place_is_picked_up_without_restart(tmp_path):
    """`certs rotate` on the directory the server reads: a half-written pair never breaks it."""
    cert_dir = tmp_path / "certs"
    gpushare("certs", "issue", "--cert-dir", str(cert_dir), *NAMES)
    with gpushare_server(tmp_path) as server:
        port = int(server.url.rsplit(":", 1)[1])
        pid = server.process.pid
        traffic = Traffic(port, cert_dir / "ca-bundle.crt", _review_body())
        traffic.start(keep_alive=2, reconnecting=0)
        try:
            wait_until(lambda: traffic.count() >= 30, what="traffic before the rotation")
            for _ in range(3):  # several renewals in a row, each picked up
                gpushare("certs", "rotate", "--cert-dir", str(cert_dir), "--force", *NAMES)
                serial = serial_of(cert_dir / "tls.crt")
                wait_until(lambda s=serial: served_certificate(port, cert_dir / "ca.crt").serial_number == s,
                           what="the renewed certificate served")
            at = traffic.count()
            wait_until(lambda: traffic.count() >= at + 30, what="traffic after the rotations")
        finally:
            traffic.finish()
        assert traffic.failures == []
        assert server.process.pid == pid and server.process.poll() is None
