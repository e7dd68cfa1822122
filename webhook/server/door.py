"""Refusing a request at the door: read it in the poller and answer 503 without a thread.

Under overload the refusal has to be much cheaper than an answer, or refusing the excess
costs as much as serving it and nobody gets answered in time. A refusal from a worker thread
still pays the thread hand-off, gunicorn's HTTP parser and the WSGI request (measured: about
half the cost of an evaluated review). Here the poller reads what a kept-alive connection has
sent, and if that is exactly one complete, plain HTTP/1.1 request, answers it with prepared
bytes. Anything unusual (partial, pipelined, chunked, ``Expect``) goes the normal way, where
the strict parser and the thread-side budget check deal with it.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass

from webhook.server.deadline import timeout_parameter

MAX_HEAD_BYTES = 16 * 1024  # an admission request's head is a few hundred bytes


@dataclass(frozen=True, slots=True)
class RequestHead:
    method: str
    path: str
    close: bool  # the client asked to close the connection after this request
    timeout: str | None  # the API server's ?timeout= (webhook.server.deadline), if any


@dataclass(frozen=True, slots=True)
class _Head:
    """What the door needs of a request head, parsed once per distinct head (see ``_parse``)."""

    length: int | None  # Content-Length, if given and valid (the last one, if several)
    bad_length: bool  # a Content-Length that is not a number: the parser answers 400
    chunked: bool
    expect: bool  # an Expect header before any bad Content-Length (a thread then reads the body)
    plain: RequestHead | None  # the head of a plain request (the door may answer it), else None


# The API server's heads repeat: same method, path, ?timeout=, Host and Content-Type on every
# call, only the Content-Length varies, and a cluster's pods come in few sizes. Parsing each
# distinct head once takes the header scan off the poller's path for every review it reads.
_HEADS: dict[bytes, _Head] = {}
_HEADS_MAX = 512
_HEAD_KEPT_BYTES = 2048


def _parse(head: bytes) -> _Head:
    found = _HEADS.get(head)
    if found is None:
        found = _scan(head)
        if len(head) <= _HEAD_KEPT_BYTES:  # at most 512 x 2 KiB kept, whatever clients send
            if len(_HEADS) >= _HEADS_MAX:
                _HEADS.clear()
            _HEADS[head] = found
    return found


def _scan(head: bytes) -> _Head:
    lines = head.split(b"\r\n")
    length: int | None = None
    bad_length = chunked = expect = False
    plain = True
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        plain = False
        parts = [b"", b"", b""]
    method, target, version = parts
    close = version == b"HTTP/1.0"
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        name = name.strip().lower()
        value = value.strip()
        if not colon:
            plain = False
        if name == b"content-length":
            if not value.isdigit():
                bad_length = True
                plain = False
            else:
                if length is not None and int(value) != length:
                    plain = False  # conflicting lengths: the parser refuses them
                length = int(value)
        elif name == b"transfer-encoding":
            chunked = True
            plain = False
        elif name == b"expect":
            expect = expect or not bad_length
            plain = False
        elif name == b"upgrade":
            plain = False
        elif name == b"connection":
            tokens = {t.strip() for t in value.lower().split(b",")}
            close = b"close" in tokens or (close and b"keep-alive" not in tokens)
    request: RequestHead | None = None
    if plain:
        try:
            path, _, query = target.decode("ascii").partition("?")
            request = RequestHead(method.decode("ascii", "replace"), path, close,
                                  timeout_parameter(query) if query else None)
        except UnicodeDecodeError:
            request = None
    return _Head(length, bad_length, chunked, expect, request)


def send_now(sock: socket.socket, data: bytes) -> bool:
    """Write ``data`` without blocking; False if it did not all go out at once."""
    try:
        return sock.send(data) == len(data)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, OSError):
        return False


def read_state(data: bytes | bytearray, max_body: int) -> tuple[str, RequestHead | None]:
    """Whether ``data`` holds the first request of a connection in full, as the poller reads it:
    ``"incomplete"`` while more bytes are due, ``"complete"`` once it is all here, ``"thread"``
    for what the poller leaves to a thread and gunicorn's parser (``Expect``, a head over
    MAX_HEAD_BYTES, a body over ``max_body``: the parser refuses or streams those). With
    ``"complete"`` comes the request's head when ``data`` is exactly one plain HTTP/1.x request with
    a Content-Length body (or none), which the poller may answer by itself; else None."""
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
    if end < 0:
        return ("incomplete" if len(data) <= MAX_HEAD_BYTES else "thread"), None
    head = _parse(bytes(data[:end]))
    if head.expect:
        return "thread", None
    if head.bad_length:
        return "complete", None  # malformed: all of the head is here, the parser answers 400
    body = end + 4
    if head.chunked:
        if _chunked_complete(data, body):
            return "complete", None
        return ("incomplete" if len(data) - body <= max_body else "thread"), None
    length = head.length or 0
    if length > max_body:
        return "thread", None
    size = body + length
    if len(data) < size:
        return "incomplete", None
    # Answerable by the poller: the separator within MAX_HEAD_BYTES, nothing after the body.
    return "complete", (head.plain if len(data) == size and body <= MAX_HEAD_BYTES else None)


def _chunked_complete(data: bytes | bytearray, pos: int) -> bool:
    """Whether a chunked body starting at ``pos`` has arrived up to its last chunk and trailers
    (True for a malformed one too: the parser answers it)."""
    while True:
        line_end = data.find(b"\r\n", pos)
        if line_end < 0:
            return False
        try:
            size = int(bytes(data[pos:line_end]).split(b";", 1)[0].strip(), 16)
        except ValueError:
            return True
        if size == 0:
            return data.find(b"\r\n\r\n", line_end) >= 0 or data[line_end + 2:line_end + 4] == b"\r\n"
        pos = line_end + 2 + size + 2
        if pos > len(data):
            return False
