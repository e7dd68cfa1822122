"""The one paged list of the project: ``limit``/``continue`` pages read as raw bytes.

Both the live reflector and the one-shot cluster read (``inspect``) list through here, so a
big cluster's objects never become client model objects, and every page's connection goes
back to the pool whatever happens while it is decoded (Kubernetes API concepts, "Retrieving
large results sets in chunks").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any


def list_pages(call: Callable[..., Any], decode: Callable[[bytes], Mapping[str, Any]], page_size: int,
               request_timeout: Any = None, stop: Callable[[], bool] = lambda: False) -> Iterator[Mapping[str, Any]]:
    """Each page of the list ``call`` makes, decoded; the last page has no ``continue`` token.

    ``stop()`` is asked between pages: a reflector that is shutting down stops listing."""
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": page_size, "_preload_content": False}
        if token:
            kwargs["_continue"] = token
        if request_timeout is not None:
            kwargs["_request_timeout"] = request_timeout
        response = call(**kwargs)
        try:
            page = decode(response.data)
        finally:
            response.release_conn()
        yield page
        token = (page.get("metadata") or {}).get("continue")
        if not token or stop():
            return
