"""The one way this project builds a client for the official kubernetes package: in-cluster
when running in a pod, else a kubeconfig. ``serve`` (the live state), ``inspect`` and ``certs``
all come through here, so they resolve configuration the same way."""

from __future__ import annotations

import os
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


def api_client(kubeconfig: Path | None = None, context: str | None = None) -> Any:
    """A client for one cluster; never touches the kubernetes package's global default config.

    An explicit ``kubeconfig`` (or ``context``) wins; else the in-cluster service account when
    this runs in a pod; else ``$KUBECONFIG`` or ``~/.kube/config`` as kubectl would read them.
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
    return client.ApiClient(configuration)
