"""Hypothesis strategies for hostile input, and the contract every answer must meet."""

from __future__ import annotations

import base64
import copy
import functools
import json
import uuid
from typing import Any

import jsonpatch
import jsonschema
from hypothesis import strategies as st

from tests.support.helpers import admission_review, load_json
from tests.support.manifests import CORE, MEM, container, pod_spec, workload

# Any JSON value, small enough to keep examples fast.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12) | st.sampled_from(["2Gi", "33", "5", "-1", "1e3", "2500m", "", "CREATE", "Pod"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@functools.cache
def good_reviews() -> tuple[dict[str, Any], ...]:
    """Realistic reviews the mutations below start from: every kind and operation the webhook reads
    (built once: callers copy before they change one)."""
    job = workload("Job", pod_spec(container("c", limits={MEM: 2, CORE: 33})), name="cuda-33")
    ds = workload("DaemonSet", pod_spec(container("plugin", limits={MEM: 1})), name="gpushare-device-plugin-ds")
    pod = load_json("pod-realistic.json")
    pinned = copy.deepcopy(pod) | {"spec": pod["spec"] | {"nodeName": "cn-beijing.192.168.1.10"}}
    return (
        admission_review(pod),
        admission_review(pinned),
        admission_review(job, group="batch", resource="jobs"),
        admission_review(ds, group="apps", resource="daemonsets"),
        admission_review(job, operation="UPDATE", old=job, group="batch"),
        admission_review(pod, api_version="admission.k8s.io/v1beta1"),
        admission_review(None, kind="Pod", operation="DELETE"),
    )


def json_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON document (keys and list indexes), the document's own () first."""
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += json_paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += json_paths(child, (*prefix, index))
    return out


def _replace(doc: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = new
    return doc


@st.composite
def hostile_reviews(draw: st.DrawFn) -> Any:
    """A real review with up to three fields anywhere replaced by a value of any JSON type."""
    doc = copy.deepcopy(draw(st.sampled_from(good_reviews())))
    doc["request"]["uid"] = str(uuid.uuid4())  # a review of its own, as the API server sends each
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(json_paths(doc)))
        doc = _replace(doc, path, draw(json_values))
    return doc


RESPONSE_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "response"],
    "properties": {
        "apiVersion": {"enum": ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]},
        "kind": {"const": "AdmissionReview"},
        "response": {
            "type": "object",
            "required": ["uid", "allowed", "auditAnnotations"],
            "properties": {
                "uid": {"type": "string", "minLength": 1},
                "allowed": {"type": "boolean"},
                "patchType": {"const": "JSONPatch"},
                "patch": {"type": "string"},
                "warnings": {"type": "array", "items": {"type": "string"}},
                "auditAnnotations": {"type": "object", "required": ["decision", "rules"],
                                     "additionalProperties": {"type": "string"}},
                "status": {"type": "object", "required": ["code", "message"],
                           "properties": {"code": {"const": 403}, "message": {"type": "string"}}},
            },
            "additionalProperties": False,
        },
    },
}
ERROR_SCHEMA = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["code", "reason"],
                             "properties": {"code": {"type": "integer"}, "reason": {"type": "string",
                                                                                   "minLength": 1}}}},
}


def _validator(schema: dict[str, Any]) -> Any:
    """What jsonschema.validate builds, with the schema checked against its metaschema once here
    rather than on every answer (that check was most of a generated review's cost)."""
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


RESPONSE_VALIDATOR, ERROR_VALIDATOR = _validator(RESPONSE_SCHEMA), _validator(ERROR_SCHEMA)


def check_answer(sent: Any, status: int, body: bytes) -> None:
    """The contract: a valid AdmissionReview answering what was sent, or a 4xx JSON error."""
    assert status in (200, 400), (status, body[:300])
    payload = json.loads(body)
    if status == 400:
        ERROR_VALIDATOR.validate(payload)
        assert payload["error"]["code"] == 400
        return
    RESPONSE_VALIDATOR.validate(payload)
    response = payload["response"]
    assert payload["apiVersion"] == sent["apiVersion"]
    assert response["uid"] == sent["request"]["uid"]
    assert response["auditAnnotations"]["decision"] == ("allowed" if response["allowed"] else "denied")
    if not response["allowed"]:
        assert response["status"]["message"].startswith("GS")
    if "patch" in response:
        ops = json.loads(base64.b64decode(response["patch"]))
        # The patch must apply to the object that was sent, as the API server would apply it.
        jsonpatch.apply_patch(sent["request"]["object"], ops)


def raw_exchange(server: Any, request: bytes, timeout: float = 15.0) -> tuple[int, bytes, bytes]:
    """Send ``request`` as raw bytes over the server's TLS port and read to the close:
    (status, head, body). For what an HTTP library will not send (malformed chunks)."""
    import contextlib
    import socket
    import ssl

    context = ssl.create_default_context(cafile=server.ca)
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        with contextlib.suppress(OSError):  # the server may answer and close before the whole body is sent
            tls.sendall(request)
        data = b""
        try:
            while chunk := tls.recv(65536):
                data += chunk
        except (ConnectionResetError, ssl.SSLError):
            pass
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
    return status, head, body


def chunked_post(path: str, chunks: list[bytes], content_type: str = "application/json") -> bytes:
    """A complete chunked POST with ``Connection: close``."""
    head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks if c) + b"0\r\n\r\n"
    return head + body
