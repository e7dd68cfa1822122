"""Running the WSGI app on a request the poller has read, as gunicorn's own workers do
(``gunicorn.http.RequestParser``, ``gunicorn.http.wsgi.create``, reached through
webhook.http.gunicorn_adapter, the one module that touches gunicorn), with the answer built in
memory: the poller writes it without blocking, so a client that does not read never holds a
thread or a slot. Also: a request whose body the poller did not buffer, read by a thread under
the client deadline, and the JSON errors for requests the app never saw."""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
from dataclasses import dataclass
from typing import Any

from webhook.http import gunicorn_adapter as gunicorn
from webhook.http.errors import error_body
from webhook.server.connection import ClientTimeout, Conn, http_json, peer
from webhook.server.tallies import Counts

log = logging.getLogger("gpushare.worker")


class _DeadlineSocket:
    """What the HTTP parser reads through in a thread (only when the poller left it something to
    read: a large body): every recv gets only the time left before the deadline."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    def recv(self, size: int) -> bytes:
        remaining = self._conn.deadline - time.monotonic()
        if remaining <= 0:
            raise self._conn.timed_out()
        self._conn.sock.settimeout(remaining)
        try:
            return self._conn.sock.recv(size)
        except TimeoutError:
            raise self._conn.timed_out() from None


class _Capture:
    """What gunicorn's response writes to: the bytes, which the poller then writes without
    blocking (a client that does not read can never block a thread or hold a slot)."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.parts.append(bytes(data))

    def send(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def settimeout(self, _seconds: float | None) -> None:
        pass  # nothing here blocks

    def value(self) -> bytes:
        return b"".join(self.parts)


class _AllRead:
    """The parser's socket for a request read in full by the poller: a read past it means the
    request was not what the poller thought; it ends the connection."""

    def recv(self, size: int) -> bytes:
        raise gunicorn.NoMoreData(b"")


@dataclass(slots=True)
class Outcome:
    """What a thread hands back to the poller: a request it read (``answer`` None, ``conn.req``
    set), or an answer (empty when there is nothing to send: the client went away)."""

    conn: Conn
    answer: bytes | None
    keep: bool = False
    seconds: float = 0.0
    slot: bool = False  # the work held a slot


class AppRunner:
    """The app and gunicorn's request handling for one worker (``worker``: gunicorn's base
    ``Worker``, whose hooks, request count and ``alive`` flag it honours)."""

    def __init__(self, worker: Any, max_body_bytes: int, counts: Counts) -> None:
        self._worker = worker
        self._cfg = worker.cfg
        self._max_body_bytes = max_body_bytes
        self._counts = counts
        # gunicorn's Config resolves every attribute through its settings table: read the ones
        # used per request once (they do not change while the worker runs).
        self._keepalive = self._cfg.keepalive
        self._pre_request, self._post_request = self._cfg.pre_request, self._cfg.post_request

    def evaluate(self, conn: Conn, now: float) -> tuple[bytes, bool]:
        """Run the request in ``conn`` (waiting since ``conn.queued_at``); its answer (empty
        when there is none to send) and whether the connection stays open."""
        capture = _Capture()
        conn.writer = capture
        try:
            keep = self._serve(conn, now - conn.queued_at)
        finally:
            conn.writer = conn.sock
        return capture.value(), keep

    def _serve(self, conn: Conn, waited: float) -> bool:
        """Parse (unless a thread has read it) and answer one request; whether the connection stays open."""
        conn.stage = "headers"
        req = conn.req
        parser = None
        try:
            if req is None:
                parser = gunicorn.request_parser(self._cfg, _AllRead(), conn.client, conn.data)
                conn.data = b""
                req = next(parser)
            conn.req = None
            conn.stage = "body"
            self._counts.queue_wait(waited)
            keep = self._run_app(req, conn)
            if keep and parser is not None:
                # What the app did not read of the body, then anything read ahead (pipelining),
                # goes back to the poller's buffer.
                while req.body.read(65536):
                    pass
                conn.buf += gunicorn.read_ahead(parser)
            return keep
        except (gunicorn.NoMoreData, StopIteration):
            pass
        except Exception as exc:
            self.handle_error(req, conn.writer, conn.client, exc)
        return False

    def _run_app(self, req: Any, conn: Conn) -> bool:
        """The WSGI call, as gunicorn's own workers make it (gunicorn.http.wsgi)."""
        worker = self._worker
        environ: dict[str, Any] = {}
        resp = None
        try:
            self._pre_request(worker, req)
            resp, environ = gunicorn.create_environ(req, conn.writer, conn.client, conn.server, self._cfg)
            # The connection itself (its peer certificate, its listener), whatever the answer is
            # written to: the app's authentication and listener split read it.
            environ["gunicorn.socket"] = conn.sock
            environ["wsgi.multithread"] = True
            worker.nr += 1
            if worker.nr >= worker.max_requests and worker.alive:
                log.info("restarting the worker after this request (max_requests)")
                worker.alive = False
            if not worker.alive or not self._keepalive or conn.must_close:
                resp.force_close()
            respiter = worker.wsgi(environ, resp.start_response)
            try:
                if isinstance(respiter, environ["wsgi.file_wrapper"]):
                    resp.write_file(respiter)
                else:
                    for item in respiter:
                        resp.write(item)
                resp.close()
            finally:
                if hasattr(respiter, "close"):
                    respiter.close()
            return not resp.should_close()
        except (Exception, SystemExit):
            if resp is not None and resp.headers_sent:
                log.exception("error while building an answer for %s", peer(conn.client))
                return False  # half an answer is built: close after it, never write a second one
            raise
        finally:
            try:
                self._post_request(worker, req, environ, resp)
            except Exception:
                log.exception("post_request hook failed")

    def read_request(self, conn: Conn) -> Outcome:
        """Parse a request whose body the poller did not buffer and read the body into memory
        (up to server.max_body_bytes and one byte), so that it never holds a slot while it arrives."""
        conn.deadline = time.monotonic() + conn.client_timeout
        conn.stage = "headers"
        capture = _Capture()
        conn.writer = capture
        req = None
        limit = self._max_body_bytes
        try:
            parser = gunicorn.request_parser(self._cfg, _DeadlineSocket(conn), conn.client, conn.data)
            conn.data = b""
            req = next(parser)
            conn.stage = "body"
            length = gunicorn.body_length(req)
            if length is not None:
                body = req.body.read(length) if length <= limit else b""
                conn.must_close = length > limit
            else:
                body = req.body.read(limit + 1)
                # Over the limit the app answers 413; the rest of the body is never read.
                conn.must_close = gunicorn.is_chunked(req) and len(body) > limit
            gunicorn.replace_body(req, body)
            conn.buf += gunicorn.read_ahead(parser)  # read ahead: the next request (pipelining)
            conn.req = req
            return Outcome(conn, None)
        except (gunicorn.NoMoreData, StopIteration):
            return Outcome(conn, b"")
        except gunicorn.PARSE_ERRORS as exc:
            if req is not None:  # a malformed chunked body: the words the app uses for it
                self._counts.refused(req.path, "invalid")
                capture.sendall(http_json(400, error_body(400, f"malformed request body: {exc}"[:300]), close=True))
            else:
                self.handle_error(req, capture, conn.client, exc)
        except ssl.SSLError as exc:
            log.debug("TLS error from %s: %s", peer(conn.client), exc)
            return Outcome(conn, b"")
        except OSError as exc:
            log.info("client %s went away while sending its request: %s", peer(conn.client),
                     exc.strerror or type(exc).__name__)
            return Outcome(conn, b"")
        except Exception as exc:
            self.handle_error(req, capture, conn.client, exc)
        finally:
            conn.writer = conn.sock
            with contextlib.suppress(OSError):
                conn.sock.setblocking(False)  # the poller's again: it reads and writes without blocking
        return Outcome(conn, capture.value())

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """The JSON answer to a request the app never saw (gunicorn's would be an HTML page)."""
        if isinstance(exc, ClientTimeout):
            self._counts.client_timeout(exc.stage)
            log.info("closing a slow client connection from %s: %s", peer(addr), exc.description)
            if exc.stage != "handshake":  # no TLS session to answer on otherwise
                _write_error(client, http_json(408, error_body(408, exc.description or ""), close=True))
            return
        answer_error(req, client, addr, exc, self._counts)


def answer_error(req: Any, client: Any, addr: Any, exc: BaseException, counts: Counts) -> None:
    """A JSON 4xx/5xx for a request that failed before or outside the app (a malformed request
    line or header, a limit exceeded, an error of ours), where gunicorn would write an HTML page;
    nothing on a TLS error (no session to answer on)."""
    if isinstance(exc, ssl.SSLError):
        log.debug("TLS error from %s: %s", peer(addr), exc)
        return
    status = next((code for cls, code in gunicorn.CLIENT_ERRORS if isinstance(exc, cls)), 500)
    if status == 500:
        log.exception("unexpected error handling a request from %s", peer(addr))
        reason = f"internal error: {type(exc).__name__}"
    else:
        reason = f"malformed HTTP request: {exc}"[:300]
    counts.refused(getattr(req, "path", "") or "", "error" if status == 500 else "invalid")
    _write_error(client, http_json(status, error_body(status, reason), close=True))


def _write_error(client: Any, data: bytes) -> None:
    try:
        client.settimeout(1.0)
        client.sendall(data)
    except OSError:
        pass
