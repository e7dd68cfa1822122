"""Hostile input over the real server (gunicorn over TLS on loopback): bodies that crashed the
worker, amplified, got a 500 or a wrong verdict. Each answer is a 400/413 JSON reason or a
correct verdict, and the worker that read them is still the one answering afterwards."""

from __future__ import annotations

import base64
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.helpers import admission_review, gpushare_executable, gpushare_server, load_json
from tests.support.hostile import ERROR_VALIDATOR, chunked_post, good_reviews, json_paths, json_values, raw_exchange
from tests.support.manifests import CORE, MEM, container, pod_spec, workload
from tests.support.profiles import examples

pytestmark = pytest.mark.processes

MAX_BODY = 256 * 1024
DEMO_NODES = ["cn-beijing.192.168.1.10", "cn-hangzhou.192.168.2.20", "cn-zhangjiakou.192.168.66.139"]

# 50 KB of nested flow sequences: libyaml's composer recursed once per level in C and overflowed
# the stack (SIGSEGV) at about 25,000 levels; below that, its scanner spent seconds per body.
NESTING_BOMBS = {
    "flow-sequences": "x: " + "[" * 25_000 + "]" * 25_000 + "\n",
    "flow-mappings": "x: " + "{a: " * 12_500 + "}" * 12_500 + "\n",
    "block-sequences": "- " * 25_000 + "x\n",
    "flow-over-lines": "x: " + "[\n" * 25_000 + "]" * 25_000 + "\n",
    "alias-depth": "a: &a " + "[" * 60 + "]" * 60 + "\nb: " + "[" * 60 + "*a" + "]" * 60 + "\n",
}
# 160 KB that expanded to a 2 GB answer: ten levels of ten aliases each.
ALIAS_BOMB = "kind: ConfigMap\nmetadata: {name: lol}\ndata:\n  a0: &a0 '" + "x" * 150_000 + "'\n" + "".join(
    f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 10))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The real server on the demo snapshot, with a 256 KiB body limit (so that over-limit bodies
    stay small); reviews are shed only past the API server's deadline, so load on the test
    machine does not turn these answers into 503s."""
    with gpushare_server(tmp_path_factory.mktemp("hostile-input"),
                         env={"GPUSHARE_SERVER__MAX_BODY_BYTES": str(MAX_BODY)}) as running:
        yield running


@pytest.fixture(scope="module")
def session(server):
    with server.session() as client:
        yield client


def _worker_pids(server) -> set[int]:
    """The gunicorn master's worker processes: a new pid means an old worker died."""
    from tests.support.processes import children

    pids = set(children(server.process.pid))
    assert pids, "the server has no worker process"
    return pids


def _refused(reply, status: int, reason: str) -> None:
    assert reply.status_code == status, reply.text[:300]
    payload = reply.json()
    assert payload["error"]["code"] == status
    assert reason in payload["error"]["reason"], payload


def _pod(mem=2, core=None) -> dict:
    limits = {MEM: mem} if core is None else {MEM: mem, CORE: core}
    return workload("Job", pod_spec(container("cuda", limits=limits)), name="train")["spec"]["template"] | {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0", "namespace": "default"}}


# -- 1: the nesting bomb


@pytest.mark.parametrize("name", sorted(NESTING_BOMBS))
def test_nesting_bombs_get_a_400_and_the_worker_lives(server, session, name):
    before = _worker_pids(server)
    reply = session.post(server.url + "/dry-run", data=NESTING_BOMBS[name].encode(), timeout=15)
    _refused(reply, 400, "deeper than 100 levels")
    assert reply.json()["error"]["reason"].startswith("body:")
    assert session.get(server.url + "/healthz", timeout=5).status_code == 200
    assert _worker_pids(server) == before, "a worker was replaced: the old one died"
    assert "SIGSEGV" not in server.log() and "Traceback" not in server.log()


def test_reviews_in_flight_survive_concurrent_nesting_bombs(server, session):
    """Two bombs at once beside twenty real reviews: every review answered, no worker lost."""
    before = _worker_pids(server)
    review = admission_review(load_json("pod-realistic.json"))
    bomb = ("x: " + "[" * 20_000 + "]" * 20_000).encode()  # the 40 KB body that cost seconds of CPU

    def send_bomb(_: int) -> int:
        with server.session() as own:
            return own.post(server.url + "/dry-run", data=bomb, timeout=15).status_code

    def send_review(_: int) -> int:
        with server.session() as own:
            return server.post_json("/validate", review, own).status_code

    with ThreadPoolExecutor(6) as pool:
        bombs = list(pool.map(send_bomb, range(4)))
        reviews = list(pool.map(send_review, range(20)))
    assert bombs == [400] * 4
    assert reviews == [200] * 20
    assert _worker_pids(server) == before


@pytest.mark.parametrize("snapshot", [False, True], ids=["manifest", "snapshot"])
def test_check_refuses_the_nesting_bomb_with_exit_2_file_and_line(tmp_path, snapshot):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("apiVersion: v1\nkind: Pod\nspec: " + "[" * 25_000 + "]" * 25_000 + "\n")
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(_pod()))
    args = ["--snapshot", str(bomb), str(pod)] if snapshot else [str(bomb)]
    result = subprocess.run([gpushare_executable(), "check", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, (result.returncode, result.stderr[-500:])
    assert f"{bomb}:3: nested deeper than 100 levels" in result.stderr
    assert "Traceback" not in result.stderr


# -- 4: amplification


def test_alias_expansion_is_refused_by_bytes(server, session):
    assert 150_000 < len(ALIAS_BOMB) < 170_000
    reply = session.post(server.url + "/dry-run", data=ALIAS_BOMB.encode(), timeout=15)
    _refused(reply, 400, "aliases expand the input by more than 1048576 bytes")
    assert len(reply.content) < 1000


def test_a_few_aliases_still_expand(server, session):
    text = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: &l {app: x}}\n"
            "spec: {nodeSelector: *l, containers: [{name: c, resources: {limits: {aliyun.com/gpu-mem: 2}}}]}\n")
    reply = session.post(server.url + "/dry-run", data=text.encode(), timeout=15)
    assert reply.status_code == 200, reply.text
    assert reply.json()["results"][0]["mutated"]["spec"]["nodeSelector"] == {"app": "x"}


