"""A small Kubernetes API server for tests: objects over the real REST paths and semantics.

It speaks what ``certs`` and ``inspect`` use, honestly: paged lists (``limit`` and
``continue``, a list ``resourceVersion``), GET of one object, POST create (409 when it
exists), PUT replace with optimistic concurrency (409 on a stale ``resourceVersion``),
PATCH with JSON patch (a failed ``test`` operation is a 422, as kube-apiserver answers) or
merge patch, and ``Status`` objects for errors. Every object gets a ``resourceVersion`` from
one counter and a ``uid``. No watch: the live-state fake server covers that protocol.
Binds 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import jsonpatch

KINDS = {
    "nodes": ("v1", "Node", False),
    "pods": ("v1", "Pod", True),
    "secrets": ("v1", "Secret", True),
    "namespaces": ("v1", "Namespace", False),
    "mutatingwebhookconfigurations": ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", False),
    "validatingwebhookconfigurations": ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", False),
}
_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
                   r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[^/]+)(?:/(?P<name>[^/]+))?$")


@dataclass
class Seen:
    method: str
    path: str
    content_type: str
    body: Any


@dataclass
class ObjectStore:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    version: int = 100
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[Seen] = field(default_factory=list)
    # Called (under the lock) before a PATCH is applied: lets a test change the object
    # between a client's read and its patch, as a concurrent writer would.
    before_patch: Callable[[dict[str, Any]], None] | None = None

    def next_version(self) -> str:
        self.version += 1
        return str(self.version)

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Add or replace an object directly (test setup)."""
        obj = copy.deepcopy(obj)
        resource = next(r for r, (_, kind, _) in KINDS.items() if kind == obj["kind"])
        meta = obj.setdefault("metadata", {})
        namespaced = KINDS[resource][2]
        if namespaced:
            meta.setdefault("namespace", "default")
        with self.lock:
            meta["resourceVersion"] = self.next_version()
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            self.objects[(resource, meta.get("namespace", "") if namespaced else "", meta["name"])] = obj
        return obj

    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self.lock:
            found = self.objects.get((resource, namespace, name))
            return copy.deepcopy(found) if found else None


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class _Handler(BaseHTTPRequestHandler):
    store: ObjectStore
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def _route(self) -> tuple[str, str, str | None, dict[str, list[str]]] | None:
        url = urlparse(self.path)
        match = _PATH.match(url.path)
        if not match or match["resource"] not in KINDS:
            self._send(404, _status(404, "NotFound", f"the server could not find the requested resource {url.path}"))
            return None
        return match["resource"], match["ns"] or "", match["name"], parse_qs(url.query)

    def _record(self, body: Any) -> None:
        with self.store.lock:
            self.store.requests.append(Seen(self.command, self.path, self.headers.get("Content-Type", ""), body))

    def _accept(self, with_body: bool) -> tuple[Any, tuple[str, str, str | None, dict[str, list[str]]] | None]:
        """Read the body (writes), record the request, and route it (None: a 404 went out)."""
        body = self._body() if with_body else None
        self._record(body)
        return body, self._route()

    def _not_found(self, resource: str, name: str | None) -> None:
        self._send(404, _status(404, "NotFound", f'{resource} "{name}" not found'))

    def do_GET(self) -> None:
        _, route = self._accept(with_body=False)
        if route is None:
            return
        resource, ns, name, query = route
        if name is not None:
            found = self.store.get(resource, name, ns)
            if found is None:
                self._not_found(resource, name)
            else:
                self._send(200, found)
            return
        self._list(resource, ns, query)

    def _list(self, resource: str, ns: str, query: dict[str, list[str]]) -> None:
        api_version, kind, _ = KINDS[resource]
        with self.store.lock:
            keys = sorted(k for k in self.store.objects if k[0] == resource and (not ns or k[1] == ns))
            items = [copy.deepcopy(self.store.objects[k]) for k in keys]
            list_version = str(self.store.version)
        start = 0
        token = query.get("continue", [""])[0]
        if token:
            start = int(base64.urlsafe_b64decode(token.encode()).decode())
        limit = int(query.get("limit", ["0"])[0] or 0)
        end = start + limit if limit else len(items)
        meta: dict[str, Any] = {"resourceVersion": list_version}
        if end < len(items):
            meta["continue"] = base64.urlsafe_b64encode(str(end).encode()).decode()
            meta["remainingItemCount"] = len(items) - end
        self._send(200, {"kind": f"{kind}List", "apiVersion": api_version, "metadata": meta,
                         "items": items[start:end]})

    def do_POST(self) -> None:
        body, route = self._accept(with_body=True)
        if route is None:
            return
        resource, ns, _, _ = route
        name = (body.get("metadata") or {}).get("name", "")
        if self.store.get(resource, name, ns) is not None:
            self._send(409, _status(409, "AlreadyExists", f'{resource} "{name}" already exists'))
            return
        body.setdefault("metadata", {}).pop("resourceVersion", None)
        body["apiVersion"], body["kind"] = KINDS[resource][:2]  # the path decides, as on a real server
        if ns:
            body["metadata"]["namespace"] = ns
        self._send(201, self.store.put(body))

    def do_PUT(self) -> None:
        body, route = self._accept(with_body=True)
        if route is None:
            return
        resource, ns, name, _ = route
        current = self.store.get(resource, name or "", ns)
        if current is None:
            self._not_found(resource, name)
            return
        sent = (body.get("metadata") or {}).get("resourceVersion")
        if sent and sent != current["metadata"]["resourceVersion"]:
            self._send(409, _status(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": '
                                    "the object has been modified; please apply your changes to the latest version"))
            return
        body["metadata"]["uid"] = current["metadata"]["uid"]
        body["apiVersion"], body["kind"] = KINDS[resource][:2]
        self._send(200, self.store.put(body))

    def do_PATCH(self) -> None:
        body, route = self._accept(with_body=True)
        if route is None:
            return
        resource, ns, name, _ = route
        content_type = self.headers.get("Content-Type", "")
        with self.store.lock:
            current = self.store.objects.get((resource, ns, name or ""))
            if current is not None and self.store.before_patch is not None:
                hook, self.store.before_patch = self.store.before_patch, None
                hook(current)
                current["metadata"]["resourceVersion"] = self.store.next_version()
            current = copy.deepcopy(current)
        if current is None:
            self._not_found(resource, name)
            return
        try:
            if content_type.startswith("application/json-patch+json"):
                patched = jsonpatch.apply_patch(current, body)
            elif content_type.startswith("application/merge-patch+json"):
                patched = _merge(current, body)
            else:
                self._send(415, _status(415, "UnsupportedMediaType", f"unsupported patch type {content_type}"))
                return
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            self._send(422, _status(422, "Invalid", f"the server rejected our request: {exc}"))
            return
        self._send(200, self.store.put(patched))


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


@dataclass
class RunningApiServer:
    url: str
    store: ObjectStore

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {"token": "test-token"}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        }))
        return path


@contextmanager
def object_apiserver() -> Iterator[RunningApiServer]:
    store = ObjectStore()
    handler = type("Handler", (_Handler,), {"store": store})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield RunningApiServer(f"http://127.0.0.1:{server.server_address[1]}", store)
    finally:
        server.shutdown()
        server.server_close()
