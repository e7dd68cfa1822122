"""The real server under slow clients (slowloris), overload and SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import pytest

from tests.support.helpers import admission_review, gpushare_server, load_json, wait_until
from tests.support.raw_client import (
    closed_by_server,
    metric,
    one_slot_server,
    read_response,
    request,
    review_bytes,
    start_costly,
    tls,
)

pytestmark = pytest.mark.processes

CLIENT_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory):
    env = {"GPUSHARE_OVERLOAD__CLIENT_TIMEOUT_SECONDS": str(CLIENT_TIMEOUT), "GPUSHARE_SERVER__THREADS": "4"}
    with gpushare_server(tmp_path_factory.mktemp("slow"), env=env) as running:
        yield running


def test_slow_headers_get_a_408(slow_server):
    """A new connection's first request must arrive within overload.new_connection_seconds (3 s)."""
    with tls(slow_server) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n")  # and never the rest
        status, headers, body = read_response(sock)
    assert status == 408 and headers["connection"] == "close"
    assert "request headers did not arrive within 3 s (overload.new_connection_seconds)" in \
        json.loads(body)["error"]["reason"]


def test_slow_headers_on_a_kept_alive_connection_get_a_408(slow_server):
    """On a kept-alive connection the clock starts at the request's first byte:
    overload.client_timeout_seconds (1 s here)."""
    with tls(slow_server) as sock:
        sock.sendall(request(review_bytes()))
        assert read_response(sock)[0] == 200
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n")  # and never the rest
        status, headers, body = read_response(sock)
    assert status == 408 and headers["connection"] == "close"
    assert "request headers did not arrive within 1 s (overload.client_timeout_seconds)" in \
        json.loads(body)["error"]["reason"]


def test_slow_body_gets_a_408(slow_server):
    with tls(slow_server) as sock:
        sock.sendall(request(review_bytes())[:-100])  # the last 100 bytes never come
        status, _, body = read_response(sock)
    assert status == 408
    assert "request body did not arrive" in json.loads(body)["error"]["reason"]


def test_stalled_handshake_and_idle_connections_are_closed(slow_server):
    port = int(slow_server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=15) as idle, \
            socket.create_connection(("127.0.0.1", port), timeout=15) as stalled:
        stalled.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, then nothing
        assert idle.recv(1) == b""
        assert closed_by_server(stalled)


def test_slowloris_never_hangs_real_clients(slow_server):
    """Twice as many trickling connections as threads: a real review still gets an answer (a 200,
    or a fast 503 while slow clients hold every thread), and a 200 once they are cut off."""
    review = admission_review(load_json("pod-realistic.json"))
    with ExitStack() as stack:
        for _ in range(8):
            tls(slow_server, stack).sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\n")
        for _ in range(8):
            sock = socket.create_connection(("127.0.0.1", int(slow_server.url.rsplit(":", 1)[1])), timeout=15)
            stack.enter_context(sock).sendall(b"\x16\x03\x01")
        during = slow_server.post_json("/validate", review)
        assert during.status_code in (200, 503), during.text
        if during.status_code == 503:
            assert "overloaded" in during.json()["error"]["reason"]
        # The trickling connections are cut off by their deadline (not by closing them here).
        session = slow_server.session()
        wait_until(lambda: 'gpushare_client_timeouts_total{stage="headers"}' in
                   session.get(slow_server.url + "/metrics", timeout=10).text, what="a headers timeout")
    after = slow_server.post_json("/validate", review)
    assert after.status_code == 200 and after.json()["response"]["uid"] == review["request"]["uid"]


def test_pre_dialled_connection_is_served_after_the_client_timeout(slow_server):
    """A connection that handshakes and sends its request later (as HTTP clients pre-dial) is not a
    slow client as long as it sends within overload.new_connection_seconds (3 s): it waits in the
    poller, not against the request deadline (1 s here)."""
    with tls(slow_server) as sock:
        sock.do_handshake()
        # Let the deadline of a slow client pass; the connection must still be usable.
        threading.Event().wait(CLIENT_TIMEOUT * 2)
        sock.sendall(request(review_bytes()))
        status, _, body = read_response(sock)
    assert status == 200 and json.loads(body)["response"]["allowed"] is True


