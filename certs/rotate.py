"""Issue or renew a certificate set without ever presenting a certificate clients do not trust.

The order is the whole point:

1. a CA that is missing or past its renewal point is replaced; the old CA is kept as
   ``previous`` and the new CA is saved before anything else (a crash cannot lose it);
2. the bundle (new CA + previous CA) is published: written beside the files and injected into
   the webhook configurations, so the API server trusts both;
3. only then is a serving certificate signed by the new CA written, and servers reload it.

The previous CA leaves the bundle on a later run, ``ca_overlap`` after the switch. Every
run publishes the bundle, so a run that failed half-way is completed by the next one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from policies.settings import CertRotationSettings, CertSettings

from .issue import Issued, issue_ca, issue_serving
from .material import (
    bundle_pem,
    is_due,
    key_type_of,
    normalised_names,
    previous_still_needed,
    signed_by,
    subject_names,
)
from .store import CertStore

CA_COMMON_NAME = "gpushare-webhook-ca"
Publish = Callable[[bytes], None]


@dataclass(frozen=True)
class RotationRequest:
    dns_names: list[str]
    certs: CertSettings
    rotation: CertRotationSettings
    force_serving: bool = False
    force_ca: bool = False
    # Keep the names of the certificate being replaced (extra SANs given once at issue, e.g.
    # `--san` for a node IP): the daily rotation runs without them and must not drop them.
    keep_names: bool = True


def wanted_names(request: RotationRequest, serving: Issued | None) -> list[str]:
    """The configured names, then any the current certificate carries beyond them."""
    names = list(request.dns_names)
    if request.keep_names and serving is not None:
        configured = normalised_names(names)
        names += sorted(subject_names(serving.cert) - configured)
    return names


@dataclass
class RotationResult:
    actions: list[str] = field(default_factory=list)
    bundle: bytes = b""
    serving: Issued | None = None

    @property
    def changed(self) -> bool:
        return bool(self.actions)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def serving_problem(serving: Issued | None, ca: Issued, request: RotationRequest, now: dt.datetime) -> str | None:
    """Why the serving certificate must be reissued, or None when it is fine."""
    if serving is None:
        return "no serving certificate yet"
    if request.force_serving or request.force_ca:
        return "renewal forced"
    if not signed_by(serving.cert, ca.cert):
        return "the serving certificate is not signed by the current CA"
    if is_due(serving.cert, request.rotation.renew_after_fraction, now):
        return f"the serving certificate passed {request.rotation.renew_after_fraction:.0%} of its lifetime"
    if not normalised_names(request.dns_names) <= subject_names(serving.cert):
        return "the serving certificate lacks configured names"
    if key_type_of(serving.key) != request.certs.key_type:
        return f"the serving key is {key_type_of(serving.key)}, configured {request.certs.key_type}"
    return None


def rotate(store: CertStore, request: RotationRequest, publish: Publish,
           now: dt.datetime | None = None) -> RotationResult:
    """Bring the stored set up to date (see the module doc for the order) and publish its bundle."""
    now = now or _now()
    result = RotationResult()
    current = store.load()
    ca, previous = current.ca, current.previous_ca
    cfg = request.certs
    if ca is None or request.force_ca or is_due(ca.cert, request.rotation.renew_after_fraction, now):
        result.actions.append("issued a new CA" if ca is None else "renewed the CA; the old one stays trusted")
        previous = ca.cert if ca is not None else None
        ca = issue_ca(CA_COMMON_NAME, cfg.ca_days, cfg.key_type)
        store.save_ca(ca, previous)
    why = serving_problem(current.serving, ca, request, now)
    if why is None and previous is not None:
        overlap = dt.timedelta(hours=request.rotation.ca_overlap_hours)
        if not previous_still_needed(current, overlap, now):
            result.actions.append("dropped the previous CA from the bundle")
            previous = None
            store.save_ca(ca, None)
    result.bundle = bundle_pem(ca.cert, previous)
    store.save_bundle(result.bundle)
    publish(result.bundle)  # clients trust the signing CA before any server presents its certificate
    if why is not None:
        # The serving certificate never outlives the CA that signed it.
        remaining_days = (ca.cert.not_valid_after_utc - now).total_seconds() / 86400
        names = wanted_names(request, current.serving)
        result.serving = issue_serving(ca, names, min(cfg.cert_days, remaining_days), cfg.key_type)
        store.save_serving(result.serving, result.bundle)
        result.actions.append(f"issued a serving certificate ({why})")
    else:
        result.serving = current.serving
    return result
