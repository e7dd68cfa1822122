"""Bodies as Go encodes them: tests/support/go_json.py against a real Go encoder's bytes, and the admission
decoder (no duplicate-key check) against the strict one on every body Go can write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.go_json import api_server_json, go_float
from tests.support.profiles import examples
from webhook.documents.strict_json import JsonBodyError, decode_json, decode_kubernetes_json

DATA = Path(__file__).parents[1] / "data" / "go-json"
VALUES = json.loads((DATA / "values.json").read_text(encoding="utf-8"))
GO_1_19 = (DATA / "go1.19.jsonl").read_bytes().splitlines(keepends=True)


def test_the_oracle_covers_every_value():
    assert len(GO_1_19) == len(VALUES) > 10


@pytest.mark.parametrize("index", range(len(VALUES)))
def test_go_json_writes_what_go_wrote(index):
    """Go 1.19 (Debian's golang-go) encoded values.json with json.NewEncoder (tests/data/go-json/encode.go):
    maps, so sorted keys, and \\u0008/\\u000c for backspace and form feed, as before Go 1.22."""
    assert api_server_json(VALUES[index], sort_keys=True, go_1_22=False) == GO_1_19[index]


@pytest.mark.parametrize("index", range(len(VALUES)))
def test_both_decoders_read_what_go_wrote(index):
    body = GO_1_19[index]
    assert decode_kubernetes_json(body) == decode_json(body) == VALUES[index]


def test_go_escapes_html_and_line_separators():
    body = api_server_json({"command": ["sh", "-c", "nvidia-smi > /tmp/gpu.log && python train.py"],
                            "note": "a\u2028b\u2029<c>\b\f"})
    assert body == (b'{"command":["sh","-c","nvidia-smi \\u003e /tmp/gpu.log \\u0026\\u0026 python train.py"],'
                    b'"note":"a\\u2028b\\u2029\\u003cc\\u003e\\b\\f"}\n')


@pytest.mark.parametrize(("value", "spelled"), [
    (1.0, "1"), (-0.0, "-0"), (0.1, "0.1"), (1e20, "100000000000000000000"), (1e21, "1e+21"),
    (1e-6, "0.000001"), (1e-7, "1e-7"), (1.5e-10, "1.5e-10"), (1e-100, "1e-100"), (123456789.125, "123456789.125"),
])
def test_go_float_spelling(value, spelled):
    assert go_float(value) == spelled


# What Go can encode: strings are valid Unicode (no lone surrogates), integers fit in 64 bits
# (an unstructured object's numbers are int64 or float64), floats are finite.
go_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=25,
)


def _same(read, sent) -> bool:
    """``read`` is ``sent``, a float Go wrote without a point (``1e16`` as ``10000000000000000``)
    read back as the integer it spells."""
    if isinstance(sent, float):
        return type(read) in (int, float) and float(read) == sent
    if isinstance(sent, dict):
        return type(read) is dict and read.keys() == sent.keys() and all(_same(read[k], v) for k, v in sent.items())
    if isinstance(sent, list):
        return type(read) is list and len(read) == len(sent) and all(map(_same, read, sent))
    return type(read) is type(sent) and read == sent


@settings(max_examples=examples(400))
@given(value=go_values, go_1_22=st.booleans(), sort_keys=st.booleans())
def test_every_go_body_reads_the_same_with_and_without_the_duplicate_check(value, go_1_22, sort_keys):
    body = api_server_json(value, go_1_22=go_1_22, sort_keys=sort_keys)
    read = decode_kubernetes_json(body)
    strict = decode_json(body)
    assert read == strict and all(map(_same, (read, strict), (value, value)))
    assert json.dumps(read) == json.dumps(strict)  # the same types too (1 and 1.0 are ==)


# -- hand-crafted bodies: what any pod that reaches the Service may send


def test_a_repeated_key_reads_as_its_last_value():
    assert decode_kubernetes_json(b'{"uid":"a","spec":{"x":1,"x":2},"uid":"b"}') == {"uid": "b", "spec": {"x": 2}}
    with pytest.raises(JsonBodyError, match='duplicate key "x"'):
        decode_json(b'{"uid":"a","spec":{"x":1,"x":2},"uid":"b"}')


@pytest.mark.parametrize(("body", "reason"), [
    (b'{"x":NaN}', "NaN is not a JSON value"),
    (b'{"x":-Infinity}', "Infinity is not a JSON value"),
    (b'{"x":1e400}', "invalid JSON: Number out of range"),
    (b'{"x":"\\ud800"}', "lone UTF-16 surrogate"),
    (b'{"x":"\\udc00\\ud800"}', "lone UTF-16 surrogate"),
    (b'{"x":"\xed\xa0\x80"}', "not UTF-8"),
    (b'{"x":"caf\xe9"}', "not UTF-8"),
    (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    (b'{"x":' + b"9" * 4301 + b"}", "more than 4300 digits"),
    (b'{"x":1,"x":NaN}', "NaN is not a JSON value"),
    (b"\xef\xbb\xbf{}", "invalid JSON at line 1 column 1"),
    (b'{"x":1} {}', "invalid JSON"),
    (b"", "invalid JSON"),
])
def test_what_go_cannot_send_is_refused_with_a_reason(body, reason):
    with pytest.raises(JsonBodyError, match=reason):
        decode_kubernetes_json(body)


@settings(max_examples=examples(400))
@given(body=st.binary(max_size=64) | st.text(max_size=64).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_bytes_give_a_value_or_a_reason(body):
    try:
        decode_kubernetes_json(body)
    except JsonBodyError as exc:
        assert str(exc)
