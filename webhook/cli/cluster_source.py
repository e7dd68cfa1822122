"""The cluster a read-only command looks at (``inspect``, ``audit``, ``explain``, ``dashboard``):
a snapshot file, the embedded demo cluster, or one paged read of the live cluster
(``--kubeconfig``, else in-cluster, else $KUBECONFIG / ~/.kube/config). The four commands take
the same options and say the same thing when no cluster is given."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from webhook.cli.common import ClusterFailure, UsageFailure, kubeconfig_options, with_options

F = TypeVar("F", bound=Callable[..., Any])
SNAPSHOT_HOW = "`kubectl get nodes,pods -A -o yaml > cluster.yaml`"
NO_CLUSTER = ("pass --kubeconfig FILE, --snapshot FILE (saved with " + SNAPSHOT_HOW + ") or --demo "
              "(the embedded demo cluster)")


def cluster_options(func: F) -> F:
    """--snapshot, --demo, --kubeconfig, --context: the same for every command that reads a cluster."""
    return with_options(func, [
        click.option("--snapshot", type=click.Path(dir_okay=False, path_type=Path),
                     help=f"Read a saved cluster ({SNAPSHOT_HOW}) instead of the live one."),
        click.option("--demo", is_flag=True, help="Read the embedded demo cluster (4 nodes) instead of the live one."),
        *kubeconfig_options(),
    ])


def read_state(snapshot: Path | None, demo: bool, kubeconfig: Path | None, context: str | None,
               names: Any) -> tuple[Any, str, str]:
    """The state, how findings name its source (the snapshot's path, ``demo``, ``live:<where>``), and
    the sentence that describes it ("snapshot file X: 3 nodes, 1 GPU pod")."""
    from webhook.state.snapshot import describe_snapshot

    if sum((snapshot is not None, demo, kubeconfig is not None or context is not None)) > 1:
        raise UsageFailure("give one cluster: --snapshot, --demo or --kubeconfig/--context")
    if demo:
        from webhook.state.snapshot import load_demo_snapshot

        state = load_demo_snapshot(names)
        return state, "demo", describe_snapshot(state, None)
    if snapshot is not None:
        state = snapshot_state(snapshot, names)
        return state, str(snapshot), describe_snapshot(state, snapshot)
    state, described = live_state(kubeconfig, context, names)
    return state, f"live:{kubeconfig}" if kubeconfig is not None else "live:cluster", described


def snapshot_state(path: Path, names: Any) -> Any:
    from webhook.state.snapshot import SnapshotError, load_snapshot

    try:
        return load_snapshot(path, names)
    except SnapshotError as exc:
        raise UsageFailure(str(exc)) from None


def no_cluster_configured(kubeconfig: Path | None, context: str | None) -> bool:
    """Nothing names a cluster: no flag, not in a pod, and no kubeconfig where kubectl looks."""
    from webhook.state.kube_client import in_cluster

    if kubeconfig is not None or context is not None or in_cluster():
        return False
    paths = os.environ.get("KUBECONFIG", "").split(os.pathsep) if os.environ.get("KUBECONFIG") else \
        [os.path.expanduser("~/.kube/config")]
    return not any(p and os.path.isfile(p) for p in paths)


def client_for(kubeconfig: Path | None, context: str | None, alternatives: str = NO_CLUSTER) -> Any:
    """An API client, or one line saying why there is none and what else to pass (``alternatives``:
    only options the command has)."""
    from webhook.state.kube_client import KubeConfigError, api_client

    if no_cluster_configured(kubeconfig, context):
        where = f"$KUBECONFIG={os.environ['KUBECONFIG']}" if os.environ.get("KUBECONFIG") else "~/.kube/config"
        raise UsageFailure(f"no cluster to read: no kubeconfig at {where} and not running in a pod; {alternatives}")
    quiet_insecure_warnings()
    try:
        return api_client(kubeconfig, context)
    except KubeConfigError as exc:
        raise UsageFailure(f"{str(exc).rstrip('.')}; or {alternatives}") from None


def quiet_insecure_warnings() -> None:
    """A kubeconfig with insecure-skip-tls-verify is the user's choice, as it is to kubectl, which
    says nothing about it: urllib3's InsecureRequestWarning (with a file path) is not for them."""
    from urllib3.exceptions import InsecureRequestWarning

    warnings.simplefilter("ignore", InsecureRequestWarning)


def unreachable(exc: BaseException, host: str = "") -> UsageFailure:
    """urllib3's "HTTPSConnectionPool(...): Max retries exceeded ... NewConnectionError(...)" as
    one line in plain words: which API server, and the operating system's reason."""
    from webhook.state.kube_client import connection_problem

    return UsageFailure(connection_problem(exc, host))


def live_state(kubeconfig: Path | None, context: str | None, names: Any) -> tuple[Any, str]:
    """The cluster read once, and which cluster it was, in words."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from webhook.state.cluster_read import read_cluster

    client = client_for(kubeconfig, context)
    host = client.configuration.host
    try:
        state = read_cluster(client, names)
    except ApiException as exc:
        raise ClusterFailure(f"the API server {host} refused to list nodes and pods: HTTP {exc.status} "
                             f"{exc.reason}") from None
    except HTTPError as exc:
        raise unreachable(exc, host) from None
    where = f"kubeconfig {kubeconfig}" if kubeconfig is not None else "the default kubeconfig or in-cluster account"
    nodes, pods = state.counts()
    return state, f"cluster from {where} (API server {host}): {nodes} nodes, {pods} GPU pods"


def custom_objects_api(kubeconfig: Path | None, context: str | None) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(client_for(kubeconfig, context))


def read_workloads(snapshot: Path | None, demo: bool, kubeconfig: Path | None, context: str | None,
                   settings: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The custom workloads (training jobs, Ray clusters...) of the snapshot file or the live cluster
    (the demo cluster has none), and notes on what could not be read."""
    from policies.model.workloads import group_of, workload_table

    if demo:
        return [], []
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

    client = client_for(kubeconfig, context)
    host = client.configuration.host
    try:
        return read_live(client, table.kinds())
    except ApiException as exc:
        raise ClusterFailure(f"the API server {host} refused to list custom workloads: HTTP {exc.status} "
                             f"{exc.reason}") from None
    except HTTPError as exc:
        raise unreachable(exc, host) from None
