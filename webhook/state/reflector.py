"""One reflector per watched resource: a paged list (``limit``/``continue``) fills the snapshot, then
a watch from the list's resourceVersion keeps it current; ``410 Gone`` lists again and drops what
vanished, a dropped connection or an API error is retried with jittered exponential backoff. The
live state (webhook/state/live.py) runs one per resource and says what each one stores."""

from __future__ import annotations

import contextlib
import gc
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import urllib3
from kubernetes.client.exceptions import ApiException

from policies.model.settings import StateSettings
from webhook.state.kube_client import connection_problem
from webhook.state.kube_schema import DecodeError, Decoders
from webhook.state.paging import list_pages

log = logging.getLogger("gpushare.state")


class Gone(Exception):
    """The resourceVersion (or continue token) is older than the server's history: list again."""


class WatchError(Exception):
    """The watch stream reported an error other than 410."""


@dataclass(frozen=True)
class Resource:
    """What differs between watching nodes and watching pods."""

    name: str
    call: Callable[..., Any]
    decoders: Decoders
    apply: Callable[[str, dict[str, Any]], None]
    keys: Callable[[], set[str]]
    key_of: Callable[[dict[str, Any]], str]
    remove: Callable[[str], None]


_gc_lock = threading.Lock()
_gc_pausers = 0


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a list builds its records.

    A list creates hundreds of thousands of long-lived objects; the collector would rescan
    the growing heap over and over (about 40 % of a large list's CPU). Reference counting
    still frees everything meanwhile; collection resumes when the last list ends.
    """
    global _gc_pausers
    with _gc_lock:
        _gc_pausers += 1
        gc.disable()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0:
                gc.enable()


class Reflector:
    """Keeps one resource of the snapshot in step with the API server."""

    def __init__(self, resource: Resource, settings: StateSettings, stop: threading.Event,
                 clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[], None] = lambda: None) -> None:
        self.resource = resource
        self._on_change = on_change
        self.settings = settings
        self._stop = stop
        self._clock = clock
        self.synced = threading.Event()
        self.resource_version = ""
        self.connected = False
        self.disconnected_since: float | None = clock()
        self.last_error = "not connected yet"
        self.lists = 0
        self.watches = 0
        self._failures = 0
        self._response: Any = None  # the open watch stream, so stop() can cut it

    def interrupt(self) -> None:
        """Cut the open watch stream (on stop), instead of waiting for its timeout."""
        response = self._response
        if response is None:
            return
        # Shutting the socket down wakes a thread blocked reading it (TLS included); close() alone does not.
        sock = getattr(getattr(response, "connection", None), "sock", None)
        with contextlib.suppress(Exception):
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
            response.close()

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    with _cyclic_gc_paused():
                        self.resource_version = self._list()
                    need_list = False
                self._watch()
            except Gone as exc:
                log.warning("%s: %s; listing again", self.resource.name, exc)
                need_list = True
                self._disconnected(str(exc), backoff=False)
            except ApiException as exc:
                if exc.status == 410:
                    log.warning("%s: resourceVersion expired (410); listing again", self.resource.name)
                    need_list = True
                    self._disconnected("410 Gone", backoff=False)
                else:
                    self._disconnected(f"API error {exc.status}: {exc.reason}")
            except urllib3.exceptions.HTTPError as exc:
                self._disconnected(connection_problem(exc))
            except (OSError, WatchError, DecodeError, ValueError) as exc:
                self._disconnected(f"{type(exc).__name__}: {exc}")

    def _connected(self) -> None:
        # Backoff is reset only once data flows (a list page, a watch event), not on connect:
        # a server that accepts and then fails at once must not be hammered.
        self.connected = True
        self.disconnected_since = None

    def _disconnected(self, why: str, backoff: bool = True) -> None:
        if self.connected or self.disconnected_since is None:
            self.disconnected_since = self._clock()
        self.connected = False
        self.last_error = why
        if not backoff:
            return
        self._failures += 1
        ceiling = min(self.settings.backoff_max_seconds,
                      self.settings.backoff_initial_seconds * 2 ** (self._failures - 1))
        delay = ceiling * random.uniform(0.5, 1.0)
        log.warning("%s: %s; retrying in %.1fs", self.resource.name, why, delay)
        self._stop.wait(delay)

    # -- list ------------------------------------------------------------------------------
    def _list(self) -> str:
        """A full paged list into the snapshot; objects that vanished are dropped. Returns its resourceVersion."""
        seen: set[str] = set()
        resource_version = ""
        pages = list_pages(self.resource.call, self.resource.decoders.list.decode, self.settings.list_page_size,
                           (self.settings.connect_timeout_seconds, 60), self._stop.is_set)
        for page in pages:
            self._connected()
            self._failures = 0
            for obj in page.get("items") or ():
                self.resource.apply("ADDED", obj)
                seen.add(self.resource.key_of(obj))
            resource_version = (page.get("metadata") or {}).get("resourceVersion", "") or resource_version
        for key in self.resource.keys() - seen:
            self.resource.remove(key)
        self.lists += 1
        self.synced.set()
        self._on_change()
        log.info("%s: listed, resourceVersion %s", self.resource.name, resource_version)
        return resource_version

    # -- watch -----------------------------------------------------------------------------
    def _watch(self) -> None:
        """Apply watch events until the server ends the stream, moving ``resource_version`` along
        (so a dropped stream resumes where it stopped)."""
        timeout = int(self.settings.watch_timeout_seconds * random.uniform(1.0, 2.0))
        response = self.resource.call(
            watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True, timeout_seconds=timeout,
            _preload_content=False, _request_timeout=(self.settings.connect_timeout_seconds, timeout + 30))
        self.watches += 1
        self._response = response
        self._connected()
        buffer = b""
        try:
            if self._stop.is_set():  # stopped while the request was on its way: interrupt() missed it
                return
            for chunk in response.stream(65536):
                buffer += chunk
                if b"\n" not in chunk:
                    continue
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self.resource_version = self._event(line, self.resource_version)
                if self._stop.is_set():
                    break
            if buffer.strip():
                self.resource_version = self._event(buffer, self.resource_version)
        finally:
            self._response = None
            response.release_conn()

    def _event(self, line: bytes, resource_version: str) -> str:
        try:
            event = self.resource.decoders.event.decode(line)
        except msgspec.ValidationError:
            # An ERROR event's object is a Status, not the watched kind.
            event = msgspec.json.decode(line)
            if not isinstance(event, dict) or event.get("type") != "ERROR":
                raise
        kind = event.get("type", "")
        obj: dict[str, Any] = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(f"watch from resourceVersion {resource_version} expired: {obj.get('message', '')}")
            raise WatchError(f"watch error {obj.get('code')}: {obj.get('reason', '')} {obj.get('message', '')}")
        new_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.resource.apply(kind, obj)
            self._on_change()
        self._failures = 0  # the stream delivers: whatever failed before has recovered
        return new_version

    # -- health ----------------------------------------------------------------------------
    def stale_for(self) -> float:
        """Seconds this watch has been disconnected (0 while connected)."""
        since = self.disconnected_since
        return 0.0 if since is None else self._clock() - since
