"""The opt-in second source of a node's CPU manager policy: its kubelet's ``/configz``.

The policy (GN002, GB005) is not on the Node object. The API server's node proxy serves the
kubelet's running configuration at ``GET /api/v1/nodes/NAME/proxy/configz`` as
``{"kubeletconfig": {...}}``, the inner object being a ``KubeletConfiguration`` of
``kubelet.config.k8s.io/v1beta1`` (Kubernetes docs, "Reconfigure a Node's Kubelet in a Live
Cluster", which reads it with ``kubectl proxy`` and ``jq .kubeletconfig``; the same shape is
decoded by ``decodeConfigz`` in kubernetes/kubernetes ``test/e2e/framework/kubelet/config.go``).
The field is ``cpuManagerPolicy`` (``k8s.io/kubelet/config/v1beta1`` types.go), which the
kubelet defaults to ``"none"`` when unset (``pkg/kubelet/apis/config/v1beta1/defaults.go``).

Reading it needs RBAC ``get`` on ``nodes/proxy``, which reaches the whole kubelet API, so it is
off unless ``state.kubelet_configz.enabled``. When on, each GPU node without the policy label
is read once when it appears, again when its kubelet shows signs of a restart (a new boot ID or
kubelet version, a Ready transition: the policy can only change with a kubelet restart), and
every ``refresh_seconds``. Reads run on a few background threads with timeouts, never on the
admission path; a failure leaves the policy unknown and is logged once per node (a missing
permission once in all), and counted on /metrics.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from policies.model.cluster import NodeInfo
from policies.model.cluster_manifests import is_gpu_node
from policies.model.settings import KubeletConfigzSettings, Names
from webhook.state.status import ConfigzStatus

log = logging.getLogger("gpushare.state")

# The kubelet's default when cpuManagerPolicy is unset (pkg/kubelet/apis/config/v1beta1/defaults.go).
DEFAULT_POLICY = "none"
# A real /configz answer is a few KiB; anything far larger is not one.
MAX_BODY_BYTES = 1024 * 1024
KNOWN_POLICIES = ("static", "none")

Fetch = Callable[[str], bytes]


class ConfigzError(Exception):
    """The /configz answer could not be had or is not a kubelet configuration."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def policy_from_configz(body: bytes) -> str:
    """``kubeletconfig.cpuManagerPolicy`` of a /configz answer (the kubelet's default when absent)."""
    try:
        document = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise ConfigzError(f"not JSON: {exc}") from None
    config = document.get("kubeletconfig") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise ConfigzError('no "kubeletconfig" object in the answer')
    policy = config.get("cpuManagerPolicy", DEFAULT_POLICY)
    if not isinstance(policy, str):
        raise ConfigzError(f"cpuManagerPolicy is not a string: {policy!r}")
    return policy.strip().lower() or DEFAULT_POLICY


def kubelet_signature(obj: dict[str, Any]) -> tuple[str, str, str]:
    """What changes when a node's kubelet has (probably) restarted: boot ID, kubelet version,
    and when the Ready condition last changed. Kubernetes announces no kubelet restart as such."""
    status = obj.get("status") or {}
    info = status.get("nodeInfo") or {}
    ready = next((c.get("lastTransitionTime", "") for c in status.get("conditions") or ()
                  if c.get("type") == "Ready"), "")
    return info.get("bootID", ""), info.get("kubeletVersion", ""), ready


def api_fetcher(api: Any, settings: KubeletConfigzSettings, connect_timeout: float) -> Fetch:
    """GET /api/v1/nodes/NAME/proxy/configz with the official client's CoreV1Api."""
    from kubernetes.client.exceptions import ApiException

    timeout = (min(connect_timeout, settings.timeout_seconds), settings.timeout_seconds)

    def fetch(name: str) -> bytes:
        try:
            response = api.connect_get_node_proxy_with_path(name, "configz", _preload_content=False,
                                                            _request_timeout=timeout)
        except ApiException as exc:
            raise ConfigzError(f"API error {exc.status}: {_reason(exc)}", exc.status) from None
        try:
            body = response.read(MAX_BODY_BYTES + 1)
        finally:
            response.release_conn()
        if len(body) > MAX_BODY_BYTES:
            raise ConfigzError(f"answer larger than {MAX_BODY_BYTES} bytes")
        return bytes(body)

    return fetch


def _reason(exc: Any) -> str:
    """The Status message the API server sent, else the HTTP reason."""
    try:
        status = msgspec.json.decode(exc.body or b"{}")
    except (msgspec.DecodeError, TypeError):
        status = None
    message = status.get("message") if isinstance(status, dict) else None
    return str(message or exc.reason or "")[:300]


@dataclass
class _Node:
    signature: tuple[str, str, str]
    policy: str = ""
    failing: bool = False
    queued: bool = False
    reading: bool = False
    again: bool = False  # asked for while being read: read once more afterwards
    # Why the next read happens: "new", "restart" (a failure then forgets the old policy) or "refresh".
    why: str = "new"
    due: float | None = None  # when the next refresh is due


