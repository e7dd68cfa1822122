"""The real server's scheduling under hostile clients: probes never wait for a slot, a client that
does not read holds no slot, the shed latch clears, a disconnect is one log line, a body over the
limit is refused before it is sent, and bytes that arrived in time are never called late."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import threading
from contextlib import ExitStack

import pytest

from tests.support.helpers import admission_review, gpushare_server, load_json, wait_until
from tests.support.manifests import MEM
from tests.support.raw_client import (
    metric,
    one_slot_server,
    read_response,
    request,
    review_bytes,
    small_costly_review,
    start_costly,
    tls,
)
from webhook.settings import OverloadSettings

pytestmark = pytest.mark.processes


def test_probes_and_scrapes_are_answered_while_the_only_slot_evaluates_a_costly_review(tmp_path):
    """Health checks and scrapes never wait for an evaluation slot: with the only one busy for
    seconds and a review waiting behind it, /healthz, /readyz and /metrics are answered, and the
    costly review is still evaluating when they are."""
    with one_slot_server(tmp_path) as server, ExitStack() as stack:
        holder = start_costly(server, stack, "probes")
        queued = tls(server, stack, timeout=120)
        queued.sendall(request(review_bytes(), path="/validate?timeout=30s"))
        session = server.session()
        wait_until(lambda: metric(server, "gpushare_waiting_requests") == 1, what="the review waiting")
        for path in ("/healthz", "/readyz"):
            assert session.get(server.url + path, timeout=15).status_code == 200
        text = session.get(server.url + "/metrics", timeout=15).text
        assert "gpushare_in_flight_requests 1.0" in text.splitlines()  # the costly review, still running
        assert read_response(holder)[0] == 200
        assert read_response(queued)[0] == 200


def test_probes_and_scrapes_never_feed_the_review_time_estimate(tmp_path):
    with gpushare_server(tmp_path) as server:
        session = server.session()
        for _ in range(50):
            assert session.get(server.url + "/healthz", timeout=15).status_code == 200
            assert session.get(server.url + "/metrics", timeout=15).status_code == 200
        assert metric(server, "gpushare_review_seconds_estimate") == 0.0
        assert server.post_json("/validate", admission_review(load_json("pod-realistic.json"))).status_code == 200
        assert metric(server, "gpushare_review_seconds_estimate") > 0.0


def _not_reading_client(server, stack: ExitStack) -> ssl.SSLSocket:
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
    raw.settimeout(15)
    raw.connect(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
    return stack.enter_context(ssl.create_default_context(cafile=server.ca).wrap_socket(
        raw, server_hostname="localhost"))


def _big_answer_review(uid: str) -> bytes:
    """A /mutate review whose answer (a patch for 600 containers, about 90 KB) is far larger than a
    small window, and larger than the review: the server's send buffer (which Linux grows up to
    net.ipv4.tcp_wmem's maximum, 4 MiB by default) fills after some tens of them. The review stays
    under overload.inline_max_bytes, so the poller may evaluate it itself."""
    pod = load_json("pod-realistic.json")
    pod["spec"]["containers"] = [{"name": f"cuda-{i}", "image": "cuda:12", "resources": {"limits": {MEM: "4"}}}
                                 for i in range(600)]
    body = json.dumps(admission_review(pod, uid=uid)).encode()
    assert len(body) <= OverloadSettings().inline_max_bytes
    return request(body, path="/mutate")


def _answered(server, session, endpoint: str) -> int:
    text = session.get(server.url + "/metrics", timeout=10).text
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("gpushare_admission_requests_total{") and f'endpoint="{endpoint}"' in line))


def _stall(server, stalled: ssl.SSLSocket) -> list[str]:
    """Send reviews one at a time (each once the last was evaluated, by the server's count) and
    read none of the answers, until the server stops reading from the connection: its answer
    waits unsent. The uids sent."""
    scrapes = server.session()
    uids: list[str] = []
    while len(uids) < 500:
        uids.append(f"stalled-{len(uids)}")
        stalled.sendall(_big_answer_review(uids[-1]))
        try:  # one review at a time: the next goes once the server has evaluated this one
            wait_until(lambda: _answered(server, scrapes, "mutate") == len(uids), timeout=3,
                       what="the stalled connection's review evaluated")
        except TimeoutError:
            break  # an answer could not be written: the server stopped reading from it
    assert 1 < len(uids) < 500, f"{len(uids)} reviews: the client's socket never filled up"
    return uids


@pytest.mark.parametrize("inline", ["false", "true"])
def test_a_client_that_does_not_read_holds_no_slot(tmp_path, inline):
    """One evaluation slot; reviews evaluated there (inline evaluation off) or by the poller. A
    client sends reviews with large answers and reads none: once its socket is full its answer
    waits in the poller, nothing is evaluating, the server reads nothing more from that client, and
    other clients' reviews and probes are answered at once; when the client reads, every answer is
    there, whole and in order, and the connection serves on."""
    env = {"GPUSHARE_OVERLOAD__APP_CONCURRENCY": "1", "GPUSHARE_OVERLOAD__INLINE_ADMISSION": inline,
           "GPUSHARE_OVERLOAD__CLIENT_TIMEOUT_SECONDS": "60"}
    with gpushare_server(tmp_path, env=env) as server, ExitStack() as stack:
        stalled = _not_reading_client(server, stack)
        uids = _stall(server, stalled)
        assert metric(server, "gpushare_in_flight_requests") == 0
        for i in range(3):
            other = server.post_json("/validate", admission_review(load_json("pod-realistic.json"), uid=f"o{i}"))
            assert other.status_code == 200 and other.json()["response"]["uid"] == f"o{i}"
        assert server.session().get(server.url + "/healthz", timeout=15).status_code == 200
        for uid in uids:
            status, _, body = read_response(stalled)
            assert status == 200 and json.loads(body)["response"]["uid"] == uid
        stalled.sendall(_big_answer_review("after"))
        assert json.loads(read_response(stalled)[2])["response"]["uid"] == "after"


def test_a_client_that_goes_away_before_its_answer_is_one_log_line(tmp_path):
    """A client that resets its connection while its answer waits costs one line in the log, no traceback."""
    with gpushare_server(tmp_path) as server, ExitStack() as stack:
        stalled = _not_reading_client(server, stack)
        _stall(server, stalled)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        stalled.close()  # a reset, the answer untaken
        wait_until(lambda: "went away before taking its answer" in server.log(), what="the log line")
        assert server.post_json("/validate", admission_review(load_json("pod-realistic.json"))).status_code == 200
        log = server.log()
        assert log.count("went away before taking its answer") == 1
        assert "Traceback" not in log


def test_the_shed_latch_clears_after_an_attack_the_next_review_is_answered(tmp_path):
    """A costly review pushes the review-time estimate above what a timeout=1s review may take (here
    1 ms, with overload.answer_margin_seconds=0.499); once nothing is waiting, the next such review
    is evaluated and answered, not refused on the estimate."""
    env = {"GPUSHARE_OVERLOAD__ANSWER_MARGIN_SECONDS": "0.499",
           "GPUSHARE_OVERLOAD__ESTIMATE_HALF_LIFE_SECONDS": "60"}
    with one_slot_server(tmp_path, env) as server, ExitStack() as stack:
        assert read_response(start_costly(server, stack, "attack"))[0] == 200
        assert metric(server, "gpushare_review_seconds_estimate") > 0.001
        wait_until(lambda: metric(server, "gpushare_in_flight_requests") == 0
                   and metric(server, "gpushare_waiting_requests") == 0, what="the server idle")
        reply = server.post_json("/validate?timeout=1s", admission_review(load_json("pod-realistic.json")))
        assert reply.status_code == 200, reply.text


def test_a_body_over_the_limit_is_refused_before_100_continue(server):
    """Expect: 100-continue with a Content-Length over server.max_body_bytes: a 413 at once, never a
    100 Continue that would make the client send megabytes to be refused."""
    with ExitStack() as stack:
        sock = tls(server, stack)
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Expect: 100-continue\r\nContent-Length: 5000000\r\n\r\n")
        status, headers, body = read_response(sock)
    assert status == 413 and headers["connection"] == "close"
    assert json.loads(body)["error"] == {"code": 413, "reason": "body larger than 4194304 bytes"}


def test_an_expected_body_within_the_limit_is_asked_for_and_judged(server):
    with ExitStack() as stack:
        sock = tls(server, stack)
        body = review_bytes()
        sock.sendall(request(body, extra="Expect: 100-continue\r\n")[: -len(body)])
        assert read_response(sock)[0] == 100
        sock.sendall(body)
        status, _, reply = read_response(sock)
    assert status == 200 and json.loads(reply)["response"]["allowed"] is True


def test_bytes_that_arrived_in_time_are_not_late_because_the_server_was_busy(tmp_path):
    """A request's rest arrives within its deadline while the poller evaluates a costly review (it
    arrived whole and small: the poller evaluates it itself) for longer than that deadline: the
    request is answered, not refused as late."""
    env = {"GPUSHARE_OVERLOAD__CLIENT_TIMEOUT_SECONDS": "0.4"}
    with one_slot_server(tmp_path, env, nodes=8000) as server, ExitStack() as stack:
        late = tls(server, stack, timeout=120)
        late.sendall(request(review_bytes()))
        assert read_response(late)[0] == 200  # kept alive: its next request has 0.4 s from its first byte
        costly = tls(server, stack, timeout=120)
        head, body = request(review_bytes(), path="/validate?timeout=60s").split(b"\r\n\r\n", 1)
        late.sendall(head + b"\r\n\r\n")
        costly.sendall(request(small_costly_review("busy"), path="/validate?timeout=60s"))
        threading.Event().wait(0.1)  # the stimulus: the rest arrives in time, while the poller evaluates
        late.sendall(body)
        assert read_response(costly)[0] == 200
        status, _, reply = read_response(late)
        assert status == 200, reply


def test_without_inline_admission_a_small_costly_review_is_evaluated_on_a_thread(tmp_path):
    """overload.inline_admission: false: a review small enough for the poller to evaluate itself
    (under overload.inline_max_bytes) but costing seconds goes to the only slot on a thread, so
    the poller answers a scrape that sees it evaluating, and probes, meanwhile. (Evaluated by the
    poller, as with the default, nothing would be answered until it was done.)"""
    env = {"GPUSHARE_OVERLOAD__INLINE_ADMISSION": "false"}
    with one_slot_server(tmp_path, env, nodes=6000) as server, ExitStack() as stack:
        costly = tls(server, stack, timeout=120)
        costly.sendall(request(small_costly_review("thread"), path="/validate?timeout=60s"))
        wait_until(lambda: metric(server, "gpushare_in_flight_requests") == 1, interval=0.01,
                   what="a scrape answered while the small costly review evaluates")
        assert server.session().get(server.url + "/healthz", timeout=15).status_code == 200
        assert read_response(costly)[0] == 200


def test_small_reviews_behind_one_on_a_thread_wait_for_the_slot_then_the_poller_takes_them_back(tmp_path):
    """The hand-over: a costly review over overload.inline_max_bytes holds the only slot on a
    thread; small reviews sent meanwhile wait for that slot (the poller does not evaluate them
    beside it), each answered with its own uid once it is free; then the server is idle and the
    next small review is answered as usual."""
    with one_slot_server(tmp_path) as server, ExitStack() as stack:
        holder = start_costly(server, stack, "handover")
        small = [tls(server, stack, timeout=120) for _ in range(3)]
        for i, sock in enumerate(small):
            sock.sendall(request(json.dumps(admission_review(load_json("pod-realistic.json"), uid=f"s{i}")).encode()))
            wait_until(lambda n=i + 1: metric(server, "gpushare_waiting_requests") == n,
                       what=f"{i + 1} small reviews waiting")
        assert metric(server, "gpushare_in_flight_requests") == 1  # the costly one alone
        assert read_response(holder)[0] == 200
        for i, sock in enumerate(small):
            status, _, reply = read_response(sock)
            assert status == 200 and json.loads(reply)["response"]["uid"] == f"s{i}"
        wait_until(lambda: metric(server, "gpushare_in_flight_requests") == 0
                   and metric(server, "gpushare_waiting_requests") == 0, what="the server idle")
        reply = server.post_json("/validate", admission_review(load_json("pod-realistic.json"), uid="after"))
        assert reply.status_code == 200 and reply.json()["response"]["uid"] == "after"
