"""The live-state fake API server (``tests/support/fake_apiserver.py``) with what ``certs`` needs too.

Added, in a subclass so the shared server keeps its behaviour:

- every write (POST/PUT/PATCH/DELETE) logged with its decoded body and Content-Type;
- optimistic concurrency on PUT: a stale ``metadata.resourceVersion`` gets 409 Conflict, as
  kube-apiserver answers;
- ``before(method, hook)``: a one-shot callback run before the next write with that method
  is applied, to change an object between a client's read and its write, as a concurrent
  writer would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tests.support.fake_apiserver import ApiError, CollectionKey, FakeApiServer, ObjectKey


@dataclass
class Write:
    method: str
    resource: str
    name: str
    body: Any
    content_type: str


class WritableApiServer(FakeApiServer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.writes: list[Write] = []
        self._hooks: dict[str, Callable[[FakeApiServer], None]] = {}

    def before(self, method: str, hook: Callable[[FakeApiServer], None]) -> None:
        with self._lock:
            self._hooks[method] = hook

    def _write(self, method: str, key: CollectionKey, okey: ObjectKey | None, body: bytes,
               content_type: str) -> tuple[int, dict[str, Any]]:
        decoded = json.loads(body) if body else None
        name = okey[1] if okey and okey[1] else ((decoded or {}).get("metadata") or {}).get("name", "")
        with self._lock:
            self.writes.append(Write(method, key[1], name, decoded, content_type))
            hook = self._hooks.pop(method, None)
        if hook is not None:
            hook(self)
        if method == "PUT" and okey is not None:
            sent = ((decoded or {}).get("metadata") or {}).get("resourceVersion")
            with self._lock:
                stored = self._collection(key).objects.get(okey)
            if sent and stored is not None and sent != str(stored.rv):
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {key[1]} "{okey[1]}": the object '
                                                "has been modified; please apply your changes to the latest version")
        return super()._write(method, key, okey, body, content_type)


@contextmanager
def writable_apiserver() -> Iterator[WritableApiServer]:
    api = WritableApiServer().start()
    try:
        yield api
    finally:
        api.stop()
