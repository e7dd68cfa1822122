"""The cluster a read-only command looks at: a snapshot file, or one paged read of the live
cluster (``--kubeconfig``, else in-cluster, else $KUBECONFIG / ~/.kube/config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from policies.cluster import ClusterSnapshot
from policies.settings import Names, PolicySettings
from webhook.cli.common import ClusterFailure, UsageFailure
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


def read_workloads(snapshot: Path | None, kubeconfig: Path | None, context: str | None,
                   settings: PolicySettings) -> tuple[list[dict[str, Any]], list[str]]:
    """The custom workloads (training jobs, Ray clusters...) of the snapshot file or the live cluster,
    and notes on what could not be read."""
    from policies.workloads import group_of, workload_table

    table = workload_table(settings)
    if snapshot is not None:
        from webhook.state.snapshot import SnapshotError, snapshot_objects

        try:
            items = snapshot_objects(snapshot.read_text(encoding="utf-8"), str(snapshot))
        except (OSError, UnicodeDecodeError, SnapshotError) as exc:
            raise UsageFailure(str(exc)) from None
        return [i for i in items if table.lookup(group_of(i), str(i.get("kind", ""))) is not None], []
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from webhook.state.cluster_read import read_workloads as read_live
    from webhook.state.kube_client import api_client

    try:
        return read_live(api_client(kubeconfig, context), table.kinds())
    except ApiException as exc:
        raise ClusterFailure(f"the API server refused to list custom workloads: HTTP {exc.status} "
                             f"{exc.reason}") from None
    except HTTPError as exc:
        raise ClusterFailure(f"cannot reach the API server: {exc}") from None