@pytest.mark.both_workers
def test_a_burst_of_100_concurrent_reviews_is_answered_in_full(tmp_path, worker_kind):
    """A Job starting 100 GPU pods at once: 100 reviews arrive together on 100 connections, each
    with the deadline the API server sends; every one is answered with its verdict, none refused."""
    review = admission_review(load_json("pod-realistic.json"))
    with gpushare_server(tmp_path, worker=worker_kind) as server:
        sessions = [server.session() for _ in range(100)]
        for session in sessions:  # connections open before the burst, as the API server keeps them
            assert session.get(server.url + "/healthz", timeout=15).status_code == 200
        start = threading.Barrier(len(sessions))

        def one(session) -> tuple[int, str]:
            start.wait(timeout=30)
            reply = server.post_json("/validate?timeout=5s", review, session=session)
            return reply.status_code, reply.text

        with ThreadPoolExecutor(len(sessions)) as pool:
            answers = list(pool.map(one, sessions))
    refused = [text for status, text in answers if status != 200]
    assert not refused, f"{len(refused)} of 100 refused, e.g. {refused[0]}"
    assert all(json.loads(text)["response"]["uid"] == review["request"]["uid"] for _, text in answers)


@pytest.mark.both_workers
def test_a_review_that_waited_past_its_deadline_for_a_slot_is_refused_not_evaluated(tmp_path, worker_kind):
    """One evaluation slot, held by a costly review: a review queued behind it with the shortest
    deadline the API server sends (timeout=1s) is refused with a 503 naming that deadline once its
    turn comes too late, instead of being answered after the API server gave up; the costly one is
    still answered, and the refused connection serves normally afterwards."""
    with one_slot_server(tmp_path, worker=worker_kind) as server, ExitStack() as stack:
        body = review_bytes()
        holder = start_costly(server, stack, "late")
        queued = tls(server, stack, timeout=120)
        queued.sendall(request(body, path="/validate?timeout=1s"))
        assert read_response(holder)[0] == 200
        status, headers, reply = read_response(queued)
        assert status == 503 and headers["connection"] == "keep-alive"
        reason = json.loads(reply)["error"]["reason"]
        assert "overloaded: this review waited" in reason and "failurePolicy" in reason
        assert "after its deadline (the API server's timeout=1s" in reason and "leaves 0.25 s" in reason
        queued.sendall(request(body, path="/validate?timeout=1s"))
        assert read_response(queued)[0] == 200
        metrics = server.session().get(server.url + "/metrics", timeout=10).text
        assert 'outcome="overloaded"' in metrics


@pytest.mark.both_workers
def test_a_review_that_cannot_meet_its_deadline_is_refused_at_the_door_and_one_that_can_waits(tmp_path,
                                                                                             worker_kind):
    """While a review has waited for the only slot longer than a 1 s deadline allows, the server
    answers a kept-alive connection's review with timeout=1s at once (the project's worker in its
    poller): a 503 naming the deadline, connection kept alive; a review with timeout=60s on
    another connection is queued and answered once the slot is free."""
    # 6,000 nodes: the costly review holds the slot for seconds, well past the wait below (with 2,000
    # it could end first on a quiet host, and the short review then found nothing waiting).
    with one_slot_server(tmp_path, nodes=6000, worker=worker_kind) as server, ExitStack() as stack:
        body = review_bytes()
        short, patient = (tls(server, stack, timeout=120) for _ in range(2))
        for kept in (short, patient):
            kept.sendall(request(body))
            assert read_response(kept)[0] == 200  # now kept-alive connections, parked in the poller
        holder = start_costly(server, stack, "door")
        queued = tls(server, stack, timeout=120)
        queued.sendall(request(body, path="/validate?timeout=60s"))
        wait_until(lambda: metric(server, "gpushare_waiting_requests") == 1, what="the review waiting")
        threading.Event().wait(0.5)  # the queued review's wait passes what timeout=1s allows: the stimulus
        short.sendall(request(body, path="/validate?timeout=1s"))
        status, headers, reply = read_response(short)  # while the costly review still holds the slot
        assert status == 503 and headers["connection"] == "keep-alive"
        reason = json.loads(reply)["error"]["reason"]
        assert "would be answered after its deadline (the API server's timeout=1s" in reason
        assert "failurePolicy" in reason
        patient.sendall(request(body, path="/validate?timeout=60s"))
        assert read_response(holder)[0] == 200
        assert read_response(queued)[0] == 200
        assert read_response(patient)[0] == 200
        short.sendall(request(body, path="/validate?timeout=1s"))
        assert read_response(short)[0] == 200