class KubeletConfigReader:
    """Reads GPU nodes' /configz on background threads; ``policy(name)`` answers at once."""

    def __init__(self, fetch: Fetch, names: Names, settings: KubeletConfigzSettings,
                 on_read: Callable[[str, str], None], status: ConfigzStatus,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._names = names
        self._settings = settings
        self._on_read = on_read
        self.status = status
        self._clock = clock
        self._cond = threading.Condition()
        self._nodes: dict[str, _Node] = {}
        self._queue: deque[str] = deque()
        self._due: list[tuple[float, int, str]] = []  # refreshes, a heap
        self._order = itertools.count()
        self._stop = False
        self._threads: list[threading.Thread] = []
        self._told_forbidden = False

    # -- from the watch thread -----------------------------------------------------------------
    def observe(self, node: NodeInfo, signature: tuple[str, str, str]) -> None:
        """A node was listed or changed: read it if it is new to us or its kubelet restarted."""
        key = self._names.labels.cpu_manager_policy
        if key in node.labels or key in node.annotations or not is_gpu_node(node, self._names):
            self.forget(node.name)  # the label wins; and only GPU nodes are read
            return
        with self._cond:
            known = self._nodes.get(node.name)
            if known is None:
                known = self._nodes[node.name] = _Node(signature)
                self.status.pending(node.name)
            elif known.signature == signature:
                return
            else:
                log.info("node %s: its kubelet restarted (boot ID, version or Ready changed); reading its "
                         "/configz again", node.name)
                known.signature, known.why = signature, "restart"
            self._enqueue(node.name, known)

    def forget(self, name: str) -> None:
        with self._cond:
            if self._nodes.pop(name, None) is not None:
                self.status.forget(name)

    def policy(self, name: str) -> str:
        known = self._nodes.get(name)
        return known.policy if known is not None else ""

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        log.warning("kubelet /configz: reading the CPU manager policy of GPU nodes without the %s label "
                    "through the API server's node proxy (state.kubelet_configz; needs RBAC get on nodes/proxy)",
                    self._names.labels.cpu_manager_policy)
        for n in range(self._settings.concurrency):
            thread = threading.Thread(target=self._work, name=f"kubelet-configz-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout)

    # -- the workers ---------------------------------------------------------------------------
    def _enqueue(self, name: str, known: _Node) -> None:
        """Caller holds the lock. A node is queued once; one being read is read again afterwards."""
        if known.reading:
            known.again = True
        elif not known.queued:
            known.queued = True
            self._queue.append(name)
            self._cond.notify()

    def _next(self) -> str | None:
        """The next node to read, waiting for the queue or the next refresh (None: stop)."""
        with self._cond:
            while not self._stop:
                while self._queue:
                    name = self._queue.popleft()
                    known = self._nodes.get(name)
                    if known is not None and known.queued:
                        known.queued, known.reading = False, True
                        return name
                now = self._clock()
                while self._due and self._due[0][0] <= now:
                    due, _, name = heapq.heappop(self._due)
                    known = self._nodes.get(name)
                    if known is not None and known.due == due:
                        known.why = "refresh"
                        self._enqueue(name, known)
                if not self._queue:
                    self._cond.wait(self._due[0][0] - now if self._due else None)
            return None

    def _work(self) -> None:
        while True:
            name = self._next()
            if name is None:
                return
            try:
                self._read(name)
            finally:
                with self._cond:
                    known = self._nodes.get(name)
                    if known is not None:
                        known.reading = False
                        if known.again:
                            known.again = False
                            self._enqueue(name, known)

    def _read(self, name: str) -> None:
        try:
            policy: str | None = policy_from_configz(self._fetch(name))
            error: ConfigzError | None = None
        except ConfigzError as exc:
            policy, error = None, exc
        except Exception as exc:  # a dropped connection, a timeout: the node stays unknown
            policy, error = None, ConfigzError(f"{type(exc).__name__}: {exc}")
        with self._cond:
            known = self._nodes.get(name)
            if known is None:  # deleted, or labelled, while it was read
                return
            refresh = self._settings.refresh_seconds
            known.due = self._clock() + refresh if refresh > 0 else None
            if known.due is not None:
                heapq.heappush(self._due, (known.due, next(self._order), name))
            was_failing, why = known.failing, known.why
            known.failing = policy is None
            if policy is not None:
                known.policy = policy
            elif why != "refresh":
                known.policy = ""  # a new node, or a restarted kubelet: what was read before may no longer hold
            current = known.policy
        if policy is not None:
            self.status.read(name, policy if policy in KNOWN_POLICIES else "other", ok=True)
            if was_failing:
                log.warning("node %s: kubelet /configz read again: cpuManagerPolicy %s", name, policy)
            else:
                log.info("node %s: kubelet /configz: cpuManagerPolicy %s", name, policy)
        else:
            assert error is not None
            self.status.read(name, "unread" if not current else
                             (current if current in KNOWN_POLICIES else "other"), ok=False)
            self._failed(name, error, was_failing, current)
        self._on_read(name, current)

    def _failed(self, name: str, error: ConfigzError, was_failing: bool, current: str) -> None:
        """Said once per node until it is read again; a missing permission once in all."""
        if error.status in (401, 403):
            if not self._told_forbidden:
                self._told_forbidden = True
                log.error("kubelet /configz: %s: the webhook's service account may not get nodes/proxy; grant it "
                          "(docs/install.md) or turn state.kubelet_configz.enabled off; CPU manager policies "
                          "stay unknown", error)
            return
        if was_failing:
            log.debug("node %s: kubelet /configz still unreadable: %s", name, error)
            return
        kept = f"keeping cpuManagerPolicy {current} read before" if current else "its CPU manager policy stays unknown"
        log.warning("node %s: kubelet /configz could not be read: %s; %s (said once until it is read again)",
                    name, error, kept)
