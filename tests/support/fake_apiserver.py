"""A small Kubernetes API server for tests and benchmarks: honest list/watch over HTTP(S).

It speaks what clients (the official ``kubernetes`` client, kubectl-like tools) rely on:

- any collection path: ``/api/v1/nodes``, ``/api/v1/pods``, ``/api/v1/namespaces/NS/pods``,
  ``/apis/GROUP/VERSION[/namespaces/NS]/RESOURCE``;
- **list**: ``{"kind": "<Kind>List", "metadata": {"resourceVersion"}, "items"}``; ``limit`` and
  ``continue`` paging, every page of one list at the first page's resourceVersion;
- **watch** (``watch=true``): a chunked stream of ``{"type", "object"}`` lines, one per event,
  from the given ``resourceVersion``; ``resourceVersion`` unset or "0" starts with synthetic
  ADDED events; ``allowWatchBookmarks`` gets BOOKMARK events; ``timeoutSeconds`` ends the
  stream cleanly;
- single objects: GET, POST (create; 409 AlreadyExists), PUT (409 Conflict when it names an
  older ``metadata.resourceVersion``, checked atomically), PATCH (merge, strategic-merge as
  merge, JSON patch), DELETE, each producing the watch events a real server would; lists take
  an equality ``labelSelector`` and an equality ``fieldSelector`` on dotted paths;
- custom resources as kube-apiserver serves them: a group that is not built in is served only
  once a test installs its CustomResourceDefinition (``install_crd``; anything else under
  ``/apis/<group>/...`` answers 404 NotFound, which is how a client learns the CRD is missing);
  created and replaced objects are pruned of the fields the CRD's schema does not name and
  validated against it (422 Invalid), by ``tests/support/crds.py``; ``pruned`` lists what was dropped;
- the node proxy to a kubelet's ``/configz`` (``GET /api/v1/nodes/NAME/proxy/configz``): the
  answer given with ``set_kubelet_configz``; a node without one answers as kube-apiserver does
  when it cannot dial the kubelet (503 ServiceUnavailable, "error trying to reach service: ...",
  k8s.io/apimachinery pkg/util/proxy/transport.go), an unknown node 404.

History, compaction and faults, as kube-apiserver behaves (Kubernetes documentation, "Kubernetes
API Concepts": "Efficient detection of changes", "Resource versions", "Retrieving large results
sets in chunks"; k8s.io/apiserver ``pkg/storage/cacher`` and ``pkg/storage/etcd3``):

- ``compact()`` is etcd's compaction: it raises the floor below which history is gone. A watch,
  or a page whose continue token, *starts* below it gets 410 Gone (a new list reads the current
  state and is never too old; "Servers are not required to serve all older
  resource versions and may return a HTTP 410 (Gone) status code if a client requests a
  resourceVersion older than the server has retained"): a watch as an ``ERROR`` event with a
  410 ``Expired`` Status in a 200 stream, which is what the watch cache answers ("once we have
  passed authn/authz/admission ... errors must fail with a watch event of type ERROR, rather than
  a directly returned error", ``cacher.go``; message "too old resource version: RV (OLDEST)",
  ``watch_cache.go``), or, with ``gone_as_http`` set, as an HTTP 410, which the page says a
  client must also tolerate. Compaction **never ends or thins an open watch**: kube-apiserver
  serves watches from its watch cache, whose window etcd's compaction does not touch, so an
  open watch keeps receiving every event after ``compact()`` (the history an open watch has
  not delivered yet is kept until it has).
- ``expire_watches()``: the server can no longer serve the open watches (an etcd watch that
  fell behind a compaction, ``etcd3/errors.go``: "The resourceVersion for the provided watch is
  too old."): each gets an ``ERROR`` event with a 410 ``Expired`` Status and its stream ends;
  it also compacts, so resuming from before the latest write is 410 too.
- continue tokens expire with compaction ("Like a watch operation, a continue token will
  expire after a short amount of time (by default 5 minutes) and return a 410 Gone"): a page
  asked for with a token from below the floor answers 410 ``Expired`` whose Status carries a
  fresh ``metadata.continue`` token for the rest of the list at the current state, with the
  message of ``etcd3/store.go`` (``compactedContinue``: "...or use the continue token in this
  response to retrieve the remainder of the results..."). ``compact_before_next_page()`` makes a
  compaction land between two pages of the next paged list the cluster has moved past.
- ``bookmark()`` and ``bookmark_interval``: BOOKMARK events ("an object of the type requested by
  the request, but only resourceVersion field is set"), only to watches that asked with
  ``allowWatchBookmarks``; their resourceVersion is the server's current one.
- ``drop_watches()`` cuts every open watch connection mid-stream, without the closing chunk;
  ``set_unavailable()`` answers 503 to everything and cuts the watches; ``fail_next(n, status)``
  answers the next requests with a Status of that code (500 ``InternalError``, 503
  ``ServiceUnavailable``, 403 ``Forbidden``), as the API server's ``responsewriters`` write a
  failed request's Status.

Other controls: ``add``/``update``/``delete`` objects; ``requests`` logs every request (with its
User-Agent). Binds 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import threading
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from operator import attrgetter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonpatch

from tests.support.crds import CustomResource, custom_resource, invalid, prune

CollectionKey = tuple[str, str]  # (api prefix "/api/v1" or "/apis/apps/v1", resource "pods")
ObjectKey = tuple[str, str]  # (namespace or "", name)


# API groups kube-apiserver serves itself; any other group exists only through a CRD.
BUILTIN_GROUPS = frozenset({
    "admissionregistration.k8s.io", "apiextensions.k8s.io", "apiregistration.k8s.io", "apps",
    "authentication.k8s.io", "authorization.k8s.io", "autoscaling", "batch", "certificates.k8s.io",
    "coordination.k8s.io", "discovery.k8s.io", "events.k8s.io", "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io", "networking.k8s.io", "node.k8s.io", "policy", "rbac.authorization.k8s.io",
    "resource.k8s.io", "scheduling.k8s.io", "storage.k8s.io", "storagemigration.k8s.io"})


def plural(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    return lower + "s"


def api_prefix(api_version: str) -> str:
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


@dataclass(slots=True)
class Stored:
    rv: int
    body: bytes


@dataclass(slots=True)
class Event:
    rv: int
    type: str
    key: ObjectKey
    body: bytes


@dataclass
class Collection:
    kind: str
    api_version: str
    objects: dict[ObjectKey, Stored] = field(default_factory=dict)
    history: list[Event] = field(default_factory=list)
    _sorted: list[ObjectKey] | None = None  # the keys in list order, until the next create or delete

    def sorted_keys(self) -> list[ObjectKey]:
        if self._sorted is None or len(self._sorted) != len(self.objects):
            self._sorted = sorted(self.objects)
        return self._sorted

    def forget_order(self) -> None:
        self._sorted = None


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    user_agent: str = ""


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, metadata: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.metadata = metadata or {}

    def status(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": self.metadata, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


def _continue_token(list_rv: int, after: tuple[str, ...] | ObjectKey) -> str:
    return base64.urlsafe_b64encode(_dumps({"rv": list_rv, "start": list(after)})).decode()


class _Watch:
    """One open watch connection, as the controls see it."""

    def __init__(self, handler: BaseHTTPRequestHandler, key: CollectionKey) -> None:
        self.handler = handler
        self.key = key
        self.delivered = 0  # the resourceVersion up to which this watch has taken the history's events
        self.expire = False
        self.bookmark = False
        self.dropped = False


_RV = attrgetter("rv")
_INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list.")


class FakeApiServer:
    def __init__(self, *, tls: tuple[Path, Path] | None = None, bookmark_interval: float | None = None,
                 gone_as_http: bool = False, token: str | None = None) -> None:
        self._lock = threading.Condition()
        self._rv = 1000
        self._floor = 0  # watches and continue tokens below this resourceVersion are gone (410)
        self._collections: dict[CollectionKey, Collection] = {}
        self._watches: set[_Watch] = set()
        self._fail: list[tuple[int, int, str]] = []  # [(remaining, status, path prefix)]
        self._compact_before_page: list[str] = []  # path prefixes: compact before the next continued page
        self._unavailable = False
        self.bookmark_interval = bookmark_interval
        self.gone_as_http = gone_as_http
        self.token = token
        self.requests: list[Request] = []
        # 410s answered, by form: "watch-event" (ERROR in a stream: a start below the floor or an
        # expired watch), "watch-http" (HTTP 410 on a watch start), "continue" (a page's expired token)
        self.gone: Counter[str] = Counter()
        self._kubelets: dict[str, bytes] = {}  # node name -> what its kubelet's /configz answers
        self._custom: dict[CollectionKey, CustomResource] = {}  # installed CRDs, by collection
        self.pruned: list[str] = []  # "<Kind> <ns>/<name>: <field path>" dropped from custom objects
        self._tls = tls
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, port: int = 0) -> FakeApiServer:
        server = _QuietServer(("127.0.0.1", port), _handler_for(self))
        if self._tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(self._tls[0]), str(self._tls[1]))
            # The handshake happens in the connection's own thread, not in the accept loop.
            server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="fake-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self.drop_watches()
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path, ca_file: Path | None = None) -> Path:
        """Write a kubeconfig that points at this server."""
        cluster: dict[str, Any] = {"server": self.url}
        if ca_file is not None:
            cluster["certificate-authority"] = str(ca_file)
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": cluster}],
            "users": [{"name": "fake", "user": user}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        return path

    # -- store -----------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def _collection(self, key: CollectionKey, kind: str = "", api_version: str = "") -> Collection:
        found = self._collections.get(key)
        if found is None:
            found = self._collections[key] = Collection(kind, api_version)
        elif kind and not found.kind:
            found.kind, found.api_version = kind, api_version
        return found

    @staticmethod
    def _address(obj: dict[str, Any], resource: str | None = None) -> tuple[CollectionKey, ObjectKey]:
        meta = obj.get("metadata") or {}
        key = (api_prefix(obj.get("apiVersion", "v1")), resource or plural(obj["kind"]))
        return key, (meta.get("namespace") or "", meta["name"])

    def _put(self, key: CollectionKey, okey: ObjectKey, obj: dict[str, Any], event: str | None) -> dict[str, Any]:
        """Store ``obj`` with a new resourceVersion; record the event. Caller holds the lock."""
        self._rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        collection = self._collection(key, obj.get("kind", ""), obj.get("apiVersion", ""))
        body = _dumps(obj)
        if event == "DELETED":
            collection.objects.pop(okey, None)
            collection.forget_order()
        else:
            if okey not in collection.objects:
                collection.forget_order()
            collection.objects[okey] = Stored(self._rv, body)
        if event is not None:
            collection.history.append(Event(self._rv, event, okey, body))
        self._lock.notify_all()
        return obj

    def add(self, *objects: dict[str, Any], resource: str | None = None, history: bool = True) -> None:
        """Create or replace objects, as ADDED/MODIFIED events (``history=False``: a preloaded
        state without events; watches from before it get 410)."""
        with self._lock:
            for obj in objects:
                key, okey = self._address(obj, resource)
                exists = okey in self._collection(key).objects
                self._put(key, okey, json.loads(_dumps(obj)), ("MODIFIED" if exists else "ADDED") if history else None)
            if not history:
                self._floor = self._rv

    update = add

    def add_raw(self, key: CollectionKey, kind: str, api_version: str,
                items: Iterable[tuple[ObjectKey, bytes]]) -> None:
        """Preload serialised objects (no events): the fast path for benchmarks. Each body must
        already carry metadata.resourceVersion; the server's version moves past them."""
        with self._lock:
            collection = self._collection(key, kind, api_version)
            for okey, body in items:
                self._rv += 1
                collection.objects[okey] = Stored(self._rv, body)
            self._floor = self._rv

    def emit_raw(self, key: CollectionKey, kind: str, api_version: str, event: str,
                 items: Iterable[tuple[ObjectKey, bytes]]) -> None:
        """Record serialised objects as watch events (benchmarks: state delivered by the watch)."""
        with self._lock:
            collection = self._collection(key, kind, api_version)
            for okey, body in items:
                self._rv += 1
                collection.objects[okey] = Stored(self._rv, body)
                collection.history.append(Event(self._rv, event, okey, body))
            self._lock.notify_all()

    def delete(self, obj: dict[str, Any], resource: str | None = None) -> None:
        with self._lock:
            key, okey = self._address(obj, resource)
            stored = self._collection(key).objects.get(okey)
            if stored is None:
                raise KeyError(okey)
            self._put(key, okey, json.loads(stored.body), "DELETED")

    def get(self, obj_or_path: dict[str, Any] | str) -> dict[str, Any] | None:
        with self._lock:
            if isinstance(obj_or_path, str):
                key, okey, _ = _route(obj_or_path)
                assert okey is not None
            else:
                key, okey = self._address(obj_or_path)
            stored = self._collection(key).objects.get(okey)
            return json.loads(stored.body) if stored is not None else None

    # -- custom resources ----------------------------------------------------------------------
    def install_crd(self, *crds: dict[str, Any]) -> None:
        """Serve the resources of these CustomResourceDefinitions (parsed YAML)."""
        with self._lock:
            for crd in crds:
                resource = custom_resource(crd)
                key = (resource.prefix, resource.plural)
                self._custom[key] = resource
                self._collection(key, resource.kind, f"{resource.group}/{resource.version}")

    def _served(self, key: CollectionKey, namespaced_path: bool) -> CustomResource | None:
        """The CRD behind a collection of a group that is not built in; 404 when none is installed."""
        parts = key[0].split("/")
        if parts[1] != "apis" or parts[2] in BUILTIN_GROUPS:
            return None
        with self._lock:
            resource = self._custom.get(key)
        if resource is None or (namespaced_path and not resource.namespaced):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return resource

    def _admit_custom(self, resource: CustomResource, obj: dict[str, Any]) -> None:
        """Prune and validate a custom object as kube-apiserver does before storing it."""
        meta = obj.get("metadata") or {}
        label = f"{resource.kind} {meta.get('namespace', '')}/{meta.get('name', '')}".replace(" /", " ")
        for path in prune(obj, resource.schema):
            self.pruned.append(f"{label}: {path}")
        problem = invalid(obj, resource.schema)
        if problem is not None:
            raise ApiError(422, "Invalid", f'{resource.kind}.{resource.group} "{meta.get("name", "")}" is invalid: '
                                           f"{problem}")

    # -- kubelets behind the node proxy ------------------------------------------------------
    def set_kubelet_configz(self, node: str, body: bytes | None) -> None:
        """What the kubelet of ``node`` answers on /configz (None: the kubelet cannot be reached)."""
        with self._lock:
            if body is None:
                self._kubelets.pop(node, None)
            else:
                self._kubelets[node] = body

    def _kubelet_configz(self, node: str) -> bytes:
        with self._lock:
            stored = self._collection(("/api/v1", "nodes")).objects.get(("", node))
            body = self._kubelets.get(node)
        if stored is None:
            raise ApiError(404, "NotFound", f'nodes "{node}" not found')
        if body is None:
            address = next((a["address"] for a in json.loads(stored.body).get("status", {}).get("addresses", [])
                            if a.get("type") == "InternalIP"), node)
            raise ApiError(503, "ServiceUnavailable", f"error trying to reach service: dial tcp {address}:10250: "
                                                      f"connect: connection refused")
        return body

    # -- controls --------------------------------------------------------------------------
    def compact(self) -> None:
        """Compact history up to now, as etcd does: lists, watches and continue tokens that start
        below the current resourceVersion get 410. Open watches keep streaming every event: the
        history they have not delivered yet stays until they have."""
        with self._lock:
            self._floor = self._rv
            self._trim_history()

    def _trim_history(self) -> None:
        """Drop the events below the floor that no open watch still has to deliver. Caller holds the lock."""
        for key, collection in self._collections.items():
            keep_after = min([self._floor, *(w.delivered for w in self._watches
                                              if w.key == key and not (w.expire or w.dropped))])
            cut = bisect_right(collection.history, keep_after, key=_RV)
            if cut:
                del collection.history[:cut]

    def expire_watches(self) -> None:
        """The server can no longer serve the open watches: compact, and end each with an ERROR
        event carrying a 410 Expired Status."""
        with self._lock:
            for watch in self._watches:
                watch.expire = True
            self.compact()
            self._lock.notify_all()

    def compact_before_next_page(self, prefix: str = "") -> None:
        """Compact just before the next page of a paged list (to a path starting with ``prefix``)
        that the cluster has moved past (a write since its first page): that page answers 410
        Expired, as when etcd compacts in the middle of a list."""
        with self._lock:
            self._compact_before_page.append(prefix)

    def drop_watches(self) -> None:
        """Cut every open watch connection mid-stream, without the closing chunk."""
        with self._lock:
            watches = list(self._watches)
        for watch in watches:
            watch.dropped = True
            with suppress(OSError):
                watch.handler.connection.shutdown(socket.SHUT_RDWR)
        with self._lock:
            self._lock.notify_all()

    def bookmark(self) -> None:
        with self._lock:
            for watch in self._watches:
                watch.bookmark = True
            self._lock.notify_all()

    def fail_next(self, count: int, status: int = 500, prefix: str = "") -> None:
        """The next ``count`` requests (to paths starting with ``prefix``) are answered with ``status``."""
        with self._lock:
            self._fail.append((count, status, prefix))

    def set_unavailable(self, unavailable: bool = True) -> None:
        """While unavailable every request gets 503 and open watches are cut."""
        with self._lock:
            self._unavailable = unavailable
        if unavailable:
            self.drop_watches()

    def open_watches(self) -> int:
        with self._lock:
            return len(self._watches)

    def count(self, method: str = "GET", path: str | None = None, watch: bool | None = None) -> int:
        """How many requests matched: e.g. count(path="/api/v1/pods", watch=False) counts pod lists."""
        with self._lock:
            requests = list(self.requests)
        return sum(1 for r in requests if r.method == method and (path is None or r.path == path)
                   and (watch is None or _is_watch(r.query) == watch))

    # -- serving ---------------------------------------------------------------------------
    def _take_failure(self, path: str) -> int | None:
        with self._lock:
            if self._unavailable:
                return 503
            for i, (remaining, status, prefix) in enumerate(self._fail):
                if not path.startswith(prefix):
                    continue
                if remaining <= 1:
                    self._fail.pop(i)
                else:
                    self._fail[i] = (remaining - 1, status, prefix)
                return status
        return None

    def _list(self, key: CollectionKey, namespace: str, query: dict[str, str], path: str = "") -> bytes:
        limit = int(query.get("limit") or 0)
        token = query.get("continue")
        with self._lock:
            collection = self._collection(key)
            list_rv, after = self._rv, None
            if token:
                try:
                    decoded = json.loads(base64.urlsafe_b64decode(token))
                    list_rv, after = int(decoded["rv"]), tuple(decoded["start"])
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "invalid continue token") from None
                for i, prefix in enumerate(self._compact_before_page):
                    # Compacting at the list's own resourceVersion expires nothing (etcd still serves
                    # that revision): the compaction waits for a page of a list the cluster has moved past.
                    if path.startswith(prefix) and list_rv != -1 and list_rv < self._rv:
                        del self._compact_before_page[i]
                        self.compact()
                        break
                if list_rv == -1:  # the token a 410 handed out: the rest of the list as it is now
                    list_rv = self._rv
                elif list_rv < self._floor:
                    self.gone["continue"] += 1
                    raise ApiError(410, "Expired", _INCONSISTENT_CONTINUE,
                                   {"continue": _continue_token(-1, after)})
            keys = collection.sorted_keys()
            position = bisect_right(keys, after) if after is not None else 0
            page: list[ObjectKey] = []
            while position < len(keys) and not (limit and len(page) == limit):
                if not namespace or keys[position][0] == namespace:
                    page.append(keys[position])
                position += 1
            while namespace and position < len(keys) and keys[position][0] != namespace:
                position += 1
            more = position < len(keys)
            remaining = len(keys) - position if not namespace else None
            bodies = [collection.objects[k].body for k in page]
            selector = query.get("labelSelector")
            if selector:  # equality requirements only ("k=v,k2=v2"), what the webhook's clients send
                wanted = dict(part.split("=", 1) for part in selector.split(",") if "=" in part)
                bodies = [b for b in bodies if _labels_match(json.loads(b), wanted)]
            fields = query.get("fieldSelector")
            if fields:  # equality on dotted paths ("involvedObject.kind=ReplicaSet,involvedObject.name=x"),
                # what kube-apiserver answers for events (pkg/registry/core/event/strategy.go, ToSelectableFields)
                wanted = dict(part.split("=", 1) for part in fields.split(",") if "=" in part)
                bodies = [b for b in bodies if _fields_match(json.loads(b), wanted)]
            kind = collection.kind or "Unknown"
            api_version = collection.api_version or "v1"
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if more and page:
            meta["continue"] = _continue_token(list_rv, page[-1])
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        head = _dumps({"kind": f"{kind}List", "apiVersion": api_version, "metadata": meta})[:-1]
        return head + b',"items":[' + b",".join(bodies) + b"]}"

    def _open_watch(self, key: CollectionKey, namespace: str, query: dict[str, str],
                    watch: _Watch) -> tuple[ApiError | None, list[bytes]]:
        """Register a watch at its starting resourceVersion: (a 410 when that is below the floor, the
        synthetic ADDED bodies of a watch from "" or "0"). Done under the lock, so a compaction
        cannot fall between the check and the registration."""
        since = query.get("resourceVersion") or ""
        with self._lock:
            collection = self._collection(key)
            initial: list[bytes] = []
            if since in ("", "0"):
                start_rv = self._rv
                initial = [collection.objects[k].body for k in sorted(collection.objects)
                           if not namespace or k[0] == namespace]
            else:
                start_rv = int(since)
            if start_rv < self._floor:
                self.gone["watch-http" if self.gone_as_http else "watch-event"] += 1
                return ApiError(410, "Expired", f"too old resource version: {start_rv} ({self._floor})"), []
            watch.delivered = start_rv
            self._watches.add(watch)
            watch.dropped = self._unavailable  # cut while this request was on its way in
        return None, initial

    def _watch_events(self, key: CollectionKey, namespace: str, query: dict[str, str], watch: _Watch,
                      initial: list[bytes]) -> Iterator[bytes]:
        """The lines of one registered watch stream; returns when the stream should end cleanly."""
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        with self._lock:
            collection = self._collection(key)
            kind, api_version = collection.kind or "Unknown", collection.api_version or "v1"
        for body in initial:
            yield b'{"type":"ADDED","object":' + body + b"}"
        last_bookmark = time.monotonic()
        while True:
            with self._lock:
                while True:
                    if watch.expire or watch.dropped:
                        break
                    history = collection.history
                    start = bisect_right(history, watch.delivered, key=_RV)
                    pending = history[start:]
                    now = time.monotonic()
                    due = bookmarks and (watch.bookmark or (self.bookmark_interval is not None
                                                            and now - last_bookmark >= self.bookmark_interval))
                    if pending or due or now >= deadline:
                        break
                    wait = deadline - now
                    if bookmarks and self.bookmark_interval is not None:
                        wait = min(wait, self.bookmark_interval - (now - last_bookmark))
                    self._lock.wait(max(wait, 0.001))
                if watch.dropped:
                    return
                if watch.expire:
                    pending, due = [], False
                if pending:
                    watch.delivered = pending[-1].rv
                rv = self._rv
                watch.bookmark = False
            if watch.expire:
                with self._lock:
                    self.gone["watch-event"] += 1
                yield _dumps({"type": "ERROR", "object": ApiError(
                    410, "Expired", "The resourceVersion for the provided watch is too old.").status()})
                return
            for event in pending:
                if not namespace or event.key[0] == namespace:
                    yield b'{"type":"' + event.type.encode() + b'","object":' + event.body + b"}"
            if due:
                last_bookmark = time.monotonic()
                yield _dumps({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                                                             "metadata": {"resourceVersion": str(rv)}}})
            if not pending and not due and time.monotonic() >= deadline:
                return

    def _write(self, method: str, key: CollectionKey, okey: ObjectKey | None, body: bytes,
               content_type: str) -> tuple[int, dict[str, Any]]:
        custom = self._custom.get(key)
        with self._lock:
            collection = self._collection(key)
            if method == "POST":
                obj = json.loads(body)
                name = (obj.get("metadata") or {}).get("name")
                if not name:
                    raise ApiError(422, "Invalid", "metadata.name: Required value")
                new_key = (okey[0] if okey else "", name)
                if new_key in collection.objects:
                    raise ApiError(409, "AlreadyExists", f'{key[1]} "{name}" already exists')
                if new_key[0]:
                    obj["metadata"]["namespace"] = new_key[0]
                if custom is not None:
                    self._admit_custom(custom, obj)
                return 201, self._put(key, new_key, obj, "ADDED")
            assert okey is not None
            stored = collection.objects.get(okey)
            if stored is None:
                raise ApiError(404, "NotFound", f'{key[1]} "{okey[1]}" not found')
            current = json.loads(stored.body)
            if method == "DELETE":
                self._put(key, okey, current, "DELETED")
                return 200, current
            if method == "PUT":
                obj = json.loads(body)
                # Optimistic concurrency, checked under the store's lock as kube-apiserver checks it
                # in one storage transaction: a replace naming an older resourceVersion is refused.
                sent = (obj.get("metadata") or {}).get("resourceVersion")
                if sent and sent != str(stored.rv):
                    raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {key[1]} "{okey[1]}": the '
                                                    "object has been modified; please apply your changes to the "
                                                    "latest version and try again")
            elif "json-patch" in content_type:
                try:
                    obj = jsonpatch.apply_patch(current, json.loads(body))
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                    raise ApiError(422, "Invalid", f"json patch: {exc}") from None
            else:
                obj = _merge(current, json.loads(body))
            if custom is not None:
                self._admit_custom(custom, obj)
            return 200, self._put(key, okey, obj, "MODIFIED")


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (strategic merge patches are treated the same way)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _labels_match(obj: dict[str, Any], wanted: dict[str, str]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k.strip()) == v.strip() for k, v in wanted.items())


