"""Hostile input: generated reviews (hypothesis) at the engine and the real server, and the
classic attacks (deep nesting, huge arrays, duplicate keys, non-UTF-8, malformed HTTP)."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.model.resources import POD_SPEC_PATHS, ShapeError
from tests.support.helpers import admission_review, load_json
from tests.support.hostile import ERROR_VALIDATOR, check_answer, good_reviews, hostile_reviews, json_values
from tests.support.profiles import examples
from webhook.documents.manifests import ManifestError, parse_manifests
from webhook.routes.app import create_app
from webhook.routes.services import Services

pytestmark = pytest.mark.processes

FAST = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


@pytest.fixture(scope="module")
def client(settings, engine):
    from webhook.state.snapshot import load_demo_snapshot

    app = create_app(Services(settings, engine, load_demo_snapshot(settings.names)))
    return app.test_client()



@settings(max_examples=examples(1500), deadline=None, suppress_health_check=FAST)
@given(review=hostile_reviews(), path=st.sampled_from(["/mutate", "/validate"]))
def test_app_answers_every_generated_review(client, review, path):
    reply = client.post(path, data=json.dumps(review), content_type="application/json")
    check_answer(review, reply.status_code, reply.data)


@settings(max_examples=examples(1000), deadline=None, suppress_health_check=FAST)
@given(kind=st.sampled_from(sorted(POD_SPEC_PATHS)), spec=json_values, data=st.data())
def test_engine_raises_nothing_but_shape_errors(engine, demo_state, kind, spec, data):
    obj = data.draw(st.sampled_from([
        {"kind": kind, "metadata": {"name": "x"}, "spec": spec},
        {"kind": kind, "spec": {"template": {"spec": spec}}},
        {"kind": kind, "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": spec}]}}}},
        {"kind": kind, "metadata": spec, "spec": {"containers": [{"resources": {"limits": spec}}]}},
    ]))
    subject = engine.subject(kind, obj, state=demo_state)
    for run in (engine.validate, engine.mutate):
        with contextlib.suppress(ShapeError):
            run(subject)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=FAST)
@given(review=hostile_reviews(), path=st.sampled_from(["/mutate", "/validate"]))
def test_real_server_answers_every_generated_review(server, session, review, path):
    reply = server.post_json(path, review, session)
    check_answer(review, reply.status_code, reply.content)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=FAST)
@given(data=st.data())
def test_real_server_answers_corrupted_bytes(server, session, data):
    body = bytearray(json.dumps(data.draw(st.sampled_from(good_reviews()))).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at:at + data.draw(st.integers(0, 3))] = data.draw(st.binary(max_size=3))
    reply = session.post(server.url + "/validate", data=bytes(body), timeout=15)
    assert reply.status_code in (200, 400), reply.text[:300]
    if reply.status_code == 400:
        assert reply.json()["error"]["reason"]
    else:
        assert reply.json()["kind"] == "AdmissionReview"


@settings(max_examples=examples(500), deadline=None)
@given(doc=json_values, text=st.text(max_size=200))
def test_manifest_parser_and_engine_never_crash(engine, doc, text):
    for source in (yaml.safe_dump(doc), json.dumps(doc), text, yaml.safe_dump({"kind": "Pod", "spec": doc})):
        try:
            manifests = parse_manifests(source, "gen.yaml")
        except ManifestError as exc:
            assert str(exc).startswith("gen.yaml")
            continue
        for manifest in manifests:
            if manifest.kind in POD_SPEC_PATHS:
                with contextlib.suppress(ShapeError):
                    engine.validate(engine.subject(manifest.kind, manifest.obj))


def _valid_body() -> dict:
    return admission_review(load_json("pod-realistic.json"))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nested too deeply"),
        (b'{"x": NaN}', "NaN is not a JSON value"),
        (b'{"x": -Infinity}', "Infinity is not a JSON value"),
        (b'{"x": ' + b"9" * 5000 + b"}", "more than 4300 digits"),
        (b"\xef\xbb\xbf{}", "invalid JSON"),
        ('{"kind": "caf\u00e9"}'.encode("latin-1"), "not UTF-8"),
        ('{"kind": "x"}'.encode("utf-16"), "not UTF-8"),
        (b"[" + b"0," * 1_500_000 + b"0]", "must be a JSON object"),
        (json.dumps({**_valid_body(), "request": {**_valid_body()["request"],
                                                  "object": {"kind": "Pod", "spec": {"containers": [1] * 200_000}}}}
                    ).encode(), "spec.containers[0]: must be an object"),
    ],
    ids=["deep-arrays", "deep-objects", "nan", "infinity", "long-number",
         "bom", "latin-1", "utf-16", "huge-array", "huge-containers"],
)
@pytest.mark.both_workers
def test_hostile_bodies_get_a_400_with_a_reason(server, session, body, reason):
    reply = session.post(server.url + "/validate", data=body, headers={"Content-Type": "application/json"},
                         timeout=30)
    assert reply.status_code == 400, reply.text[:300]
    assert reason in reply.json()["error"]["reason"]


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_a_review_that_repeats_a_key_is_answered_on_its_last_value(server, session, path):
    """The API server cannot repeat a key (it encodes Go values); a hand-crafted review that does
    is read as the last value wins, the reading Go's decoder gives it (docs/operations.md)."""
    body = json.dumps(_valid_body()).replace('"uid": "', '"uid": "first", "uid": "last-', 1)
    reply = session.post(server.url + path, data=body.encode(), headers={"Content-Type": "application/json"},
                         timeout=30)
    assert reply.status_code == 200, reply.text[:300]
    assert reply.json()["response"]["uid"].startswith("last-")


