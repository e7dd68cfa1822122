"""Optional authentication (off by default): request guards installed by path.

- Client certificates: TLS asks for one (CERT_OPTIONAL, so kubelet probes and scrapes
  without one still connect) and verifies any presented against ``auth.client_ca_file``;
  the guard then requires a verified certificate, optionally with an accepted name, on
  ``auth.client_cert_paths`` (the admission endpoints).
- Bearer token: ``auth.bearer_paths`` (``/dry-run``, ``/explain``; the cluster deploy adds
  ``/metrics``) require ``Authorization: Bearer`` with the token in ``auth.bearer_token_file``,
  re-read when the file changes (Secret rotation).

A guard is a function of the request's WSGI environ that returns None to let the request
through or an error Response; ``guarded`` applies one to a single view, and ``denial`` applies the
configured ones by path: the "auth" step of the guard chain both pipelines run
(webhook.http.guards).
"""

from __future__ import annotations

import functools
import hmac
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from flask import Response, request

from webhook.http.errors import error_response
from webhook.settings import AuthSettings

log = logging.getLogger("gpushare.auth")
Environ = dict[str, Any]
Guard = Callable[[Environ], Response | None]
Guards = list[tuple[frozenset[str], Guard]]
View = TypeVar("View", bound=Callable[..., Any])


class AuthConfigError(ValueError):
    """A configured CA or token file cannot be used (refused at start)."""


class BearerToken:
    """The token in a file; re-read when the file's mtime or size changes.

    ``required`` (the default) refuses a missing or empty file at start. Without it the file may
    appear later (an optional Secret volume): until then ``matches`` is false for every token.
    """

    def __init__(self, path: Path, *, required: bool = True) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[float, int] | None = None
        self._token = b""
        self._problem = ""
        self._load()
        if not self._token:
            if required:
                raise AuthConfigError(f"{path}: bearer token file is empty or unreadable{self._problem}")
            log.warning("no bearer token yet in %s: the bearer paths refuse every request until one "
                        "appears", path)

    def _load(self) -> None:
        try:
            stat = os.stat(self.path)
            stamp = (stat.st_mtime, stat.st_size)
            if stamp == self._stamp:
                return
            token = self.path.read_bytes().strip()
        except OSError as exc:
            self._problem = f" ({exc.strerror})"
            if self._token:
                log.warning("keeping the previous bearer token: cannot read %s: %s", self.path, exc.strerror)
            return
        if token:
            self._token, self._stamp = token, stamp

    @property
    def present(self) -> bool:
        with self._lock:
            self._load()
            return bool(self._token)

    def matches(self, presented: bytes) -> bool:
        with self._lock:
            self._load()
            return bool(presented) and bool(self._token) and hmac.compare_digest(presented, self._token)


def bearer_guard(token: BearerToken) -> Guard:
    def guard(environ: Environ) -> Response | None:
        header = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            return _unauthorized("this endpoint needs an Authorization: Bearer <token> header")
        if not token.matches(credentials.strip().encode("utf-8", "replace")):
            if not token.present:
                return _unauthorized(f"no bearer token is configured yet: {token.path} is missing or empty "
                                     "(auth.bearer_token_file; in the cluster, the token Secret)")
            return _unauthorized("the bearer token is not valid")
        return None

    return guard


def _unauthorized(reason: str) -> Response:
    response = error_response(401, reason)
    response.headers["WWW-Authenticate"] = 'Bearer realm="gpushare-webhook"'
    return response


def certificate_names(cert: dict[str, Any]) -> set[str]:
    """Subject common names and DNS subject alternative names of a peer certificate."""
    names = {value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"}
    names |= {value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"}
    return names


def client_cert_guard(accepted_names: tuple[str, ...]) -> Guard:
    accepted = frozenset(accepted_names)

    def guard(environ: Environ) -> Response | None:
        sock = environ.get("gunicorn.socket")
        peer_cert = getattr(sock, "getpeercert", None)  # a TLS socket; a plain one has none
        cert = peer_cert() if callable(peer_cert) else None
        if not cert:
            return error_response(401, "a client certificate signed by the configured CA is required "
                                       "(auth.client_ca_file); none was presented")
        if accepted:
            names = certificate_names(cert)
            if not names & accepted:
                shown = ", ".join(sorted(names)) or "no name"
                return error_response(403, f"client certificate names {shown}; accepted: "
                                           f"{', '.join(sorted(accepted))} (auth.client_names)")
        return None

    return guard


def guarded(guard: Guard) -> Callable[[View], View]:
    """Decorate a view so that ``guard`` runs first."""

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            refused = guard(request.environ)
            return refused if refused is not None else view(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def configured_guards(auth: AuthSettings) -> Guards:
    """(paths, guard) for every configured mechanism; empty when authentication is off."""
    guards: Guards = []
    if auth.client_ca_file is not None:
        if not auth.client_ca_file.is_file():
            raise AuthConfigError(f"{auth.client_ca_file}: client CA file not found (auth.client_ca_file)")
        guards.append((frozenset(auth.client_cert_paths), client_cert_guard(auth.client_names)))
    if auth.bearer_token_file is not None:
        token = BearerToken(auth.bearer_token_file, required=not auth.bearer_token_optional)
        guards.append((frozenset(auth.bearer_paths), bearer_guard(token)))
    return guards


def denial(guards: Guards, path: str, environ: Environ) -> Response | None:
    """The first refusal of the guards for ``path`` (None: the request may go on)."""
    for paths, guard in guards:
        if path in paths:
            refused = guard(environ)
            if refused is not None:
                return refused
    return None

