"""An ApiClient for the official kubernetes client: in-cluster when running in a pod, else kubeconfig."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def one_line(exc: BaseException) -> str:
    """yaml and kubernetes errors span lines; an error message is one."""
    return " ".join(str(exc).split()) or type(exc).__name__


class KubeConfigError(ValueError):
    """No usable cluster configuration (no service account, no kubeconfig, bad context)."""


def api_client(kubeconfig: Path | None = None, context: str | None = None) -> Any:
    """A client for one cluster; never touches the kubernetes package's global default config.

    An explicit ``kubeconfig`` wins; else the in-cluster service account when this runs in a
    pod; else ``$KUBECONFIG`` or ``~/.kube/config`` as kubectl would read them.
    """
    import yaml
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                                    client_configuration=configuration, persist_config=False)
    except (config.ConfigException, OSError, ValueError, TypeError, AttributeError, yaml.YAMLError) as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise KubeConfigError(f"{where}: not a usable kubeconfig: {one_line(exc)}") from None
    return client.ApiClient(configuration)