@pytest.mark.both_workers
def test_reviews_past_the_waiting_limit_are_refused_at_the_door(tmp_path, worker_kind):
    """Sustained overload: with overload.max_waiting_requests=1 and that one review waiting, the
    next review on a kept-alive connection is refused at the door although its deadline is far."""
    with one_slot_server(tmp_path, {"GPUSHARE_OVERLOAD__MAX_WAITING_REQUESTS": "1"}, worker=worker_kind) as server, \
            ExitStack() as stack:
        body = review_bytes()
        kept = tls(server, stack)
        kept.sendall(request(body))
        assert read_response(kept)[0] == 200
        holder = start_costly(server, stack, "full")
        queued = tls(server, stack, timeout=120)
        queued.sendall(request(body, path="/validate?timeout=30s"))
        wait_until(lambda: metric(server, "gpushare_waiting_requests") == 1, what="the review waiting")
        for _ in range(3):
            kept.sendall(request(body, path="/validate?timeout=30s"))
            status, _, reply = read_response(kept)
            assert status == 503
            assert "1 reviews are already waiting to be evaluated (overload.max_waiting_requests)" in \
                json.loads(reply)["error"]["reason"]
        assert read_response(holder)[0] == 200
        assert read_response(queued)[0] == 200
        # The door counts its refusals once per poller turn; a scrape still sees every one.
        metrics = server.session().get(server.url + "/metrics", timeout=10).text
        assert ('gpushare_admission_requests_total{endpoint="validate",kind="",operation="",'
                'outcome="overloaded"} 3.0') in metrics.splitlines()


def test_sigterm_drains_a_request_in_flight(tmp_path):
    with one_slot_server(tmp_path) as server, ExitStack() as stack:
        # Kept-alive probes: once the worker is draining it answers them with Connection: close.
        probes = [tls(server, stack) for _ in range(40)]
        for probe in probes:
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(probe)[0] == 200
        in_flight = start_costly(server, stack, "drain")
        server.process.send_signal(signal.SIGTERM)

        def draining() -> bool:
            probe = probes.pop()
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            return read_response(probe)[1].get("connection") == "close"

        wait_until(draining, timeout=10, interval=0.05, what="the worker to start draining")
        status, _, reply = read_response(in_flight)
        assert status == 200 and json.loads(reply)["response"]["allowed"] is True
        assert server.process.wait(timeout=30) == 0


def test_a_thousand_idle_tls_connections_cannot_lock_out_the_api_server(tmp_path):
    """1,000 connections that finish the TLS handshake and send nothing, against
    overload.max_connections=300: new connections are still accepted, the oldest idle ones are
    closed to make room (those that never sent anything before the kept-alive one), so the
    connection count stays bounded and a kept-alive client and a client on a new connection are
    both still served."""
    review = admission_review(load_json("pod-realistic.json"))
    with gpushare_server(tmp_path, env={"GPUSHARE_OVERLOAD__MAX_CONNECTIONS": "300"}) as server, \
            ExitStack() as stack:
        kept = server.session()
        assert server.post_json("/validate?timeout=5s", review, session=kept).status_code == 200
        context = ssl.create_default_context(cafile=server.ca)
        port = int(server.url.rsplit(":", 1)[1])
        opened = 0
        for _ in range(1000):
            try:
                sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=15),
                                           server_hostname="localhost")
            except (OSError, ssl.SSLError):
                continue  # closed by the server while being opened: room was made for a newer one
            stack.enter_context(sock)
            opened += 1
        assert opened >= 900
        reply = server.post_json("/validate?timeout=5s", review, session=kept)
        assert reply.status_code == 200 and reply.json()["response"]["uid"] == review["request"]["uid"]
        assert server.post_json("/validate?timeout=5s", review).status_code == 200  # a new connection
        assert metric(server, "gpushare_open_connections") <= 300
        assert metric(server, 'gpushare_connections_evicted_total{kind="unrequested"}') >= 1000 - 300
        assert metric(server, 'gpushare_connections_evicted_total{kind="idle"}') == 0


