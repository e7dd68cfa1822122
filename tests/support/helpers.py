"""Shared test helpers: real processes, real TLS, polling with deadlines (never sleeps)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests

from tests.support.processes import free_port, https_server

DATA = Path(__file__).parents[1] / "data"
SEEDS = DATA / "seeds"  # copies of ACK documentation pages (tests/data/seeds/README.md)
T = TypeVar("T")


def gpushare_executable() -> str:
    """The installed console script beside this interpreter."""
    candidate = Path(sys.executable).parent / "gpushare"
    if not candidate.exists():
        raise RuntimeError(f"gpushare is not installed beside {sys.executable}; run pip install -e .")
    return str(candidate)


def wait_until(probe: Callable[[], T | None], timeout: float = 20.0, interval: float = 0.02,
               what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = probe()
            if result:
                return result
        except Exception as exc:  # the probe may fail while the thing starts
            last_error = exc
        time.sleep(interval)  # pacing the poll, not synchronisation: the deadline decides
    raise TimeoutError(f"{what} not reached within {timeout}s (last error: {last_error!r})")


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    url: str
    cert_dir: Path
    log_path: Path

    @property
    def ca(self) -> str:
        return str(self.cert_dir / "ca.crt")

    def session(self) -> requests.Session:
        session = requests.Session()
        # REQUESTS_CA_BUNDLE in the environment would override session.verify: trust only our CA.
        session.trust_env = False
        session.verify = self.ca
        return session

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def post_json(self, path: str, payload: Any, session: requests.Session | None = None,
                  **kwargs: Any) -> requests.Response:
        client = session or self.session()
        return client.post(self.url + path, data=json.dumps(payload),
                           headers={"Content-Type": "application/json"}, timeout=15, **kwargs)


@contextmanager
def gpushare_server(workdir: Path, *args: str, env: dict[str, str] | None = None,
                    ready_path: str = "/healthz", worker: str = "webhook") -> Iterator[RunningServer]:
    """Start the real ``gpushare serve`` on a free loopback port and stop it afterwards;
    ``worker``: the gunicorn worker it runs (server.worker)."""
    port = free_port()
    cert_dir = workdir / "certs"
    log_path = workdir / f"server-{port}.log"
    command = [gpushare_executable(), "serve", "--host", "127.0.0.1", "--port", str(port),
               "--cert-dir", str(cert_dir), *args]
    env = dict(env or {})
    if worker != "webhook":  # the default: nothing set, so a test's own configuration is all it reads
        env["GPUSHARE_SERVER__WORKER"] = worker
    if "--kubeconfig" in args and "--config" not in args:  # a live cluster needs the scheduler chosen
        env.setdefault("GPUSHARE_NAMES__SCHEDULER_NAME", "ack-co-scheduler")
    with https_server(command, cert_dir / "ca.crt", port, log_path, timeout=30, ready_path=ready_path,
                      cwd=workdir, env=env) as process:
        yield RunningServer(process, f"https://localhost:{port}", cert_dir, log_path)


def load_json(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def admission_review(obj: dict[str, Any] | None, *, kind: str | None = None, operation: str = "CREATE",
                     namespace: str | None = None, old: dict[str, Any] | None = None,
                     api_version: str = "admission.k8s.io/v1", group: str = "", version: str = "v1",
                     resource: str | None = None, sub_resource: str = "", dry_run: bool = False,
                     username: str = "kubernetes-admin", groups: tuple[str, ...] = ("system:masters",),
                     uid: str | None = None) -> dict[str, Any]:
    """A real AdmissionReview as kube-apiserver sends it."""
    kind = kind or (obj or {}).get("kind", "Pod")
    meta = (obj or {}).get("metadata", {})
    namespace = namespace if namespace is not None else meta.get("namespace", "default")
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource or kind.lower() + "s"},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource or kind.lower() + "s"},
        "name": meta.get("name", ""),
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": username, "uid": "u-1", "groups": list(groups)},
        "object": copy.deepcopy(obj),
        "oldObject": copy.deepcopy(old),
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def many_nodes_snapshot(path: Path, nodes: int) -> Path:
    """A snapshot file of ``nodes`` GPU nodes (half cgpu, half core_mem, 4 x 15 GiB cards each)."""
    from tests.support.cluster_builders import gpu_node

    items = [gpu_node(f"node-{i:05d}", "core_mem" if i % 2 else "cgpu") for i in range(nodes)]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def costly_pod(tag: str, terms: int) -> dict[str, Any]:
    """A legal Pod whose GC001 check reads every node once per term: ``terms`` required node
    affinity terms, each on a label no node has (``tag`` makes the labels new, so nothing the
    webhook remembers from an earlier review helps). Its cost grows with terms x nodes, up to
    capacity.max_work ("too costly to evaluate")."""
    required = [{"matchExpressions": [{"key": f"example.com/absent-{tag}-{i}", "operator": "Exists"}]}
                for i in range(terms)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"costly-{tag}", "namespace": "default"},
            "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": required}}},
                "containers": [{"name": "cuda", "image": "cuda:12",
                                "resources": {"limits": {"aliyun.com/gpu-mem": 1}}}]}}
