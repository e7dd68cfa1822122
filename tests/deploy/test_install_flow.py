"""The install, end to end as far as this machine allows: the rendered certificate Job's own
command against a local API server holding the rendered webhook configurations, the serving
Secret mounted into the real `gpushare serve` started with the Deployment's own arguments, and
a client that trusts only the injected caBundle and checks the Service's DNS name, as the API
server does."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import subprocess

import pytest

from tests.deploy.test_deploy import one, render_kustomize
from tests.support.fake_apiserver import running
from tests.support.helpers import admission_review, free_port, gpushare_executable, load_json, wait_until

pytestmark = pytest.mark.processes

SERVICE_DNS = "gpushare-webhook.gpushare-system.svc"


class ServiceConnection(http.client.HTTPSConnection):
    """HTTPS to 127.0.0.1:port that verifies the certificate for the Service's DNS name."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        super().__init__(SERVICE_DNS, port, context=context, timeout=15)
        self._context = context

    def connect(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=15)
        self.sock = self._context.wrap_socket(raw, server_hostname=SERVICE_DNS)


def test_certificate_job_then_webhook_pods_then_api_server_call(tmp_path):
    objects = render_kustomize()
    job = one(objects, "Job", "gpushare-webhook-certs")
    (certs_container,) = job["spec"]["template"]["spec"]["containers"]
    deployment = one(objects, "Deployment", "gpushare-webhook")
    (webhook_container,) = deployment["spec"]["template"]["spec"]["containers"]
    with running() as api:
        api.add(*(one(objects, kind, "gpushare-webhook")
                  for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")))
        # The Job's container: its command and args, its namespace from the downward API.
        assert certs_container["command"] == ["gpushare"]
        env = {**os.environ, "KUBECONFIG": str(api.kubeconfig(tmp_path / "kubeconfig")),
               "GPUSHARE_CERTS__NAMESPACE": job["metadata"]["namespace"]}
        done = subprocess.run([gpushare_executable(), *certs_container["args"]], capture_output=True, text=True,
                              env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        # The Deployment mounts the serving Secret at --cert-dir.
        secret_name = next(v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"]
                           if v["name"] == "tls")
        secret = api.get(f"/api/v1/namespaces/gpushare-system/secrets/{secret_name}")
        mounted = tmp_path / "certs"
        mounted.mkdir()
        for name, value in secret["data"].items():
            (mounted / name).write_bytes(base64.b64decode(value))
        config = tmp_path / "config.yaml"
        config.write_text(one(objects, "ConfigMap", "gpushare-webhook-config")["data"]["config.yaml"])
        bundles = {base64.b64decode(w["clientConfig"]["caBundle"])
                   for kind in ("mutating", "validating")
                   for w in api.get(f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/"
                                    "gpushare-webhook")["webhooks"]}
    assert len(bundles) == 1
    (bundle,) = bundles
    # The Deployment's arguments, with the mount paths and port of this machine.
    where = {"/etc/gpushare/tls": str(mounted), "/etc/gpushare/config/config.yaml": str(config), "8443": str(
        free_port())}
    args = [where.get(a, a) for a in webhook_container["args"]]
    assert args != webhook_container["args"] and "--cert-dir" in args and "--config" in args
    port = int(args[args.index("--port") + 1])
    context = ssl.create_default_context(cadata=bundle.decode())
    with open(tmp_path / "server.log", "wb") as log:
        server = subprocess.Popen([gpushare_executable(), "serve", "--host", "127.0.0.1", *args], stdout=log,
                                  stderr=subprocess.STDOUT)
    try:
        def healthy() -> bool:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            conn = ServiceConnection(port, context)
            try:
                conn.request("GET", "/healthz")
                return conn.getresponse().status == 200
            finally:
                conn.close()

        wait_until(healthy, timeout=30, what="the webhook answering over the injected CA")
        conn = ServiceConnection(port, context)
        review = admission_review(load_json("pod-realistic.json"), namespace="ml")
        conn.request("POST", "/mutate", json.dumps(review), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        answer = json.loads(reply.read())
        conn.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert reply.status == 200
    assert answer["response"]["uid"] == review["request"]["uid"] and answer["response"]["allowed"] is True
    assert answer["response"]["patchType"] == "JSONPatch"
