"""The cluster a read-only command looks at: a snapshot file, or one paged read of the live
cluster (``--kubeconfig``, else in-cluster, else $KUBECONFIG / ~/.kube/config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from policies.cluster import ClusterSnapshot
from policies.settings import Names
from webhook.cli.inspect import _live_state, _snapshot_state


def read_state(snapshot: Path | None, kubeconfig: Path | None, context: str | None,
               names: Names) -> tuple[ClusterSnapshot, str]:
    """The state and how findings name its source (the snapshot's path, or ``live:<where>``)."""
    if snapshot is not None:
        return _snapshot_state(snapshot, names), str(snapshot)
    state, _described = _live_state(kubeconfig, context, names)
    return state, f"live:{kubeconfig}" if kubeconfig is not None else "live:cluster"


def custom_objects_api(kubeconfig: Path | None, context: str | None) -> Any:
    from kubernetes import client

    from webhook.state.kube_client import api_client

    return client.CustomObjectsApi(api_client(kubeconfig, context))
