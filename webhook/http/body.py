"""Reading a request body once, for every route: bounded, and refused in JSON when malformed.

A Content-Length body over the limit is refused before it is read. A chunked body has no
length up front, so it is read to one byte past the limit: over it, a 413 (never the prefix
judged as if it were the whole body). A body the server cannot parse (a chunk size that is not
hex, a missing chunk terminator, a client gone mid-body) is a 400 with the parser's reason.
"""

from __future__ import annotations

from typing import Any

from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wsgi import get_content_length

from webhook.http.gunicorn_adapter import MALFORMED_BODY

_READ_SIZE = 64 * 1024


class BodyError(ValueError):
    """A body that cannot be read (an HTTP 400); the message says why."""


def _drain(stream: Any, length: int, limit: int) -> None:
    """Read and drop a refused body (up to ``limit`` bytes) so the client can read our 413
    instead of a reset; past the limit gunicorn simply closes the connection."""
    if length > limit:
        return
    while length > 0:
        chunk = stream.read(min(length, _READ_SIZE))
        if not chunk:
            return
        length -= len(chunk)


def read_body(environ: dict[str, Any], max_bytes: int) -> bytes:
    """The whole body of the request in ``environ``; RequestEntityTooLarge over ``max_bytes``,
    BodyError when malformed."""
    stream = environ.get("wsgi.input")
    length = get_content_length(environ)  # None for a chunked body, as Flask's request reads it
    if stream is None:
        return b""
    try:
        if length is not None:
            if length > max_bytes:
                _drain(stream, length, 4 * max_bytes)
                raise RequestEntityTooLarge()
            # The hot path: exactly Content-Length bytes from the server's stream.
            return bytes(stream.read(length))
        parts: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = stream.read(min(_READ_SIZE, max_bytes + 1 - size))
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
    except MALFORMED_BODY as exc:
        raise BodyError(f"malformed request body: {exc}"[:300]) from None
    if size > max_bytes:
        raise RequestEntityTooLarge()
    return b"".join(parts)