def test_slow_headers_bodies_and_handshakes_hold_no_thread(tmp_path):
    """Forty connections each trickling headers, a body and a TLS handshake (120 against 4 threads)
    wait in the poller: reviews on a kept-alive connection and on new connections are answered
    while every one of the slow connections is still open and unanswered."""
    env = {"GPUSHARE_SERVER__THREADS": "4", "GPUSHARE_OVERLOAD__NEW_CONNECTION_SECONDS": "30",
           "GPUSHARE_OVERLOAD__CLIENT_TIMEOUT_SECONDS": "30"}
    review = admission_review(load_json("pod-realistic.json"))
    body = review_bytes()
    with gpushare_server(tmp_path, env=env) as server, ExitStack() as stack:
        kept = server.session()
        assert server.post_json("/validate", review, session=kept).status_code == 200
        port = int(server.url.rsplit(":", 1)[1])
        slow = []
        for _ in range(40):
            slow.append(tls(server, stack))
            slow[-1].sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nX-Slow: a")
            slow.append(tls(server, stack))
            slow[-1].sendall(request(body)[:-100])
            raw = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=15))
            raw.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello
            slow.append(raw)
        for _ in range(5):
            assert server.post_json("/validate?timeout=5s", review, session=kept).status_code == 200
            assert server.post_json("/validate?timeout=5s", review).status_code == 200
        for sock in slow:  # still open, nothing answered: they cost the server no thread meanwhile
            sock.setblocking(False)
            with pytest.raises((BlockingIOError, ssl.SSLWantReadError)):
                sock.recv(1)


def test_new_connections_are_issued_no_tls_session_tickets(server):
    """kube-apiserver's Go client keeps no TLS session cache (client-go's TLS configuration sets
    none), so it never resumes a session: issuing tickets would only add work to every new
    connection, and the API server dials new ones whenever more than 25 calls overlap."""
    with ExitStack() as stack:
        sock = tls(server, stack)
        assert sock.version() == "TLSv1.3"
        sock.sendall(request(review_bytes()))
        status, _, _ = read_response(sock)  # tickets, if any, arrive before the answer
        assert status == 200
        assert sock.session is not None
        assert not sock.session.has_ticket


def test_a_burst_of_new_connections_past_the_slow_limit_is_served_in_full(tmp_path):
    """The API server keeps 25 idle connections and dials one per call past them, so a burst of
    calls arrives as a burst of TLS handshakes. Sixty connections opened at once against
    overload.max_slow_connections=20: none is closed half done (each waits on the server, not on
    its client), the server stops accepting until there is room, and every review is answered."""
    env = {"GPUSHARE_OVERLOAD__MAX_SLOW_CONNECTIONS": "20", "GPUSHARE_OVERLOAD__SLOW_AFTER_SECONDS": "10"}
    with gpushare_server(tmp_path, env=env) as server, ExitStack() as stack:
        port = int(server.url.rsplit(":", 1)[1])
        raws = [stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=15))
                for _ in range(60)]  # all connected (the kernel's backlog) before any handshake
        context = ssl.create_default_context(cafile=server.ca)

        def review(raw: socket.socket) -> int:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(request(review_bytes()))
                return read_response(tls)[0]

        with ThreadPoolExecutor(max_workers=60) as pool:
            statuses = list(pool.map(review, raws))
        assert statuses == [200] * 60
        assert metric(server, 'gpushare_connections_evicted_total{kind="slow"}') == 0


def test_slow_connections_past_the_limit_are_closed_once_they_have_waited(tmp_path):
    """The slowloris protection stays: five connections trickling a TLS handshake against
    overload.max_slow_connections=5 and slow_after_seconds=0.3 are closed for room once they are
    that old, and a new client is served."""
    env = {"GPUSHARE_OVERLOAD__MAX_SLOW_CONNECTIONS": "5", "GPUSHARE_OVERLOAD__SLOW_AFTER_SECONDS": "0.3",
           "GPUSHARE_OVERLOAD__NEW_CONNECTION_SECONDS": "30"}
    review = admission_review(load_json("pod-realistic.json"))
    with gpushare_server(tmp_path, env=env) as server, ExitStack() as stack:
        port = int(server.url.rsplit(":", 1)[1])
        slow = []
        for _ in range(5):
            raw = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=15))
            raw.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, and no more
            slow.append(raw)

        def first_slow_closed() -> bool:
            # Each new connection needs room; it is made by closing the oldest trickler once it
            # has waited slow_after_seconds.
            assert server.post_json("/validate?timeout=5s", review).status_code == 200
            slow[0].settimeout(0.05)  # a look, not a wait: the deadline of wait_until decides
            try:
                return closed_by_server(slow[0])
            except TimeoutError:
                return False

        wait_until(first_slow_closed, timeout=20, what="the oldest trickling connection closed for room")
        assert metric(server, 'gpushare_connections_evicted_total{kind="slow"}') >= 1
