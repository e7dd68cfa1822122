"""The poller's one look at a request: is it all here, what is it, may the door answer it itself."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.server.door import MAX_HEAD_BYTES, read_state, without_expect

BUFFERED, MAX_BODY = 1024, 4096


def _request(body: bytes = b'{"a":1}', extra: bytes = b"", version: bytes = b"HTTP/1.1") -> bytes:
    return (b"POST /validate?timeout=10s " + version + b"\r\nHost: localhost\r\n" + extra
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def _door_may_answer(data: bytes) -> bool:
    """What the door answers itself: exactly one complete, plain request."""
    reading = read_state(data, BUFFERED, MAX_BODY)
    return (reading.state == "complete" and reading.head is not None and reading.head.plain
            and reading.size == len(data))


def test_a_complete_request_is_recognised():
    data = _request()
    reading = read_state(data, BUFFERED, MAX_BODY)
    assert reading.state == "complete" and reading.size == len(data)
    head = reading.head
    assert head is not None and (head.method, head.path, head.close, head.timeout) == ("POST", "/validate", False,
                                                                                       "10s")
    assert _door_may_answer(data)


@pytest.mark.parametrize(("extra", "version", "close"), [
    (b"Connection: close\r\n", b"HTTP/1.1", True),
    (b"", b"HTTP/1.0", True),
    (b"Connection: keep-alive\r\n", b"HTTP/1.0", False),
])
def test_connection_close_is_honoured(extra, version, close):
    head = read_state(_request(extra=extra, version=version), BUFFERED, MAX_BODY).head
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
    assert not _door_may_answer(data)


def test_a_pipelined_request_is_complete_and_knows_where_it_ends():
    first = _request()
    reading = read_state(first + _request(), BUFFERED, MAX_BODY)
    assert reading.state == "complete" and reading.size == len(first)


def test_a_body_over_the_limit_is_refused_before_it_arrives_with_or_without_expect():
    """Content-Length over the server's limit: refused unread, before any 100 Continue."""
    head = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n"
    assert read_state(head + b"\r\n", BUFFERED, MAX_BODY).state == "too_large"
    assert read_state(head + b"Expect: 100-continue\r\n\r\n", BUFFERED, MAX_BODY).state == "too_large"
    within = bytearray(head.replace(b"5000000", b"2000") + b"Expect: 100-continue\r\n\r\n")
    assert read_state(within, BUFFERED, MAX_BODY).state == "expect"  # the poller says 100 Continue
    without_expect(within)
    assert read_state(within, BUFFERED, MAX_BODY).state == "thread"  # over what the poller buffers


def test_an_answered_expectation_leaves_an_ordinary_request():
    data = bytearray(_request(extra=b"Expect: 100-continue\r\nX-Other: 1\r\n"))
    without_expect(data)
    assert b"Expect" not in data and b"X-Other: 1\r\n" in data
    assert _door_may_answer(bytes(data))


# The door parses each distinct head once (the API server's heads repeat). Its answers must be
# those of a plain scan of every request, whatever the order of the headers and however often a
# head comes back: a reference scan, written out here, judges generated requests alike.

def _reference_state(data: bytes) -> str:
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
    if end < 0:
        return "incomplete" if len(data) <= MAX_HEAD_BYTES else "thread"
    lines = data[:end].split(b"\r\n")
    version = lines[0].split(b" ")[-1]
    length, chunked, expect = 0, False, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip()
        if name == b"content-length":
            if not value.isdigit():
                return "complete"
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = True
        elif name == b"expect" and value.lower() == b"100-continue" and version == b"HTTP/1.1":
            expect = True
    if length > MAX_BODY and not chunked:
        return "too_large"
    if expect:
        return "expect"
    if chunked:
        return "chunked"
    if length > BUFFERED:
        return "thread"
    return "complete" if len(data) >= end + 4 + length else "incomplete"


_HEADER_LINES = st.sampled_from([
    b"Host: localhost", b"Content-Type: application/json", b"Content-Length: 7", b"Content-Length: 3",
    b"Content-Length: x1", b"Content-Length:  7 ", b"Content-Length: 2000", b"Content-Length: 9000",
    b"Expect: 100-continue", b"Expect: something", b"Transfer-Encoding: chunked", b"Connection: close",
    b"Connection: keep-alive", b"Upgrade: h2c", b"Broken header line", b"X-Long: " + b"a" * 3000,
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
        expected = _reference_state(data)
        reading = read_state(data, BUFFERED, MAX_BODY)
        assert reading.state == expected or (expected == "chunked" and reading.state in
                                             ("complete", "incomplete", "thread"))
        if _door_may_answer(data):
            assert not pipelined and b"Expect" not in data and b"chunked" not in data
            assert reading.head is not None and reading.head.method == start.split(b" ")[0].decode()