# -- 5: a 400 (or the right verdict) where there was a 500


def test_huge_core_percentage_is_denied_with_a_suggestion(server, session):
    reply = server.post_json("/validate", admission_review(_pod(mem=2, core=1e29)), session)
    assert reply.status_code == 200, reply.text
    response = reply.json()["response"]
    assert response["allowed"] is False
    assert "GS001" in response["status"]["message"] and "use 100" in response["status"]["message"]


@pytest.mark.parametrize(("body", "reason"), [
    (b'{"kind": "Pod", "spec": ' + b"[" * 600 + b"]" * 600 + b"}", "nested deeper than 100 levels"),
    (b'{"kind": "Pod", "spec": {"x": ' + b"9" * 5000 + b"}}", "more than 4300 digits"),
    (b"kind: Pod\nspec: {x: " + b"9" * 5000 + b"}\n", "at most 4300 digits"),
    (b'{"kind": "Pod", "metadata": {"name": "\\ud800"}}', "lone UTF-16 surrogate"),
    (b'{"kind": "Pod", "kind": "Pod"}', 'duplicate key "kind"'),
    (b"kind: Pod\nmetadata: {name: a, name: b}\n", "duplicate key 'name'"),
    (b'{"kind": "Pod", "spec": {"x": NaN}}', "NaN is not a JSON value"),
    (b"kind: Pod\nspec: {x: .nan}\n", "not a finite number"),
    (b"kind: Pod\nspec: {x: -.inf}\n", "not a finite number"),
    (b"kind: Pod\nspec: &s {x: *s}\n", "refers to a collection that contains it"),
], ids=["json-depth-600", "json-5000-digits", "yaml-5000-digits", "surrogate", "json-duplicate",
        "yaml-duplicate", "json-nan", "yaml-nan", "yaml-infinity", "recursive-alias"])
def test_dry_run_refuses_with_a_400(server, session, body, reason):
    _refused(session.post(server.url + "/dry-run", data=body, timeout=15), 400, reason)


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_lone_surrogate_in_a_review_is_a_400(server, session, path):
    body = json.dumps(admission_review(_pod())).replace('"train-0"', '"train-\\ud800"', 1)
    assert "\\ud800" in body
    _refused(session.post(server.url + path, data=body.encode(), timeout=15), 400, "lone UTF-16 surrogate")


def test_a_surrogate_pair_is_fine(server, session):
    body = json.dumps(admission_review(_pod()))
    reply = session.post(server.url + "/validate", data=body.replace("train-0", "train-\\ud83d\\ude00", 1), timeout=15)
    assert reply.status_code == 200, reply.text


ENDPOINTS = ["/validate", "/mutate", "/dry-run", "/scheduler/filter", "/scheduler/prioritize"]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_malformed_chunk_size_is_a_400_on_every_endpoint(server, path):
    request = chunked_post(path, [b"{}"]).replace(b"\r\n2\r\n{}", b"\r\nzz\r\n{}")
    status, head, body = raw_exchange(server, request)
    assert status == 400, head
    assert b"application/json" in head
    error = json.loads(body)["error"]
    assert error["code"] == 400 and "chunk" in error["reason"].lower()


# -- 6: chunked bodies over the limit


