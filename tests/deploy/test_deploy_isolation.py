"""The cluster deploy's isolation, over the real server started as the Deployment starts it.

The kustomize base is rendered (tests/deploy/test_deploy.py holds Helm to the same objects); the
server gets the container's environment, its arguments and the ConfigMap's config file, with
the Secret and ConfigMap mount paths mapped to a work directory and the two ports moved to
free loopback ports. Then, over real TLS:

- the admission port answers /validate, /mutate, /healthz and /readyz without credentials, and
  does not serve /metrics, /dry-run or /explain at all;
- the ops port refuses /metrics, /dry-run and /explain without the bearer token (also while the
  optional token Secret is still missing) and answers them with it; it serves nothing else;
- /scheduler/filter answers only a client certificate for kube-scheduler signed by the
  webhook's CA (issued with `gpushare certs client`), and refuses no certificate, another name,
  or another CA.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from certs.issue import issue_ca, issue_client, load_issued, write_pair
from tests.deploy.test_deploy import one, render_kustomize
from tests.support.helpers import admission_review, gpushare_executable, gpushare_server, load_json
from tests.support.processes import free_port
from webhook.serving import prepare_certificates

pytestmark = pytest.mark.processes

TOKEN = "deploy-test-token-4f1c"


def deployed_server_config(workdir: Path) -> tuple[dict[str, str], list[str], int]:
    """(environment, extra `gpushare serve` arguments, ops port) of the rendered Deployment, its
    mount paths mapped under ``workdir`` and its ports moved to free ones."""
    objects = render_kustomize()
    pod = one(objects, "Deployment", "gpushare-webhook")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    local = {mounts[name]: str(workdir / name) for name in ("tls", "config", "token")}

    def mapped(value: str) -> str:
        for mount, directory in local.items():
            value = value.replace(mount, directory)
        return value

    config_map = one(objects, "ConfigMap", pod["volumes"][[v["name"] for v in pod["volumes"]].index("config")]
                     ["configMap"]["name"])
    (workdir / "config").mkdir()
    for name, text in config_map["data"].items():
        (workdir / "config" / name).write_text(text)
    (workdir / "token").mkdir()  # the optional Secret volume: empty until the Secret exists
    env = {e["name"]: mapped(e["value"]) for e in container["env"] if "value" in e}
    env["GPUSHARE_CERTS__NAMESPACE"] = "gpushare-system"  # a fieldRef in the pod
    ops_port = free_port()
    env["GPUSHARE_SERVER__OPS_PORT"] = str(ops_port)
    args = container["args"]
    # gpushare_server gives --host, --port and --cert-dir (the tls mount: the same directory).
    assert mapped(args[args.index("--cert-dir") + 1]) == str(workdir / "tls")
    return env, ["--config", mapped(args[args.index("--config") + 1])], ops_port


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> Any:
    workdir = tmp_path_factory.mktemp("deployed")
    env, args, ops_port = deployed_server_config(workdir)
    # The serving Secret as the certificate job leaves it: CA and serving pair (ca.crt is what
    # the client certificates are checked against, auth.client_ca_file).
    from webhook.settings import Settings

    prepare_certificates(Settings(), workdir / "tls")
    # kube-scheduler's client certificate, made as docs/deploy.md says; two that must fail.
    done = subprocess.run([gpushare_executable(), "certs", "client", "kube-scheduler", "--cert-dir",
                           str(workdir / "tls"), "--out", str(workdir / "scheduler")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ca = load_issued(workdir / "tls" / "ca.crt", workdir / "tls" / "ca.key")
    write_pair(workdir / "scheduler", issue_client(ca, "intruder", 1), "intruder.crt", "intruder.key")
    write_pair(workdir / "scheduler", issue_client(issue_ca("someone-else", 1), "kube-scheduler", 1),
               "forged.crt", "forged.key")
    # gpushare_server's cert dir is workdir/certs: point it at the tls mount's directory.
    (workdir / "certs").symlink_to(workdir / "tls")
    with gpushare_server(workdir, *args, env=env) as server:
        server.ops_url = server.url.rsplit(":", 1)[0] + f":{ops_port}"
        server.workdir = workdir
        yield server


def get(server: Any, url: str, token: str | None = None, **kwargs: Any) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return server.session().get(url, headers=headers, timeout=15, **kwargs)


def post(server: Any, url: str, payload: Any, token: str | None = None, cert: str | None = None
         ) -> requests.Response:
    session = server.session()
    if cert:
        session.cert = (str(server.workdir / "scheduler" / f"{cert}.crt"),
                        str(server.workdir / "scheduler" / f"{cert}.key"))
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    # /dry-run reads YAML manifests; the other paths JSON.
    body = yaml.safe_dump(payload) if url.endswith("/dry-run") else json.dumps(payload)
    return session.post(url, data=body, headers=headers, timeout=15)


POD = load_json("pod-realistic.json")
EXPLAIN = "/explain?namespace=default&name=cuda-sample-m8x2k"  # a GPU pod of the demo snapshot


def test_the_admission_port_answers_the_api_server_without_credentials(deployed):
    for path in ("/validate", "/mutate"):
        reply = post(deployed, deployed.url + path, admission_review(POD))
        assert reply.status_code == 200, (path, reply.text)
        assert reply.json()["response"]["allowed"] is True
    for path in ("/healthz", "/readyz"):
        assert get(deployed, deployed.url + path).status_code == 200, path


def test_the_admission_port_does_not_serve_the_ops_paths_even_with_the_token(deployed):
    for token in (None, TOKEN):
        for path in ("/metrics", EXPLAIN):
            reply = get(deployed, deployed.url + path, token)
            assert reply.status_code == 404, (path, reply.text)
            assert "ops port" in reply.json()["error"]["reason"]
        reply = post(deployed, deployed.url + "/dry-run", POD, token)
        assert reply.status_code == 404 and "ops port" in reply.json()["error"]["reason"]


def test_the_ops_port_wants_the_token_and_serves_only_its_paths(deployed):
    token_file = deployed.workdir / "token" / "token"
    # Before the Secret exists (its volume is optional): refused, saying why.
    assert not token_file.exists()
    reply = get(deployed, deployed.ops_url + "/metrics", TOKEN)
    assert reply.status_code == 401 and "no bearer token is configured yet" in reply.json()["error"]["reason"]
    token_file.write_text(TOKEN + "\n")  # the Secret appears in the volume
    for path in ("/metrics", EXPLAIN):
        for wrong in (None, "not-the-token"):
            refused = get(deployed, deployed.ops_url + path, wrong)
            assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Bearer"), path
        answered = get(deployed, deployed.ops_url + path, TOKEN)
        assert answered.status_code == 200, (path, answered.text)
    assert "gpushare_admission_requests_total" in get(deployed, deployed.ops_url + "/metrics", TOKEN).text
    assert post(deployed, deployed.ops_url + "/dry-run", scheduled_pod()).status_code == 401
    dry_run = post(deployed, deployed.ops_url + "/dry-run", scheduled_pod(), TOKEN)
    assert dry_run.status_code == 200 and dry_run.json()["results"][0]["name"] == "p"
    # Whoever may reach the ops port (the monitoring namespace) cannot reach the admission paths there.
    for path in ("/validate", "/mutate", "/scheduler/filter"):
        reply = post(deployed, deployed.ops_url + path, admission_review(POD), TOKEN, cert="kube-scheduler")
        assert reply.status_code == 404, (path, reply.text)
    for path in ("/healthz", "/readyz"):
        assert get(deployed, deployed.ops_url + path).status_code == 200, path


def scheduled_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "cuda",
                                     "resources": {"limits": {"aliyun.com/gpu-mem": "2"}}}]}}


def test_the_extender_answers_only_kube_schedulers_client_certificate(deployed):
    url = deployed.url + "/scheduler/filter"
    args = {"Pod": scheduled_pod(), "NodeNames": ["cn-beijing.192.168.1.10", "cn-hangzhou.192.168.2.20"]}
    missing = post(deployed, url, args)
    assert missing.status_code == 401 and "client certificate" in missing.json()["error"]["reason"]
    intruder = post(deployed, url, args, cert="intruder")
    assert intruder.status_code == 403 and "kube-scheduler" in intruder.json()["error"]["reason"]
    with pytest.raises(requests.exceptions.SSLError):  # another CA: the TLS handshake itself fails
        post(deployed, url, args, cert="forged")
    answered = post(deployed, url, args, cert="kube-scheduler")
    assert answered.status_code == 200, answered.text
    assert set(answered.json()["NodeNames"]) <= set(args["NodeNames"]) and "FailedNodes" in answered.json()
    prioritized = post(deployed, deployed.url + "/scheduler/prioritize", args, cert="kube-scheduler")
    assert prioritized.status_code == 200 and {h["Host"] for h in prioritized.json()} <= set(args["NodeNames"])
    # The API server presents no certificate and is still answered (CERT_OPTIONAL at the TLS level).
    assert post(deployed, deployed.url + "/validate", admission_review(POD)).status_code == 200


def test_an_ops_port_equal_to_the_admission_port_is_refused_at_start(tmp_path):
    port = free_port()
    done = subprocess.run([gpushare_executable(), "serve", "--host", "127.0.0.1", "--port", str(port),
                           "--cert-dir", str(tmp_path / "certs")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GPUSHARE_SERVER__OPS_PORT": str(port)})
    assert done.returncode == 2
    assert f"server.ops_port {port} is server.port too; give each listener a port of its own" in done.stderr
    assert "Traceback" not in done.stderr
