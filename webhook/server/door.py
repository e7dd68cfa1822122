"""The poller's look at a request as it is read: is it all here, what is it, may the door answer it.

Under overload the refusal has to be much cheaper than an answer, or refusing the excess
costs as much as serving it and nobody gets answered in time. A refusal from a worker thread
still pays the thread hand-off, gunicorn's HTTP parser and the WSGI request (measured: about
half the cost of an evaluated review). Here the poller reads what a connection has sent, and
if that is exactly one complete, plain HTTP/1.1 request that cannot be answered in time, answers
it with prepared bytes. Anything unusual (pipelined, chunked, ``Expect``) goes the normal way,
where the strict parser and the scheduler's check at the start of evaluation deal with it.
A body announced over the server's limit is refused before it is read (with ``Expect:
100-continue``, before the client is told to send it).
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass

from webhook.http.deadline import timeout_parameter

MAX_HEAD_BYTES = 16 * 1024  # an admission request's head is a few hundred bytes


@dataclass(frozen=True, slots=True)
class RequestHead:
    method: str
    path: str
    close: bool  # the client asked to close the connection after this request
    timeout: str | None  # the API server's ?timeout= (webhook.http.deadline), if any
    # Framed by Content-Length (or no body), with nothing the door cannot answer for itself
    # (chunked, Expect, Upgrade, conflicting lengths, a malformed header line).
    plain: bool
    # The body's bytes by Content-Length (None: chunked, or none given): which lane a review takes.
    length: int | None = None


@dataclass(frozen=True, slots=True)
class _Head:
    """What the poller needs of a request head, parsed once per distinct head (see ``_parse``)."""

    length: int | None  # Content-Length, if given and valid (the last one, if several)
    bad_length: bool  # a Content-Length that is not a number: the parser answers 400
    chunked: bool
    expect: bool  # Expect: 100-continue in HTTP/1.1, before any bad Content-Length
    request: RequestHead | None  # None when the request line is not HTTP/1.x


@dataclass(frozen=True, slots=True)
class Reading:
    """What the poller has of a connection's next request, from one look at its bytes.

    ``state``: ``incomplete`` (more bytes are due), ``complete`` (the first request is all
    here), ``expect`` (its head asks for ``100 Continue`` before the body is sent), ``too_large``
    (it announces a body over the server's limit: refused before it is read), or ``thread``
    (what a thread reads on: a body over what the poller buffers, a head over MAX_HEAD_BYTES)."""

    state: str
    head: RequestHead | None = None
    size: int | None = None  # bytes of the first request, when its framing says (Content-Length)


_INCOMPLETE = Reading("incomplete")
_THREAD = Reading("thread")


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
    valid = len(parts) == 3 and parts[2] in (b"HTTP/1.1", b"HTTP/1.0")
    method, target, version = parts if valid else [b"", b"", b""]
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
            # gunicorn's parser: 100-continue in HTTP/1.1 only (1.0 ignores it), any other a 417.
            expect = expect or (not bad_length and value.lower() == b"100-continue" and version == b"HTTP/1.1")
            plain = False
        elif name == b"upgrade":
            plain = False
        elif name == b"connection":
            tokens = {t.strip() for t in value.lower().split(b",")}
            close = b"close" in tokens or (close and b"keep-alive" not in tokens)
    request: RequestHead | None = None
    if valid:
        try:
            path, _, query = target.decode("ascii").partition("?")
            request = RequestHead(method.decode("ascii", "replace"), path, close,
                                  timeout_parameter(query) if query else None, plain,
                                  None if chunked else (length or 0))
        except UnicodeDecodeError:
            request = None
    return _Head(length, bad_length, chunked, expect, request)


def send_now(sock: socket.socket, data: bytes) -> bool:
    """Write ``data`` without blocking; False if it did not all go out at once."""
    try:
        return sock.send(data) == len(data)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, OSError):
        return False


def read_state(data: bytes | bytearray, max_buffered: int, max_body: int) -> Reading:
    """How far ``data`` holds a connection's next request (see ``Reading``). Bodies up to
    ``max_buffered`` bytes are read here; one announced over ``max_body`` is refused unread."""
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
    if end < 0:
        return _INCOMPLETE if len(data) <= MAX_HEAD_BYTES else _THREAD
    head = _parse(bytes(data[:end]))
    request = head.request
    if head.bad_length:
        return Reading("complete", request)  # malformed: all of the head is here, the parser answers 400
    length = head.length or 0
    if length > max_body and not head.chunked:
        return Reading("too_large", request)
    if head.expect:
        return Reading("expect", request)
    body = end + 4
    if head.chunked:
        if _chunked_complete(data, body):
            return Reading("complete", request)
        return _INCOMPLETE if len(data) - body <= max_buffered else Reading("thread", request)
    if length > max_buffered:
        return Reading("thread", request)
    size = body + length
    if len(data) < size:
        return _INCOMPLETE
    return Reading("complete", request, size)


def without_expect(data: bytearray) -> None:
    """Remove the Expect header lines from the request head at the start of ``data``: the
    poller has answered the expectation itself (``100 Continue``)."""
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
    lines = bytes(data[:end]).split(b"\r\n")
    kept = [line for line in lines[1:] if line.partition(b":")[0].strip().lower() != b"expect"]
    data[:end] = b"\r\n".join([lines[0], *kept])


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