@pytest.mark.parametrize("path", ENDPOINTS)
def test_chunked_body_over_the_limit_is_a_413(server, path):
    """The prefix of an over-limit body is a valid review: judging it would be wrong."""
    prefix = json.dumps(admission_review(_pod())).encode()
    padding = b" " * (MAX_BODY + 4096 - len(prefix))
    status, head, body = raw_exchange(server, chunked_post(path, [prefix] + [padding[i:i + 16384]
                                                                  for i in range(0, len(padding), 16384)]))
    assert status == 413, head + body[:200]
    assert json.loads(body)["error"] == {"code": 413, "reason": f"body larger than {MAX_BODY} bytes"}


@pytest.mark.parametrize("path", ["/validate", "/dry-run"])
def test_chunked_body_at_the_limit_is_judged(server, path):
    prefix = json.dumps(admission_review(_pod())).encode()
    padding = b" " * (MAX_BODY - len(prefix))
    status, head, body = raw_exchange(server, chunked_post(path, [prefix, padding]))
    assert status == 200, head + body[:300]


# -- 7: the scheduler extender and huge GPU values


@pytest.mark.parametrize("value", ["1e308", 1e30, "2Gi", -3, "1e30"])
def test_extender_places_an_unreadable_or_huge_gpu_value_nowhere(server, session, value):
    pod = _pod(mem=value)
    reply = server.post_json("/scheduler/filter", {"Pod": pod, "NodeNames": DEMO_NODES}, session)
    assert reply.status_code == 200, reply.text
    result = reply.json()
    assert result["NodeNames"] == []
    assert sorted(result["FailedAndUnresolvableNodes"]) == sorted(DEMO_NODES)
    reason = result["FailedAndUnresolvableNodes"][DEMO_NODES[0]]
    assert reason.startswith("GS003: ") and '"cuda"' in reason and "aliyun.com/gpu-mem" in reason
    scores = server.post_json("/scheduler/prioritize", {"Pod": pod, "NodeNames": DEMO_NODES}, session).json()
    assert {s["Score"] for s in scores} == {0}


def test_extender_still_places_a_readable_pod(server, session):
    reply = server.post_json("/scheduler/filter", {"Pod": _pod(mem=2), "NodeNames": DEMO_NODES}, session)
    assert reply.json()["NodeNames"], reply.text


@pytest.mark.parametrize("value", [1e30, 1025, "5000"])
def test_gpu_mem_larger_than_any_card_is_denied(server, session, value):
    reply = server.post_json("/validate", admission_review(_pod(mem=value)), session)
    response = reply.json()["response"]
    assert response["allowed"] is False
    assert "GS003" in response["status"]["message"] and "more than any card holds" in response["status"]["message"]
    assert "at most 1024 GiB" in response["status"]["message"]


# -- generated documents at /dry-run

hostile_values = (json_values | st.integers(2**70, 2**200) | st.integers(-(2**200), -(2**70))
                  | st.text(st.characters(categories=["Cs", "Lo", "So", "Zs", "Cc"]), max_size=8)
                  | st.text(min_size=2000, max_size=20_000))


@st.composite
def hostile_documents(draw):
    doc = json.loads(json.dumps(draw(st.sampled_from([r["request"]["object"] for r in good_reviews()
                                                        if r["request"]["object"]]))))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(json_paths(doc)))
        new = draw(hostile_values)
        if not path:
            doc = new
            continue
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        parent[path[-1]] = new
    return doc


def _encode(doc, as_yaml: bool) -> bytes:
    if as_yaml:
        try:
            return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")
        except yaml.YAMLError:
            pass
    return json.dumps(doc).encode()  # ensure_ascii: a lone surrogate travels as \udXXX


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=hostile_documents(), as_yaml=st.booleans())
def test_real_server_dry_run_answers_every_generated_document(server, session, doc, as_yaml):
    reply = session.post(server.url + "/dry-run", data=_encode(doc, as_yaml), timeout=15)
    assert reply.status_code in (200, 400), reply.text[:300]
    payload = reply.json()
    if reply.status_code == 400:
        ERROR_VALIDATOR.validate(payload)
        assert "body" in payload["error"]["reason"]
        return
    for result in payload["results"]:
        assert isinstance(result["allowed"], bool)
        for finding in result["violations"] + result["warnings"]:
            assert finding["rule"] and finding["message"]


def test_dry_run_server_healthy_and_logged_no_traceback(server, session):
    assert session.get(server.url + "/healthz", timeout=5).json() == {"status": "ok"}
    log = server.log()
    assert "Traceback" not in log and "internal error" not in log and "SIGSEGV" not in log


def test_patch_decodes(server, session):
    """A mutation answer from the same worker still applies (the worker is sane after all this)."""
    reply = server.post_json("/mutate", admission_review(_pod()), session)
    patch = json.loads(base64.b64decode(reply.json()["response"]["patch"]))
    assert any(op["path"] == "/spec/schedulerName" for op in patch)
