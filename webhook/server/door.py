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

MAX_HEAD_BYTES = 16 * 1024  # an admission request's head is a few hundred bytes


@dataclass(frozen=True, slots=True)
class RequestHead:
    method: str
    path: str
    close: bool  # the client asked to close the connection after this request


def read_request(sock: socket.socket, limit: int) -> tuple[bytes, RequestHead | None, bool]:
    """What is readable now without blocking, until it holds one complete request or about
    ``limit`` bytes; that request's head if it is one (see ``one_complete_request``); and
    whether the peer closed the connection."""
    data = b""
    while len(data) < limit:
        try:
            chunk = sock.recv(65536)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            break
        if not chunk:
            return data, None, True
        data += chunk
        head = one_complete_request(data)
        if head is not None:
            return data, head, False  # the usual case: one TLS record held it all, one read
    return data, one_complete_request(data), False


def one_complete_request(data: bytes) -> RequestHead | None:
    """The head of ``data`` if ``data`` is exactly one complete HTTP/1.x request with a
    Content-Length body (or none); None for anything else."""
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
    if end < 0:
        return None
    lines = data[:end].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        return None
    method, target, version = parts
    length: int | None = None
    close = version == b"HTTP/1.0"
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            return None
        name = name.strip().lower()
        value = value.strip()
        if name == b"content-length":
            if not value.isdigit() or (length is not None and int(value) != length):
                return None
            length = int(value)
        elif name in (b"transfer-encoding", b"expect", b"upgrade"):
            return None
        elif name == b"connection":
            tokens = {t.strip() for t in value.lower().split(b",")}
            close = b"close" in tokens or (close and b"keep-alive" not in tokens)
    if end + 4 + (length or 0) != len(data):
        return None  # the body is not all here yet, or another request follows it
    try:
        path = target.decode("ascii").split("?", 1)[0]
    except UnicodeDecodeError:
        return None
    return RequestHead(method.decode("ascii", "replace"), path, close)


def send_now(sock: socket.socket, data: bytes) -> bool:
    """Write ``data`` without blocking; False if it did not all go out at once."""
    try:
        return sock.send(data) == len(data)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, OSError):
        return False
