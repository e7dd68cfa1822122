"""What the poller may refuse by itself: exactly one complete, plain HTTP/1.x request."""

from __future__ import annotations

import pytest

from webhook.server.door import one_complete_request


def _request(body: bytes = b'{"a":1}', extra: bytes = b"", version: bytes = b"HTTP/1.1") -> bytes:
    return (b"POST /validate?timeout=10s " + version + b"\r\nHost: localhost\r\n" + extra
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def test_a_complete_request_is_recognised():
    head = one_complete_request(_request())
    assert head is not None and (head.method, head.path, head.close) == ("POST", "/validate", False)


@pytest.mark.parametrize(("extra", "version", "close"), [
    (b"Connection: close\r\n", b"HTTP/1.1", True),
    (b"", b"HTTP/1.0", True),
    (b"Connection: keep-alive\r\n", b"HTTP/1.0", False),
])
def test_connection_close_is_honoured(extra, version, close):
    head = one_complete_request(_request(extra=extra, version=version))
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
    assert one_complete_request(data) is None
