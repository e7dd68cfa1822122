"""The AdmissionReviews bench/admission.py sends: the pods and workloads a GPU-sharing cluster
really admits, each in a review as kube-apiserver writes it (tests/support/go_json.py: Go's escaping,
a newline at the end). Objects are written as the API server holds them after defaulting."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.support.go_json import api_server_json, go_json

ROOT = Path(__file__).resolve().parents[2]
MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"


def review_for(obj: dict[str, Any], *, group: str = "", resource: str = "pods") -> dict[str, Any]:
    """``obj`` in a CREATE AdmissionReview, the fields in the order of the Go structs."""
    kind = {"group": group, "version": "v1", "kind": obj["kind"]}
    gvr = {"group": group, "version": "v1", "resource": resource}
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "kind": kind, "resource": gvr,
        "requestKind": kind, "requestResource": gvr, "name": obj["metadata"].get("name", ""),
        "namespace": obj["metadata"]["namespace"], "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller",
                     "uid": "0f7ac3f3-9b07-4c36-8c4e-1f3bd1d9a2c1",
                     "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                                "system:authenticated"]},
        "object": obj, "oldObject": None, "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}}


def realistic_pod() -> dict[str, Any]:
    """tests/data/pod-realistic.json: a defaulted Job pod asking for 4 GiB of a shared card."""
    pod: dict[str, Any] = json.loads((ROOT / "tests" / "data" / "pod-realistic.json").read_text())
    return pod


def shell_pod() -> dict[str, Any]:
    """The everyday ML pod: its command redirects and chains (``>`` and ``&&`` reach the webhook
    as ``\\u003e`` and ``\\u0026``)."""
    pod = realistic_pod()
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", "nvidia-smi > /tmp/gpu.log && python train.py"]
    return pod


def _probe(path: str, port: int, period: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port, "scheme": "HTTP"}, "timeoutSeconds": 1,
            "periodSeconds": period, "successThreshold": 1, "failureThreshold": 3}


def _sidecar(name: str, image: str, args: list[str], env: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "image": image, "args": args, "env": env,
            "resources": {"limits": {"cpu": "200m", "memory": "256Mi"}, "requests": {"cpu": "50m", "memory": "64Mi"}},
            "livenessProbe": _probe("/healthz", 15021, 10), "readinessProbe": _probe("/ready", 15021, 5),
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent"}


def sidecar_pod() -> dict[str, Any]:
    """An inference pod with four sidecars (mesh proxy, log shipper, metrics, config reloader),
    40 environment variables and liveness, readiness and startup probes."""
    pod = realistic_pod()
    main = pod["spec"]["containers"][0]
    env: list[dict[str, Any]] = [{"name": f"MODEL_SETTING_{n:02d}", "value": f"value-{n}"} for n in range(24)]
    env += [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    main.update(env=env, ports=[{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                livenessProbe=_probe("/v2/health/live", 8080, 10), readinessProbe=_probe("/v2/health/ready", 8080, 5),
                startupProbe=_probe("/v2/health/ready", 8080, 10) | {"failureThreshold": 60})
    sidecar_env = [{"name": f"SIDECAR_{n}", "value": "1"} for n in range(3)]
    pod["spec"]["containers"] += [
        _sidecar("istio-proxy", "docker.io/istio/proxyv2:1.22.3", ["proxy", "sidecar", "--log_output_level=warn"],
                 sidecar_env),
        _sidecar("fluent-bit", "fluent/fluent-bit:3.1", ["--config=/fluent-bit/etc/fluent-bit.conf"], sidecar_env),
        _sidecar("dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.7-3.5.0-ubuntu22.04", ["-f", "/etc/dcgm.csv"],
                 sidecar_env),
        _sidecar("config-reloader", "ghcr.io/stakater/reloader:v1.1.0", ["--namespace=ml-serving"], sidecar_env[:1]),
    ]
    return pod


def annotated_pod(size: int = 30_000) -> dict[str, Any]:
    """A pod applied with ``kubectl apply``: ``kubectl.kubernetes.io/last-applied-configuration``
    holds its manifest as JSON text, and a notes annotation with a startup script brings the
    body to about ``size`` bytes."""
    pod = shell_pod()
    annotations = pod["metadata"]["annotations"]
    applied = {"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {}, "labels": pod["metadata"]["labels"],
                                                              "name": "train", "namespace": "ml-serving"},
               "spec": {"containers": pod["spec"]["containers"], "restartPolicy": "Never"}}
    annotations["kubectl.kubernetes.io/last-applied-configuration"] = json.dumps(applied, separators=(",", ":")) + "\n"
    annotations["ml.example.com/prepare-script"] = ""
    room = size - len(api_server_json(review_for(pod)))
    lines = []
    for n in range(size):  # lines until the escaped script fills the room
        line = f"step {n}: test -f /data/shard-{n} && echo ok >> /tmp/prep.log || exit {n % 7 + 1}\n"
        room -= len(go_json(line)) - 2
        if room < 0:
            break
        lines.append(line)
    annotations["ml.example.com/prepare-script"] = "".join(lines)
    return pod


def core_mem_pod() -> dict[str, Any]:
    """A pod asking for memory and compute of a card (cGPU), kept by required node affinity to
    core_mem nodes of two card models and preferring one zone."""
    pod = realistic_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {MEM: "8", CORE: "30"}, "requests": {MEM: "8", CORE: "30"}}
    pod["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "ack.node.gpu.schedule", "operator": "In", "values": ["core_mem"]},
            {"key": "aliyun.accelerator/nvidia_name", "operator": "In",
             "values": ["Tesla-V100-SXM2-16GB", "Tesla-V100-SXM2-32GB"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "preference": {"matchExpressions": [
            {"key": "topology.kubernetes.io/region", "operator": "In", "values": ["cn-beijing"]}]}}]}}
    return pod


def deployment() -> dict[str, Any]:
    """An inference Deployment as the API server holds it after defaulting, its template asking
    for 6 GiB of a shared card."""
    template = copy.deepcopy(realistic_pod())
    spec = template["spec"]
    del spec["volumes"], spec["containers"][0]["volumeMounts"], spec["serviceAccount"], spec["priority"]
    spec.update(restartPolicy="Always")
    spec["containers"][0]["resources"] = {"limits": {MEM: "6"}, "requests": {MEM: "6"}}
    labels = {"app": "mnist-serving"}
    return {"kind": "Deployment", "apiVersion": "apps/v1", "metadata": {
        "name": "mnist-serving", "namespace": "ml-serving", "labels": labels,
        "annotations": {"deployment.kubernetes.io/revision": "1"}, "generation": 1},
        "spec": {"replicas": 3, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": spec},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
                 "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600}}


def body_set() -> dict[str, bytes]:
    """Name -> the review's bytes as the API server sends them."""
    return {name: api_server_json(review) for name, review in (
        ("realistic pod", review_for(realistic_pod())),
        ("shell command (&&, >)", review_for(shell_pod())),
        ("5 containers, 40 env, probes", review_for(sidecar_pod())),
        ("30 KB annotations", review_for(annotated_pod())),
        ("core+mem, node affinity", review_for(core_mem_pod())),
        ("Deployment", review_for(deployment(), group="apps", resource="deployments")),
    )}
