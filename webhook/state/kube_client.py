"""The one way this project builds a client for the official kubernetes package: in-cluster
when running in a pod, else a kubeconfig. ``serve`` (the live state), ``inspect`` and ``certs``
all come through here, so they resolve configuration the same way."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

# Mounted into every pod whose service account token is automounted (Kubernetes docs,
# "Accessing the Kubernetes API from a Pod"); the client library reads the same path.
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def one_line(exc: BaseException) -> str:
    """yaml and kubernetes errors span lines; an error message is one."""
    return " ".join(str(exc).split()) or type(exc).__name__


class KubeConfigError(ValueError):
    """No usable cluster configuration (no service account, no kubeconfig, bad context)."""


def in_cluster() -> bool:
    """Whether this runs in a pod that can use its service account."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and SERVICE_ACCOUNT_TOKEN.exists()


def require_file(kubeconfig: Path | None) -> None:
    """A kubeconfig named on the command line exists: said before anything else is."""
    if kubeconfig is not None and not kubeconfig.is_file():
        why = "is a directory" if kubeconfig.is_dir() else "no such file"
        raise KubeConfigError(f"cannot read kubeconfig {kubeconfig}: {why}")


def api_client(kubeconfig: Path | None = None, context: str | None = None, *, retries: bool = True) -> Any:
    """A client for one cluster; never touches the kubernetes package's global default config.

    An explicit ``kubeconfig`` (or ``context``) wins; else the in-cluster service account when
    this runs in a pod; else ``$KUBECONFIG`` or ``~/.kube/config`` as kubectl would read them.
    ``retries=False``: no retries inside the HTTP library (urllib3 retries a request three times by
    default, logging a WARNING each time), for callers that retry with back-off of their own.
    """
    import yaml
    from kubernetes import client, config

    configuration = client.Configuration()
    require_file(kubeconfig)
    try:
        if kubeconfig is None and context is None and in_cluster():
            where = "in-cluster config"
            config.load_incluster_config(client_configuration=configuration)
        else:
            where = str(kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config")
            config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                                    client_configuration=configuration, persist_config=False)
    except (config.ConfigException, OSError, ValueError, TypeError, AttributeError, yaml.YAMLError) as exc:
        raise KubeConfigError(f"{where}: not a usable cluster configuration: {one_line(exc)}") from None
    if not retries:
        configuration.retries = False  # urllib3: raise the first error, as it is
    return client.ApiClient(configuration)


def connection_problem(exc: BaseException, host: str = "") -> str:
    """An HTTP library error in plain words: "cannot reach the API server https://10.0.0.1:6443:
    connection refused", without urllib3's pools, retry objects and errno numbers."""
    pool = getattr(exc, "pool", None) if type(exc).__name__ in ("MaxRetryError", "ReadTimeoutError") else None
    conn = getattr(exc, "conn", None)
    if not host and pool is not None:
        host = f"{pool.scheme}://{pool.host}:{pool.port}"
    elif not host and conn is not None and getattr(conn, "host", None):
        scheme = "https" if type(conn).__name__.startswith("HTTPS") else "http"
        host = f"{scheme}://{conn.host}:{conn.port}"
    cause = getattr(exc, "reason", None) or exc
    text = str(cause)
    errno = re.search(r"\[Errno -?\d+\] ([^)'\"]+)", text)
    if errno:
        why = errno.group(1).strip().rstrip(".").lower()
    elif "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        why = "its TLS certificate is not trusted (certificate-authority-data in the kubeconfig)"
    elif "timed out" in text.lower() or "timeout" in type(cause).__name__.lower():
        why = "timed out"
    elif type(cause).__name__ == "ProtocolError":  # a stream cut mid-response (a watch, a list page)
        return " ".join(f"the connection to the API server {host} broke".split())
    else:
        why = type(cause).__name__
    return " ".join(f"cannot reach the API server {host}: {why}".split())
