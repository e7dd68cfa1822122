"""Every use of gunicorn's code, in one module: the rest of the project imports gunicorn only
through here (tests/domain/test_layout.py holds that), and tests/server/test_gunicorn_adapter.py exercises each
internal below against the installed gunicorn.

Supported gunicorn: 23.0 and later (pyproject.toml ``gunicorn>=23.0``), tested with 23.0 and
27.0.1 (constraints.txt pins the release the project is tested with). ``SUPPORTED`` says so in
code; the contract test fails on a release outside it.

Documented extension points (gunicorn's docs, "Custom Application" and the ``worker_class``
setting: a subclass of ``gunicorn.workers.base.Worker``): ``BaseApplication``, ``Worker``, and the
stock ``ThreadWorker`` run as ``server.worker: gthread``.

Internals (undocumented; the project reads requests the poller buffered, as gunicorn's own
workers do, so it needs gunicorn's HTTP library below its workers):

- ``gunicorn.http.RequestParser`` over a source, with the bytes already read put back in front
  (``Parser.unreader.unread``) and what it read past the request taken back for the next one
  (``Parser.unreader.buf``: pipelining);
- the body readers (``gunicorn.http.body.LengthReader``: its ``length``; ``ChunkedReader``),
  reached as ``req.body.reader``, and ``req.body`` replaced by the bytes read in full;
- ``gunicorn.http.wsgi.create`` (the environ and gunicorn's ``Response``: ``force_close``,
  ``should_close``, ``headers_sent``, ``write``, ``write_file``, ``close``, ``start_response``);
- ``gunicorn.http.errors``: the parse errors and the status each deserves (two of which changed
  base class in 24: ``PARSE_ERRORS``);
- ``ThreadWorker.nr_conns``: gthread's count of open connections.
"""

from __future__ import annotations

import io
from typing import Any

import gunicorn
from gunicorn import http
from gunicorn.app.base import BaseApplication
from gunicorn.http import errors as _errors
from gunicorn.http import wsgi
from gunicorn.http.body import ChunkedReader, LengthReader
from gunicorn.workers.base import Worker
from gunicorn.workers.gthread import ThreadWorker

__all__ = ["CLIENT_ERRORS", "MALFORMED_BODY", "PARSE_ERRORS", "SUPPORTED", "BaseApplication", "NoMoreData",
           "ParseException", "ThreadWorker", "Worker", "body_length", "create_environ", "is_chunked",
           "open_connections", "read_ahead", "replace_body", "request_parser", "version"]

SUPPORTED = ((23, 0), None)  # (oldest, newest or None: no known upper bound)
NoMoreData = _errors.NoMoreData
ParseException = _errors.ParseException
# What gunicorn raises on a request it cannot parse. A bad chunk size or a chunk without its
# terminator is a ParseException since gunicorn 24 and an IOError in 23: named here, so that on
# either it is a malformed request (400), not a client gone away.
PARSE_ERRORS: tuple[type[Exception], ...] = (ParseException, _errors.InvalidChunkSize, _errors.ChunkMissingTerminator)
# Reading a body gunicorn parses (chunked framing, a client gone mid-body): the body is malformed.
MALFORMED_BODY: tuple[type[Exception], ...] = (*PARSE_ERRORS, NoMoreData)
# gunicorn's request parsing errors and the status each deserves.
# (ExpectationFailed and UnsupportedTransferCoding are newer than some supported releases.)
CLIENT_ERRORS: tuple[tuple[type[Exception], int], ...] = tuple(
    (cls, status) for cls, status in (
        (getattr(_errors, "LimitRequestLine", None), 414),
        (getattr(_errors, "LimitRequestHeaders", None), 431),
        (getattr(_errors, "UnsupportedTransferCoding", None), 501),
        (getattr(_errors, "ExpectationFailed", None), 417),
        *((cls, 400) for cls in PARSE_ERRORS),
    ) if isinstance(cls, type))


def version() -> tuple[int, ...]:
    """The installed gunicorn's release, as numbers."""
    return tuple(int(part) for part in gunicorn.__version__.split(".")[:2] if part.isdigit())


def request_parser(cfg: Any, source: Any, client: Any, data: bytes) -> Any:
    """gunicorn's parser of requests from ``source`` (an object with ``recv``), ``data`` (bytes
    already read from it) first; ``next()`` on it is the next request."""
    parser = http.RequestParser(cfg, source, client)
    parser.unreader.unread(data)
    return parser


def read_ahead(parser: Any) -> bytes:
    """What ``parser`` read past its request (the start of the next one: pipelining)."""
    return bytes(parser.unreader.buf.getvalue())


def body_length(req: Any) -> int | None:
    """The body's Content-Length; None for a chunked body (or none at all)."""
    reader = getattr(req.body, "reader", None)
    return reader.length if isinstance(reader, LengthReader) else None


def is_chunked(req: Any) -> bool:
    return isinstance(getattr(req.body, "reader", None), ChunkedReader)


def replace_body(req: Any, data: bytes) -> None:
    """The request's body is ``data``, read in full already."""
    req.body = io.BytesIO(data)


def create_environ(req: Any, writer: Any, client: Any, server: Any, cfg: Any) -> tuple[Any, dict[str, Any]]:
    """gunicorn's ``Response`` writing to ``writer`` and the WSGI environ of ``req``."""
    resp, environ = wsgi.create(req, writer, client, server, cfg)
    return resp, environ


def open_connections(worker: Any) -> int:
    """Open client connections of a ``ThreadWorker``."""
    return int(worker.nr_conns)
