"""Leader election among the webhook's replicas with a coordination.k8s.io/v1 Lease, and the
routing label that sends ``pods/binding`` reviews to the leader alone.

The protocol is client-go's (k8s.io/client-go/tools/leaderelection/leaderelection.go,
``tryAcquireOrRenew``, ``acquire``, ``renew``, ``release``), written here over CoreV1/
CoordinationV1 read, create and replace because the Python client's ``kubernetes.leaderelection``
cannot stop, never releases, and judges expiry by the wall clock:

- a candidate reads the Lease; a record it has not seen before restarts its own count
  (``observedTime``, a local monotonic clock: clock skew between nodes does not matter);
- it takes the Lease only when the holder is empty or the record has not changed for
  ``leaseDurationSeconds`` since it saw it change; the write carries the resourceVersion it
  read, so of two candidates only one succeeds (the other gets 409 Conflict);
- the leader renews every retry period; when no renewal succeeded for the renew deadline it
  stops leading (before the lease expires for the others: lease > renew deadline);
- a replica that stops (SIGTERM) releases the Lease (holder emptied, duration 1 s), so the
  next leader takes over in one retry period instead of a lease duration.

Routing: the leader labels its own pod ``leader.routing_label=true``; the bindings Service
selects that label. A new leader labels itself first, then removes the label from every other
pod (a replica that crashed cannot); a starting replica removes it from its own pod (its
container may have been restarted inside a former leader's pod).
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhook.settings import LeaderSettings

log = logging.getLogger("gpushare.leader")

JITTER = 1.2  # client-go's leaderelection JitterFactor: each wait is retry x [1, 2.2)


@dataclass(frozen=True)
class Record:
    """What a Lease says about its holder (the fields client-go's LeaderElectionRecord compares)."""

    holder: str
    duration: int
    acquired: Any
    renewed: Any
    transitions: int


def _record(lease: Any) -> Record:
    spec = lease.spec
    return Record(spec.holder_identity or "", int(spec.lease_duration_seconds or 0), spec.acquire_time,
                  spec.renew_time, int(spec.lease_transitions or 0))


def new_identity(pod_name: str) -> str:
    """Unique per process start, as client-go asks: a restarted container must not believe it
    still holds the Lease its previous life held."""
    return f"{pod_name or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    """One replica's candidacy; ``leading()`` is what the admission route asks."""

    def __init__(self, core: Any, coordination: Any, settings: LeaderSettings, namespace: str,
                 identity: str, ready: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.core, self.coordination, self.settings = core, coordination, settings
        self.namespace, self.identity, self.ready, self.clock = namespace, identity, ready, clock
        self._leading = False
        self._renewed_at = 0.0  # monotonic time of the last successful acquire or renew
        self._observed: Record | None = None
        self._observed_at = 0.0
        self._labelled = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one Lease write at a time (the loop, and release at exit)
        self.transitions = 0  # times this replica became leader
        self._timeout = settings.renew_deadline_seconds / 2

    # -- what others ask ---------------------------------------------------------------------
    def leading(self) -> bool:
        """Leading, and renewed within the renew deadline (a stalled loop stops leading too)."""
        return self._leading and self.clock() - self._renewed_at < self.settings.renew_deadline_seconds

    def known(self) -> bool:
        """Whether this replica has read the Lease once (it knows whether it leads): /readyz waits
        for it, so that a replica taking reviews answers bindings as leader or as follower knowingly."""
        return self._observed is not None

    def holder(self) -> str:
        """Who leads as this replica last saw the Lease ("" when nobody)."""
        observed = self._observed
        return observed.holder if observed is not None else ""

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop campaigning; a leader releases the Lease and its label (client-go ReleaseOnCancel)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._timeout * 2)
        if self._leading:
            self._release()
            self._set_leading(False)

    def _run(self) -> None:
        while not self._unlabel_self_at_start():  # before campaigning: the label must not outlive a leader
            self._stop.wait(self.settings.retry_period_seconds)
            if self._stop.is_set():
                return
        while not self._stop.is_set():
            if self._leading:
                self._renew_once()
                wait = self.settings.retry_period_seconds
            elif not self.ready():
                wait = 0.05  # a local check: campaign as soon as the state has synced
            else:
                if self._try_acquire_or_renew():
                    self._set_leading(True)
                wait = self.settings.retry_period_seconds * (1 + random.random() * JITTER)
            if self._leading and not self._labelled:
                self._claim_route()
            self._stop.wait(wait)

    def _renew_once(self) -> None:
        """client-go ``renew``: retry until the renew deadline passes since the last success."""
        deadline = self._renewed_at + self.settings.renew_deadline_seconds
        while not self._stop.is_set():
            if self._try_acquire_or_renew():
                return
            if self.clock() >= deadline:
                break
            self._stop.wait(self.settings.retry_period_seconds)
        if not self._stop.is_set():
            log.warning("leader: lost the lease %s/%s (no renewal for %.1fs); bindings go to the next leader",
                        self.namespace, self.settings.lease_name, self.settings.renew_deadline_seconds)
            self._set_leading(False)

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        if leading:
            self.transitions += 1
            log.warning("leader: %s leads (lease %s/%s); this replica judges bindings", self.identity,
                        self.namespace, self.settings.lease_name)
        else:
            self._unlabel(self.settings.pod_name)

    # -- the Lease ---------------------------------------------------------------------------
    def _try_acquire_or_renew(self) -> bool:
        from kubernetes.client import V1Lease, V1LeaseSpec, V1ObjectMeta
        from kubernetes.client.exceptions import ApiException

        name, namespace = self.settings.lease_name, self.namespace
        now_wall = datetime.now(UTC)
        mine = V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=self.settings.lease_duration_seconds,
                           acquire_time=now_wall, renew_time=now_wall, lease_transitions=0)
        with self._lock:
            try:
                lease = self.coordination.read_namespaced_lease(name, namespace, _request_timeout=self._timeout)
            except ApiException as exc:
                if exc.status != 404:
                    log.info("leader: cannot read lease %s/%s: %s %s", namespace, name, exc.status, exc.reason)
                    return False
                try:
                    created = self.coordination.create_namespaced_lease(
                        namespace, V1Lease(api_version="coordination.k8s.io/v1", kind="Lease",
                                        metadata=V1ObjectMeta(name=name, namespace=namespace), spec=mine),
                        _request_timeout=self._timeout)
                except ApiException as exc:  # 409: another replica created it first
                    log.info("leader: cannot create lease %s/%s: %s %s", namespace, name, exc.status, exc.reason)
                    return False
                except Exception as exc:
                    log.info("leader: cannot create lease %s/%s: %s", namespace, name, exc)
                    return False
                return self._won(_record(created))
            except Exception as exc:  # connection refused, timeouts (urllib3 errors are not OSError)
                log.info("leader: cannot read lease %s/%s: %s", namespace, name, exc)
                return False
            old = _record(lease)
            now = self.clock()
            if old != self._observed:
                self._observed, self._observed_at = old, now
            if old.holder and old.holder != self.identity and now < self._observed_at + old.duration:
                return False  # held, and renewed within its duration as this replica counts
            if old.holder == self.identity:
                mine.acquire_time, mine.lease_transitions = old.acquired, old.transitions
            else:
                mine.lease_transitions = old.transitions + 1
            lease.spec = mine  # metadata keeps the resourceVersion read: a concurrent writer makes this 409
            try:
                replaced = self.coordination.replace_namespaced_lease(name, namespace, lease,
                                                                      _request_timeout=self._timeout)
            except ApiException as exc:
                log.info("leader: cannot update lease %s/%s: %s %s", namespace, name, exc.status, exc.reason)
                return False
            except Exception as exc:
                log.info("leader: cannot update lease %s/%s: %s", namespace, name, exc)
                return False
            return self._won(_record(replaced))

    def _won(self, record: Record) -> bool:
        now = self.clock()
        self._observed, self._observed_at, self._renewed_at = record, now, now
        return True

    def _release(self) -> None:
        """client-go ``release``: empty holder, duration 1 s, transitions kept."""
        from kubernetes.client import V1LeaseSpec

        name, namespace = self.settings.lease_name, self.namespace
        with self._lock:
            try:
                lease = self.coordination.read_namespaced_lease(name, namespace, _request_timeout=self._timeout)
                if (lease.spec.holder_identity or "") != self.identity:
                    return
                now_wall = datetime.now(UTC)
                lease.spec = V1LeaseSpec(holder_identity="", lease_duration_seconds=1, acquire_time=now_wall,
                                         renew_time=now_wall, lease_transitions=_record(lease).transitions)
                self.coordination.replace_namespaced_lease(name, namespace, lease, _request_timeout=self._timeout)
                log.warning("leader: released lease %s/%s", namespace, name)
            except Exception as exc:
                log.info("leader: cannot release lease %s/%s: %s", namespace, name, exc)

    # -- the routing label -------------------------------------------------------------------
    def _claim_route(self) -> None:
        """Label this pod, then unlabel every other (a crashed former leader cannot do it itself)."""
        pod = self.settings.pod_name
        if not pod:
            self._labelled = True  # nothing to route (outside a cluster): the Lease alone decides
            return
        label = self.settings.routing_label
        try:
            self.core.patch_namespaced_pod(pod, self.namespace, {"metadata": {"labels": {label: "true"}}},
                                           _request_timeout=self._timeout)
            others = self.core.list_namespaced_pod(self.namespace, label_selector=f"{label}=true",
                                                   _request_timeout=self._timeout)
        except Exception as exc:
            log.warning("leader: cannot label pod %s/%s for the bindings Service: %s", self.namespace, pod, exc)
            return
        for other in others.items:
            if other.metadata.name != pod:
                self._unlabel(other.metadata.name)
        self._labelled = True
        log.warning("leader: pod %s/%s labelled %s=true: the bindings Service routes to it", self.namespace,
                    pod, label)

    def _unlabel(self, pod: str) -> bool:
        self._labelled = False if pod == self.settings.pod_name else self._labelled
        if not pod:
            return True
        try:
            # A JSON merge patch's null removes the key.
            self.core.patch_namespaced_pod(pod, self.namespace,
                                           {"metadata": {"labels": {self.settings.routing_label: None}}},
                                           _request_timeout=self._timeout)
        except Exception as exc:
            log.info("leader: cannot remove %s from pod %s/%s: %s", self.settings.routing_label, self.namespace,
                     pod, exc)
            return False
        return True

    def _unlabel_self_at_start(self) -> bool:
        """Whether this pod is known not to carry the label (retried until the API server answers)."""
        pod = self.settings.pod_name
        if not pod:
            return True
        try:
            found = self.core.read_namespaced_pod(pod, self.namespace, _request_timeout=self._timeout)
        except Exception as exc:
            log.info("leader: cannot read own pod %s/%s: %s", self.namespace, pod, exc)
            return False
        if (found.metadata.labels or {}).get(self.settings.routing_label) is None:
            return True
        log.warning("leader: pod %s/%s still carries %s from a former leader container; removing it",
                    self.namespace, pod, self.settings.routing_label)
        return self._unlabel(pod)


def elector(api_client: Any, settings: LeaderSettings, namespace: str, ready: Callable[[], bool]) -> LeaderElector:
    """A LeaderElector over one configured API client."""
    from kubernetes import client as k8s

    return LeaderElector(k8s.CoreV1Api(api_client), k8s.CoordinationV1Api(api_client), settings, namespace,
                         new_identity(settings.pod_name), ready)
