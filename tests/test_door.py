"""What the poller may refuse by itself: exactly one complete, plain HTTP/1.x request."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.server.door import MAX_HEAD_BYTES, RequestHead, read_state


def head_of(data: bytes) -> RequestHead | None:
    """The head the poller may answer by itself: ``data`` is one complete, plain request."""
    state, head = read_state(data, 1024)
    assert head is None or state == "complete"
    return head


def _request(body: bytes = b'{"a":1}', extra: bytes = b"", version: bytes = b"HTTP/1.1") -> bytes:
    return (b"POST /validate?timeout=10s " + version + b"\r\nHost: localhost\r\n" + extra
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def test_a_complete_request_is_recognised():
    head = head_of(_request())
    assert head is not None and (head.method, head.path, head.close) == ("POST", "/validate", False)


@pytest.mark.parametrize(("extra", "version", "close"), [
    (b"Connection: close\r\n", b"HTTP/1.1", True),
    (b"", b"HTTP/1.0", True),
    (b"Connection: keep-alive\r\n", b"HTTP/1.0", False),
])
def test_connection_close_is_honoured(extra, version, close):
    head = head_of(_request(extra=extra, version=version))
    assert head is not None and head.close is close


@pytest.mark.parametrize("data", [
    _request()[:-1],  # body not all here
    _request() + _request(),  # pipelined
    _request(extra=b"Transfer-Encoding: chunked\r\n"),
    _request(extra=b"Expect: 100-continue\r\n"),
    _request(extra=b"Content-Length: 99\r\n"),  # two lengths that disagree
    _request(extra=b"Broken header line\r\n"),
    _request(version=b"HTTP/2.0"),
    b"POST /validate HTTP/1.1\r\nHost: x\r\n",  # headers not complete
    b"GARBAGE\r\n\r\n",
])
def test_anything_unusual_is_left_to_the_normal_path(data):
    assert head_of(data) is None


# The door parses each distinct head once (the API server's heads repeat). Its answers must be
# those of a plain scan of every request, whatever the order of the headers and however often a
# head comes back: a reference scan, written out here, judges generated requests alike.

def _reference_state(data: bytes, max_body: int) -> str:
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
    if end < 0:
        return "incomplete" if len(data) <= MAX_HEAD_BYTES else "thread"
    length, chunked = 0, False
    for line in data[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            value = value.strip()
            if not value.isdigit():
                return "complete"
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = True
        elif name == b"expect":
            return "thread"
    if chunked:
        return "chunked"
    if length > max_body:
        return "thread"
    return "complete" if len(data) >= end + 4 + length else "incomplete"


_HEADER_LINES = st.sampled_from([
    b"Host: localhost", b"Content-Type: application/json", b"Content-Length: 7", b"Content-Length: 3",
    b"Content-Length: x1", b"Content-Length:  7 ", b"Expect: 100-continue", b"Transfer-Encoding: chunked",
    b"Connection: close", b"Connection: keep-alive", b"Upgrade: h2c", b"Broken header line", b"X-Long: " + b"a" * 3000,
])


@given(start=st.sampled_from([b"POST /validate?timeout=10s HTTP/1.1", b"POST /mutate HTTP/1.0",
                              b"GET /healthz HTTP/1.1", b"POST /validate HTTP/2.0", b"GARBAGE"]),
       lines=st.lists(_HEADER_LINES, max_size=5), body=st.sampled_from([b"", b'{"a":1}', b"abc"]),
       repeat=st.integers(1, 3), pipelined=st.booleans())
def test_the_door_judges_every_head_as_a_plain_scan_does(start, lines, body, repeat, pipelined):
    data = b"\r\n".join([start, *lines]) + b"\r\n\r\n" + body
    if pipelined:
        data += data
    for _ in range(repeat):  # the second time round the head comes from the door's memory
        expected = _reference_state(data, 1024)
        state, head = read_state(data, 1024)
        assert state == expected or (expected == "chunked" and state in ("complete", "incomplete", "thread"))
        if head is not None:
            assert state == "complete"
            assert not pipelined and b"Expect" not in data and b"chunked" not in data
            assert head.method == start.split(b" ")[0].decode()
