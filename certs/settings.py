"""The certificates' settings: what ``gpushare certs`` issues, where it keeps it, when it rotates.

``certs`` owns them so that it depends on neither the domain nor the edge; the edge's settings
object composes them (``webhook.settings.Settings.certs`` and ``.cert_rotation``)."""

# Annotations stay objects (no ``from __future__ import annotations``): pydantic reads each field's
# type as it is instead of evaluating its text when the class is made, which `gpushare check` pays at
# every start.
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class CertSettings(_Section):
    service_name: str = "gpushare-webhook"
    namespace: str = "gpushare-system"
    extra_sans: tuple[str, ...] = ()
    key_type: Literal["ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-4096"] = "ecdsa-p256"
    ca_days: int = Field(3650, ge=1)
    cert_days: int = Field(365, ge=1)

    # Services that reach the same pods under other names: the bindings Service selects the
    # leader alone (docs/operations.md, "Replicas and the leader"); the certificate names it too.
    other_services: tuple[str, ...] = ("gpushare-webhook-bindings",)

    def service_dns_names(self) -> list[str]:
        ns = self.namespace
        return [name for svc in (self.service_name, *self.other_services)
                for name in (svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local")]


class CertRotationSettings(_Section):
    """When ``gpushare certs rotate`` reissues, and where the CA bundle and key material live."""

    # Reissue a certificate once this fraction of its lifetime has passed (CA and serving alike).
    renew_after_fraction: float = Field(2 / 3, gt=0, lt=1)
    # After a CA change the old CA stays in the injected bundle this long, so servers whose
    # Secret volume has not caught up yet are still trusted.
    ca_overlap_hours: float = Field(24.0, ge=0)
    # The webhook configurations ``certs inject`` patches (cluster-scoped objects).
    mutating_webhook: str = "gpushare-webhook"
    validating_webhook: str = "gpushare-webhook"
    # Secrets in ``certs.namespace``: the serving pair the Deployment mounts, and the CA
    # (with its key) that only the certificate job reads.
    tls_secret: str = "gpushare-webhook-tls"
    ca_secret: str = "gpushare-webhook-ca"
