"""The contract with gunicorn: each internal webhook.http.gunicorn_adapter relies on, exercised against
the installed release; CI runs it under every supported release (.ci/gunicorn-contract, the releases
in .ci/gunicorn-releases.txt: pyproject.toml's ``gunicorn>=``, the newest of each later major, and
constraints.txt's pin). Requests come over a real socket pair."""

from __future__ import annotations

import logging
import os
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger
from packaging.version import Version

from webhook.http import gunicorn_adapter as adapter
from webhook.server.gunicorn import OPTIONAL_SETTINGS, EmbeddedGunicorn

CLIENT = ("127.0.0.1", 40000)
SERVER = ("127.0.0.1", 8443)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.settimeout(5)
        yield ours, theirs


def _parse(ours: socket.socket, theirs: socket.socket, sent: bytes, already: bytes = b"",
           cfg: Config | None = None) -> tuple[Any, Any]:
    theirs.sendall(sent)
    theirs.shutdown(socket.SHUT_WR)
    parser = adapter.request_parser(cfg or Config(), ours, CLIENT, already)
    return parser, next(parser)


def test_the_installed_release_is_supported() -> None:
    oldest, newest = adapter.SUPPORTED
    assert adapter.version() >= oldest
    assert newest is None or adapter.version() <= newest


def test_a_request_read_in_part_already_is_parsed_with_its_body_and_what_follows_is_handed_back(pair) -> None:
    first = b"POST /validate?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    second = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    parser, req = _parse(*pair, sent=first[20:] + second, already=first[:20])
    assert (req.method, req.path, req.query, req.should_close()) == ("POST", "/validate", "timeout=10s", False)
    assert adapter.body_length(req) == 5 and not adapter.is_chunked(req)
    assert req.body.read(5) == b"hello"
    assert req.body.read(65536) == b""
    ahead = adapter.read_ahead(parser)
    assert second.startswith(ahead)  # what the parser read past the first request, nothing else
    ours, _ = pair
    assert ahead + ours.recv(65536) == second


def test_a_chunked_body_is_known_as_such_and_a_malformed_one_raises_a_malformed_body_error(pair) -> None:
    sent = (b"POST /validate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\nzz\r\n")
    _, req = _parse(*pair, sent=sent)
    assert adapter.is_chunked(req) and adapter.body_length(req) is None
    with pytest.raises(adapter.PARSE_ERRORS):  # a 400, on every supported release (never "client gone")
        req.body.read(65536)


def test_a_body_read_in_full_replaces_the_stream(pair) -> None:
    _, req = _parse(*pair, sent=b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
    adapter.replace_body(req, b"abc")
    assert req.body.read() == b"abc"


def test_the_environ_and_response_the_worker_drives(pair) -> None:
    class Capture:
        def __init__(self) -> None:
            self.data = b""

        def sendall(self, data: bytes) -> None:
            self.data += bytes(data)

    cfg = Config()
    _, req = _parse(*pair, sent=b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    writer = Capture()
    resp, environ = adapter.create_environ(req, writer, CLIENT, SERVER, cfg)
    assert (environ["REQUEST_METHOD"], environ["PATH_INFO"]) == ("POST", "/validate")
    assert environ["wsgi.input"].read() == b"{}"
    assert isinstance(environ["wsgi.file_wrapper"], type)
    assert not resp.headers_sent
    resp.start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")])
    assert not resp.should_close()  # keep-alive, with a Content-Length
    resp.write(b"{}")
    resp.close()
    assert resp.headers_sent and writer.data.startswith(b"HTTP/1.1 200 OK\r\n") and writer.data.endswith(b"\r\n\r\n{}")
    resp.force_close()
    assert resp.should_close()


@pytest.mark.parametrize(("sent", "status"), [
    (b"GET /" + b"a" * 200 + b" HTTP/1.1\r\n\r\n", 414),
    (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(8)) + b"\r\n", 431),
    (b"NOT HTTP AT ALL\r\n\r\n", 400),
])
def test_parse_errors_map_to_their_status(pair, sent: bytes, status: int) -> None:
    cfg = Config()
    cfg.set("limit_request_line", 100)
    cfg.set("limit_request_fields", 4)
    with pytest.raises(Exception) as raised:
        _parse(*pair, sent=sent, cfg=cfg)
    assert next(code for cls, code in adapter.CLIENT_ERRORS if isinstance(raised.value, cls)) == status


def test_an_exhausted_source_ends_the_parse() -> None:
    class Empty:
        def recv(self, size: int) -> bytes:
            raise adapter.NoMoreData(b"")

    with pytest.raises((adapter.NoMoreData, StopIteration)):
        next(adapter.request_parser(Config(), Empty(), CLIENT, b""))


def test_the_workers_expose_what_ours_use() -> None:
    cfg = Config()
    log = Logger(cfg)
    for cls in (adapter.Worker, adapter.ThreadWorker):
        worker = cls(1, os.getpid(), [], None, 30, cfg, log)
        assert (worker.nr, worker.alive, worker.ppid, worker.sockets, worker.cfg) == (0, True, os.getpid(), [], cfg)
        assert worker.max_requests > 0
        for hook in ("init_process", "run", "notify", "handle_exit", "load_wsgi", "handle_error"):
            assert callable(getattr(worker, hook))
    assert adapter.open_connections(adapter.ThreadWorker(1, os.getpid(), [], None, 30, cfg, log)) == 0
    logging.getLogger("gunicorn.error").handlers.clear()


def test_the_embedded_application_sets_what_we_ask_and_skips_an_optional_setting_it_lacks() -> None:
    app = EmbeddedGunicorn(lambda: None, {"workers": 1, "keepalive": 7, "accesslog": None, "loglevel": "warning",
                                          **dict.fromkeys(OPTIONAL_SETTINGS, True)})
    assert isinstance(app, adapter.BaseApplication)
    assert (app.cfg.workers, app.cfg.keepalive) == (1, 7)
    for key in ("ssl_context", "pre_request", "post_request", "when_ready", "worker_class", "limit_request_line",
                "forwarder_headers", "secure_scheme_headers", "logconfig_dict"):
        assert key in app.cfg.settings


def test_ci_runs_the_contract_under_every_supported_release() -> None:
    """.ci/gunicorn-contract runs this file under each release of .ci/gunicorn-releases.txt: the list
    must hold pyproject.toml's lower bound, constraints.txt's pin and a release of every major between."""
    root = Path(__file__).resolve().parents[2]
    listed = [line.strip() for line in (root / ".ci" / "gunicorn-releases.txt").read_text(encoding="utf-8").splitlines()
              if line.strip() and not line.startswith("#")]
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    server = project["optional-dependencies"]["server"]
    [floor] = [spec.removeprefix("gunicorn>=") for spec in server if spec.startswith("gunicorn>=")]
    [pin] = [line.split("==")[1].strip() for line in (root / "constraints.txt").read_text(encoding="utf-8").splitlines()
             if line.startswith("gunicorn==")]
    releases = [Version(release) for release in listed]
    assert Version(floor) in releases and Version(pin) in releases
    assert {release.major for release in releases} == set(range(Version(floor).major, Version(pin).major + 1))
    assert "bash .ci/gunicorn-contract" in (root / ".ci" / "run").read_text(encoding="utf-8")