@pytest.mark.parametrize("name", [["NVIDIA_VISIBLE_DEVICES"], {"a": 1}, 5, None])
@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_an_env_name_that_is_no_string_is_answered(client, path, name):
    """An env name of another type is no name a rule judges (it was a 500: a list cannot be hashed)."""
    review = _valid_body()
    review["request"]["object"]["spec"]["containers"][0]["env"] = [
        {"name": name, "value": "1"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    reply = client.post(path, data=json.dumps(review), content_type="application/json")
    assert reply.status_code == 200, reply.data[:300]
    assert reply.json["response"]["uid"] == review["request"]["uid"]


def test_wrong_types_in_every_review_field(server, session):
    """Every field of the review itself, replaced by every JSON type: a 400 naming the field, or an answer."""
    base = _valid_body()
    for field in [*base, *(f"request.{k}" for k in base["request"])]:
        for wrong in (None, True, 7, 1.5, "s", [1], {"a": 1}):
            review = json.loads(json.dumps(base))
            if field.startswith("request."):
                review["request"][field[8:]] = wrong
            else:
                review[field] = wrong
            reply = server.post_json("/validate", review, session)
            check_answer(review, reply.status_code, reply.content)
            if reply.status_code == 400 and field != "request.object":
                assert field.split(".")[-1] in reply.json()["error"]["reason"], (field, wrong, reply.text)


def _raw_exchange(server, request: bytes) -> bytes:
    context = ssl.create_default_context(cafile=server.ca)
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(request)
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
        return data


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", 400),
        (b"POST /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        (b"POST /validate HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(100)) + b"\r\n", 431),
    ],
    ids=["request-line", "content-length", "long-uri", "many-headers"],
)
@pytest.mark.both_workers
def test_malformed_http_gets_a_json_error(server, request_bytes, status):
    reply = _raw_exchange(server, request_bytes)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d" % status), reply[:200]
    assert b"application/json" in head
    error = json.loads(body)["error"]
    assert error["code"] == status and error["reason"]
    ERROR_VALIDATOR.validate(json.loads(body))


def test_server_still_healthy_and_logged_no_traceback(server, session):
    assert session.get(server.url + "/healthz", timeout=5).json() == {"status": "ok"}
    assert "Traceback" not in server.log()
