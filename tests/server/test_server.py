"""The real `gpushare serve` process over TLS: AdmissionReview in, AdmissionReview out."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from pathlib import Path

import jsonpatch
import pytest
import requests
from cryptography import x509

from tests.support.helpers import admission_review, gpushare_server, load_json
from tests.support.manifests import CORE, MEM, container, pod_spec, workload

# The shared server's answers, TLS and errors: with either gunicorn worker (server.worker).
pytestmark = [pytest.mark.both_workers, pytest.mark.processes]


def decode_patch(response: dict) -> list[dict]:
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def test_generated_certificate_verifies_and_names_the_service(server):
    cert = x509.load_pem_x509_certificate(Path(server.cert_dir, "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = set(sans.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    assert {"localhost", "gpushare-webhook.gpushare-system.svc",
            "gpushare-webhook.gpushare-system.svc.cluster.local"} <= dns
    assert "127.0.0.1" in ips
    # A client that does not trust the generated CA must refuse the connection.
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(server.url + "/healthz", timeout=5)


def test_health_and_readiness(session, server):
    assert session.get(server.url + "/healthz", timeout=5).json() == {"status": "ok"}
    ready = session.get(server.url + "/readyz", timeout=5)
    assert ready.status_code == 200 and ready.json()["ready"] is True


def test_mutate_realistic_pod_and_apply_patch(session, server):
    pod = load_json("pod-realistic.json")
    review = admission_review(pod, namespace="ml-serving")
    reply = server.post_json("/mutate", review, session)
    assert reply.status_code == 200
    body = reply.json()
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    response = body["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is True
    patched = jsonpatch.apply_patch(pod, decode_patch(response))
    assert patched["spec"]["schedulerName"] == "ack-co-scheduler"
    assert patched["spec"]["containers"][0]["env"] == [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "4"}]
    assert patched["metadata"]["managedFields"] == pod["metadata"]["managedFields"]
    assert response["auditAnnotations"] == {"decision": "allowed", "rules": "GM001,GM003", "patched": "GM001,GM003"}
    # Mutating the mutated pod again changes nothing.
    again = server.post_json("/mutate", admission_review(patched, namespace="ml-serving"), session).json()
    assert "patch" not in again["response"]


def test_mutate_pod_pinned_to_a_known_node_gets_no_card_size(session, server):
    pod = load_json("pod-realistic.json")
    pod["spec"]["nodeName"] = "cn-beijing.192.168.1.10"  # demo snapshot: 4 x 15 GiB
    response = server.post_json("/mutate", admission_review(pod), session).json()["response"]
    patched = jsonpatch.apply_patch(pod, decode_patch(response))
    env = {e["name"]: e["value"] for e in patched["spec"]["containers"][0]["env"]}
    # ALIYUN_COM_GPU_MEM_DEV is the device plugin's to set (GM003's doc says why).
    assert env == {"ALIYUN_COM_GPU_MEM_CONTAINER": "4"}


def test_validate_denies_seed_job_with_33_percent(session, server):
    job = workload("Job", pod_spec(container("cuda-33", limits={MEM: 2, CORE: 33})), name="cuda-33")
    review = admission_review(job, group="batch", resource="jobs")
    response = server.post_json("/validate", review, session).json()["response"]
    assert response["allowed"] is False
    assert response["uid"] == review["request"]["uid"]
    assert response["status"]["code"] == 403
    assert response["status"]["message"] == (
        'GS001: Job default/cuda-33 container "cuda-33": aliyun.com/gpu-core.percentage=33 is not a multiple '
        "of 5 in 5..100; use 30 or 35")
    assert response["auditAnnotations"] == {"decision": "denied", "rules": "GS001", "denied": "GS001"}


def test_validate_allows_a_good_pod(session, server):
    response = server.post_json("/validate", admission_review(load_json("pod-realistic.json")),
                                session).json()["response"]
    assert response == {"uid": response["uid"], "allowed": True,
                        "auditAnnotations": {"decision": "allowed", "rules": ""}}


def test_v1beta1_is_answered_in_kind(session, server):
    review = admission_review(load_json("pod-realistic.json"), api_version="admission.k8s.io/v1beta1")
    body = server.post_json("/validate", review, session).json()
    assert body["apiVersion"] == "admission.k8s.io/v1beta1"


def test_dry_run_review_gets_the_same_answer(session, server):
    job = workload("Job", pod_spec(container("c", limits={MEM: "2Gi"})))
    response = server.post_json("/validate", admission_review(job, dry_run=True), session).json()["response"]
    assert response["allowed"] is False and "GS003" in response["status"]["message"]


def test_delete_and_unknown_kinds_are_allowed(session, server):
    delete = admission_review(None, kind="Pod", operation="DELETE")
    assert server.post_json("/validate", delete, session).json()["response"]["allowed"] is True
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}
    assert server.post_json("/validate", admission_review(cm), session).json()["response"]["allowed"] is True


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "invalid JSON at line 1 column 2"),
        (b"", "empty body"),
        (b"\xff\xfe\x00", "not UTF-8"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "has no request"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "x"}}',
         "request.kind"),
        (b'{"apiVersion": "v2", "kind": "AdmissionReview", "request": {}}', "apiVersion"),
        (json.dumps(admission_review({"kind": "Pod", "spec": "not-a-map"})).encode(), "request.object"),
        (json.dumps(admission_review({"kind": "Pod", "metadata": {"name": "p"},
                                      "spec": {"containers": {"a": 1}}})).encode(),
         "spec.containers: must be a list"),
        (json.dumps(admission_review(workload("Job", pod_spec(container("c", limits={MEM: 1})))
                                     | {"spec": {"template": []}})).encode(), "spec.template: must be an object"),
    ],
)
def test_malformed_input_is_a_400_with_a_json_reason(session, server, body, reason):
    reply = session.post(server.url + "/validate", data=body, headers={"Content-Type": "application/json"},
                         timeout=10)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == 400 and reason in error["reason"]


def test_body_over_the_limit_is_a_413(session, server):
    huge = b'{"pad": "' + b"x" * (4 * 1024 * 1024 + 10) + b'"}'
    reply = session.post(server.url + "/mutate", data=huge, timeout=30)
    assert reply.status_code == 413
    assert "larger than" in reply.json()["error"]["reason"]


def test_wrong_method_and_path_are_json_errors(session, server):
    for path in ("/validate", "/mutate"):
        for method in ("GET", "PUT", "DELETE"):
            reply = session.request(method, server.url + path, timeout=5)
            assert reply.status_code == 405 and reply.headers["Allow"] == "POST", (method, path)
            assert reply.json()["error"] == {"code": 405, "reason": f"{path} answers POST only (an AdmissionReview "
                                                                   "from the API server)"}
    assert session.get(server.url + "/nope", timeout=5).json()["error"]["code"] == 404
    assert session.get(server.url + "/validate/", timeout=5).json()["error"]["code"] == 404


def test_a_chunked_review_is_answered_as_the_same_review_with_a_length(session, server):
    review = admission_review(load_json("pod-realistic.json"), namespace="ml-serving")
    body = json.dumps(review).encode()
    headers = {"Content-Type": "application/json"}
    for path in ("/validate", "/mutate"):
        plain = session.post(server.url + path, data=body, headers=headers, timeout=15)
        chunked = session.post(server.url + path, data=iter([body[:1000], body[1000:]]), headers=headers, timeout=15)
        assert chunked.request.headers["Transfer-Encoding"] == "chunked"
        assert plain.status_code == chunked.status_code == 200, chunked.text[:300]
        assert chunked.json() == plain.json()


def test_keep_alive_connection_is_reused(server):
    context = ssl.create_default_context(cafile=server.ca)
    port = int(server.url.rsplit(":", 1)[1])
    body = json.dumps(admission_review(load_json("pod-realistic.json"))).encode()
    request = (f"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        for _ in range(3):  # three requests, one TLS connection
            tls.sendall(request)
            reply = _read_http_response(tls)
            assert reply.startswith(b"HTTP/1.1 200")
            assert b'"allowed":true' in reply


def _read_http_response(sock: ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the headers"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        rest += chunk
    return head + b"\r\n\r\n" + rest


def test_config_file_turns_a_rule_into_a_warning(tmp_path):
    config = tmp_path / "gpushare.yaml"
    config.write_text("rules:\n  GS001:\n    severity: warn\n")
    with gpushare_server(tmp_path, "--config", str(config)) as running:
        job = workload("Job", pod_spec(container("c", limits={MEM: 2, CORE: 33})), name="cuda-33")
        response = running.post_json("/validate", admission_review(job)).json()["response"]
    assert response["allowed"] is True
    assert response["warnings"] == [
        'GS001: Job default/cuda-33 container "c": aliyun.com/gpu-core.percentage=33 is not a multiple of 5 '
        "in 5..100; use 30 or 35"]


def test_bad_config_or_snapshot_exits_2_with_a_clear_message(tmp_path):
    import subprocess

    from tests.support.helpers import gpushare_executable

    config = tmp_path / "bad.yaml"
    config.write_text("server:\n  port: nope\n")
    result = subprocess.run([gpushare_executable(), "serve", "--config", str(config)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert "bad.yaml" in result.stderr and "Traceback" not in result.stderr
    snapshot = tmp_path / "snap.yaml"
    snapshot.write_text("items: [unclosed\n")
    result = subprocess.run([gpushare_executable(), "serve", "--cert-dir", str(tmp_path / "c"), "--port", "0",
                             "--snapshot", str(snapshot)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    # The one document reader points at the file's last line, not past it (as `gpushare check` does).
    assert "snap.yaml:1: invalid YAML" in result.stderr and "Traceback" not in result.stderr
