"""Certificate expiry on /metrics: the serving certificate's and the CA's notAfter.

The files are the ones the server serves (``tls.crt``, and ``ca.crt`` next to it, the Kubernetes
TLS Secret names); they are parsed again only when they change on disk (a Secret volume swaps a
symlink, ``gpushare certs rotate`` renames a file), so a scrape reads two ``stat`` results.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

SERVING, CA = "serving", "ca"
FILES = {SERVING: "tls.crt", CA: "ca.crt"}


def not_after(pem: bytes, role: str) -> float | None:
    """Unix time a certificate file stops being valid: the leaf (first certificate) for the serving
    file; for a CA bundle the latest of its certificates, since while a rotation overlaps two CAs the
    older one expiring breaks nothing (docs/metrics.md)."""
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError:
        return None
    if not certificates:
        return None
    if role == SERVING:
        return certificates[0].not_valid_after_utc.timestamp()
    return max(c.not_valid_after_utc.timestamp() for c in certificates)


class CertificateCollector(Collector):
    """``gpushare_certificate_not_after_timestamp_seconds{certificate="serving"|"ca"}``."""

    def __init__(self, cert_dir: Path) -> None:
        self._cert_dir = cert_dir
        self._seen: dict[str, tuple[tuple[int, int, int], float | None]] = {}

    def _read(self, role: str) -> float | None:
        path = self._cert_dir / FILES[role]
        try:
            stat = os.stat(path)
        except OSError:
            return None
        signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        cached = self._seen.get(role)
        if cached is not None and cached[0] == signature:
            return cached[1]
        try:
            value = not_after(path.read_bytes(), role)
        except OSError:
            return None
        self._seen[role] = (signature, value)
        return value

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("gpushare_certificate_not_after_timestamp_seconds",
                                   "Unix time the certificate expires (notAfter): the serving certificate, "
                                   "and the latest CA in ca.crt.", labels=["certificate"])
        for role in (SERVING, CA):
            value = self._read(role)
            if value is not None:
                family.add_metric([role], value)
        yield family

    def describe(self) -> Iterable[Metric]:
        return []