def _fields_match(obj: dict[str, Any], wanted: dict[str, str]) -> bool:
    def value(path: str) -> Any:
        found: Any = obj
        for key in path.strip().split("."):
            found = found.get(key) if isinstance(found, dict) else None
        return found

    return all(str(value(k)) == v.strip().lstrip("=") for k, v in wanted.items())


def _is_watch(query: dict[str, str]) -> bool:
    return query.get("watch") in ("true", "1")


def _route(path: str) -> tuple[CollectionKey, ObjectKey | None, str]:
    """/api/v1[/namespaces/NS]/RESOURCE[/NAME[/SUB]] -> ((prefix, resource), (ns, name) or (ns, ""), sub)."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        prefix, rest = "/api/" + parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        prefix, rest = f"/apis/{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    return (prefix, resource), (namespace, name), sub


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that drop connections (as the tests make them do) are not errors.
        import sys

        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


def _handler_for(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY, as kube-apiserver's connections have it (Go's default: net.TCPConn.SetNoDelay,
        # "The default is true (no delay)"): with Nagle's algorithm on, a body written after its
        # headers waits for the client's delayed ACK, about 40 ms a request.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, error: ApiError) -> None:
            self._send(error.code, _dumps(error.status()))

        def _handle(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            with api._lock:
                api.requests.append(Request(self.command, parts.path, query, self.headers.get("User-Agent", "")))
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            scheme, _, credential = (self.headers.get("Authorization") or "").partition(" ")
            # The scheme is case-insensitive (RFC 9110); the in-cluster client sends "bearer".
            if api.token is not None and (scheme.lower() != "bearer" or credential != api.token):
                self._error(ApiError(401, "Unauthorized", "Unauthorized"))
                return
            failure = api._take_failure(parts.path)
            if failure is not None:
                reason = {503: "ServiceUnavailable", 403: "Forbidden"}.get(failure, "InternalError")
                self._error(ApiError(failure, reason, f"injected failure {failure}"))
                return
            try:
                key, okey, sub = _route(parts.path)
                api._served(key, bool(okey and okey[0]))
                if key == ("/api/v1", "nodes") and sub == "proxy" and okey is not None:
                    if self.command != "GET" or parts.path.rstrip("/").split("/")[6:] != ["configz"]:
                        raise ApiError(404, "NotFound", "this fake kubelet serves only GET /configz")
                    self._send(200, api._kubelet_configz(okey[1]))
                elif self.command == "GET" and okey is not None and okey[1]:
                    found = api.get(parts.path)
                    if found is None:
                        raise ApiError(404, "NotFound", f'{key[1]} "{okey[1]}" not found')
                    self._send(200, _dumps(found))
                elif self.command == "GET" and _is_watch(query):
                    self._stream(key, okey[0] if okey else "", query)
                elif self.command == "GET":
                    self._send(200, api._list(key, okey[0] if okey else "", query, parts.path))
                elif self.command in ("POST", "PUT", "PATCH", "DELETE"):
                    status, obj = api._write(self.command, key, okey, body, self.headers.get("Content-Type", ""))
                    self._send(status, _dumps(obj))
                else:
                    raise ApiError(405, "MethodNotAllowed", self.command)
            except ApiError as error:
                self._error(error)
            except (ValueError, KeyError) as exc:
                self._error(ApiError(400, "BadRequest", str(exc)))

        def _stream(self, key: CollectionKey, namespace: str, query: dict[str, str]) -> None:
            watch = _Watch(self, key)
            gone, initial = api._open_watch(key, namespace, query, watch)
            if gone is not None and api.gone_as_http:
                self._error(gone)
                return
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                if gone is not None:
                    events: Iterable[bytes] = [_dumps({"type": "ERROR", "object": gone.status()})]
                else:
                    events = api._watch_events(key, namespace, query, watch, initial)
                for line in events:
                    data = line + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                self.close_connection = True
            finally:
                with api._lock:
                    api._watches.discard(watch)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    return Handler


@contextmanager
def running(server: FakeApiServer | None = None) -> Iterator[FakeApiServer]:
    api = (server or FakeApiServer()).start()
    try:
        yield api
    finally:
        api.stop()
