"""Patch a CA bundle into Mutating/ValidatingWebhookConfigurations with the kubernetes client.

Each configuration is read, then patched with a JSON patch that first tests the
resourceVersion and the name of every webhook it touches: a concurrent edit (an operator,
``kubectl apply``, Helm) makes the patch fail instead of landing on the wrong entry, and the
read-patch cycle is retried.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

ATTEMPTS = 5


class InjectError(RuntimeError):
    """The bundle could not be injected (configuration missing, no permission, conflicts)."""


@dataclass(frozen=True)
class Injected:
    kind: str
    name: str
    webhooks: int
    changed: int


def bundle_patch(config: dict[str, Any], encoded: str) -> list[dict[str, Any]]:
    """JSON patch operations setting every webhook's caBundle, guarded by test operations."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion",
                                  "value": config["metadata"]["resourceVersion"]}]
    for index, webhook in enumerate(config.get("webhooks") or []):
        if (webhook.get("clientConfig") or {}).get("caBundle") == encoded:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook["name"]})
        ops.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": encoded})
    return ops


def _inject_one(kind: str, name: str, read: Callable[..., Any], patch: Callable[..., Any],
                encoded: str) -> Injected:
    for attempt in range(ATTEMPTS):
        try:
            config = json.loads(read(name, _preload_content=False).data)
        except ApiException as exc:
            raise InjectError(f"{kind} {name}: cannot read it: HTTP {exc.status} {exc.reason}") from None
        webhooks = config.get("webhooks") or []
        ops = bundle_patch(config, encoded)
        changed = sum(1 for op in ops if op["op"] == "add")
        if not changed:
            return Injected(kind, name, len(webhooks), 0)
        try:
            patch(name, ops, _preload_content=False, _content_type="application/json-patch+json")
            return Injected(kind, name, len(webhooks), changed)
        except ApiException as exc:
            # 409 Conflict or 422 (a failed test operation): someone changed it; read again.
            if exc.status in (409, 422) and attempt < ATTEMPTS - 1:
                continue
            raise InjectError(f"{kind} {name}: patch refused: HTTP {exc.status} {exc.reason}") from None
    raise InjectError(f"{kind} {name}: still changing after {ATTEMPTS} attempts")


def inject_ca_bundle(api_client: Any, bundle: bytes, *, mutating: str | None,
                     validating: str | None) -> list[Injected]:
    """Set ``clientConfig.caBundle`` on every webhook of the named configurations."""
    api = client.AdmissionregistrationV1Api(api_client)
    encoded = base64.b64encode(bundle).decode("ascii")
    done = []
    if mutating:
        done.append(_inject_one("MutatingWebhookConfiguration", mutating,
                                api.read_mutating_webhook_configuration,
                                api.patch_mutating_webhook_configuration, encoded))
    if validating:
        done.append(_inject_one("ValidatingWebhookConfiguration", validating,
                                api.read_validating_webhook_configuration,
                                api.patch_validating_webhook_configuration, encoded))
    return done
