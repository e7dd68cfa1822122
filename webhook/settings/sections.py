"""The sections of the one configuration object that belong to the edge (the server, overload
limits, input bounds, logging, metrics, authentication, ``gpushare check``, scoring, leader
election), and ``Settings``, which composes them with the domain's and the certificates'."""

# Annotations stay objects (no ``from __future__ import annotations``): pydantic reads each field's
# type as it is instead of evaluating its text when the class is made, which `gpushare check` pays at
# every start.
from pathlib import Path
from typing import Literal, Self

from pydantic import Field, model_validator

from certs.settings import CertRotationSettings, CertSettings
from policies.model.settings import PolicySettings, Severity, _Section


class ServerSettings(_Section):
    host: str = "0.0.0.0"
    port: int = Field(8443, ge=0, le=65535)
    cert_dir: Path = Path("certs-dev")
    # Never below what the API server sends: it reads bodies of up to 3 MiB (MaxRequestBodyBytes,
    # k8s.io/apiserver pkg/server/config.go) and etcd stores objects of up to 1.5 MiB
    # (DefaultMaxRequestBytes, etcd server/embed/config.go); an UPDATE's review carries the object
    # and the old object, each up to that as JSON, plus the envelope (docs/operations.md, "Hostile input").
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # Which gunicorn worker runs the app: ``webhook``, the project's own (a poller reads and
    # writes every connection without blocking; docs/operations.md, "Overload and slow
    # clients"), or ``gthread``, stock gunicorn's threaded worker with the same admission
    # scheduling as WSGI middleware: the supported way out of a transport bug, at the cost of
    # the hostile-client targets it does not meet (docs/operations.md, "The stock worker").
    worker: Literal["webhook", "gthread"] = "webhook"
    # One process keeps the binding assume-cache exact (GB001); threads serve keep-alive.
    workers: int = Field(1, ge=1)
    threads: int = Field(16, ge=1)
    keepalive_seconds: int = Field(75, ge=1)
    request_timeout_seconds: int = Field(30, ge=1)
    graceful_timeout_seconds: int = Field(25, ge=1)
    # A second listener (same TLS) for people and tools: with it set, ``ops_paths`` are served
    # only there and everything else only on ``port``, so the port the API server and the
    # scheduler call carries nothing else, and a NetworkPolicy, which sees ports but not paths,
    # can open the two to different clients (docs/deploy.md, "Who can reach what").
    ops_port: int | None = Field(None, ge=1, le=65535)
    ops_paths: tuple[str, ...] = ("/metrics", "/dry-run", "/explain")
    # Served on both listeners: kubelet probes may use either.
    probe_paths: tuple[str, ...] = ("/healthz", "/readyz")
    # A port of its own for the kubelet's probes, plain HTTP, answered by a small process apart
    # from the workers from what they last said (webhook.probes.responder): a probe never
    # waits behind a review there, however costly the reviews. The deploy manifests use it;
    # unset, probes are answered on the admission port (docs/operations.md, "Health probes").
    probe_port: int | None = Field(None, ge=1, le=65535)
    # /healthz on the probe port fails once a worker has not turned its loop for this long (it
    # turns at least once a second): the worker is stuck, and the kubelet should restart it.
    probe_stall_seconds: float = Field(10.0, gt=0, le=300)


class CheckSettings(_Section):
    """Defaults of ``gpushare check`` (its command-line options win)."""

    # Glob patterns of paths that directory walks and named files skip, e.g. "charts/*".
    exclude: tuple[str, ...] = ()
    # "warn" makes warnings fail the run too.
    fail_on: Severity = "deny"


class OverloadSettings(_Section):
    """Limits that keep the webhook answering when clients are too many, slow or hostile."""

    # Reviews are refused (a fast 503; the API server applies the webhook's failurePolicy) only
    # when they could not be answered before the API server's deadline for the call, its
    # ``?timeout=`` (webhook.deadline). Without it: this, the deployed webhooks' timeoutSeconds.
    default_timeout_seconds: float = Field(5.0, gt=0, le=30)
    # Kept free before that deadline for the network and writing the answer.
    answer_margin_seconds: float = Field(0.25, ge=0, le=5)
    # Reviews held waiting for evaluation at most. Each holds a connection: past
    # max_connections callers wait in the kernel's listen backlog, unseen by the deadline check,
    # so sustained overload is refused here, long before the deadline (docs/operations.md).
    max_waiting_requests: int = Field(500, ge=1)
    # Reviews evaluated at once in threads (each holds an evaluation slot, on a thread of its
    # own; the others wait in the poller, not in a thread). With the GIL more would only contend
    # with each other and with the poller that reads, refuses and dispatches requests (at 16,
    # overload starved the poller and answers took 10 s).
    app_concurrency: int = Field(2, ge=1, le=64)
    # /metrics scrapes rendered at once (on helper threads, never in an evaluation slot): at 5,000
    # nodes a scrape is megabytes, and clients that pipeline scrapes must not multiply them.
    scrape_concurrency: int = Field(2, ge=1, le=64)
    # Python's thread switch interval in the worker (sys.setswitchinterval): how long an evaluating
    # thread keeps the GIL while the poller waits for it (default Python: 0.005).
    switch_interval_seconds: float = Field(0.001, gt=0, le=0.1)
    # The review-time estimate behind refusals halves every this many seconds without a new
    # evaluation to measure (webhook.server.scheduling.ReviewTime): it forgets a burst.
    estimate_half_life_seconds: float = Field(1.0, gt=0, le=60)
    # An admission review that arrived whole is evaluated by the poller thread itself while no
    # review is with a thread: no hand-off between threads (each costs futex calls, a context
    # switch and the GIL's convoy), so a review costs less CPU and a refusal under overload costs
    # little more than reading it. Off: every review goes to a thread. What a review may cost is
    # bounded by the rules' own caps (GC001's work count), which bounds the poller's stall.
    inline_admission: bool = True
    # Larger reviews go to a thread: the poller evaluates one review at a time and cannot be
    # interrupted (a 64 KiB Pod, about a hundred containers, is evaluated in a few milliseconds;
    # real Pods are a few KiB).
    inline_max_bytes: int = Field(64 * 1024, ge=0)
    # Seconds the poller evaluates queued reviews before it looks at its connections again
    # (accepts, timeouts, health probes); a review is never cut short.
    inline_slice_seconds: float = Field(0.02, gt=0, le=1)
    # /dry-run and the scheduler extender evaluate at most this many at once, in slots apart from
    # the admission reviews', so an expensive body there never holds the API server's reviews.
    auxiliary_concurrency: int = Field(1, ge=1, le=64)
    # Tool requests waiting for those slots at most; past it, a fast 503. Each holds a connection
    # and its body in memory.
    max_waiting_tools: int = Field(16, ge=1)
    # Answers written but not yet taken by their clients, in bytes, over all connections. A client
    # that does not read keeps its answer here (never a thread or a slot) until
    # client_timeout_seconds pass; past this total the connection whose answer waited longest is
    # closed first, so clients that never read cannot grow the server's memory.
    max_unsent_bytes: int = Field(64 * 1024 * 1024, ge=64 * 1024)
    # Bodies up to this many bytes are read in full before a request takes an evaluation slot,
    # so a slow sender holds a thread but never a slot; the poller refuses requests this size
    # at the door when the queue is over budget (docs/operations.md).
    buffer_body_bytes: int = Field(1024 * 1024, ge=0)
    # On a kept-alive connection, a request's headers and body must arrive within this many seconds
    # of its first byte (slowloris); the first request of a new connection: new_connection_seconds.
    # An answer must be taken by its client within as long, or the connection is closed.
    client_timeout_seconds: float = Field(5.0, gt=0, le=60)
    # Open connections per worker process. A new connection past it closes the oldest idle one
    # (one that sent nothing yet, else a kept-alive one); only when all are busy is it refused.
    max_connections: int = Field(1000, ge=1)
    # A new connection must finish its TLS handshake within this, and its first request must be
    # complete within this of its first byte. One that connected and sends nothing is idle, like
    # a kept-alive one: closed after server.keepalive_seconds, or first under pressure.
    new_connection_seconds: float = Field(3.0, gt=0, le=60)
    # Connections in the middle of their TLS handshake or of a request (slow ones): past this many,
    # the oldest of them is closed, so trickling clients cannot fill max_connections. Connections
    # that connected and sent nothing yet are bounded by max_connections and new_connection_seconds.
    max_slow_connections: int = Field(256, ge=1)
    # ... but only one that has been in its handshake or request this long is closed for room.
    # Younger ones wait on this server, not on their client: a burst of new connections (the API
    # server dials one per call past the 25 it keeps idle) makes the server stop accepting for a
    # moment instead, and the rest of the burst waits in the listen backlog.
    slow_after_seconds: float = Field(0.5, gt=0, le=60)
    # Bodies larger than this are JSON-decoded at most ``large_body_concurrency`` at a time, so a
    # burst of huge reviews cannot multiply the decoded size by the thread count.
    large_body_bytes: int = Field(256 * 1024, ge=1024)
    large_body_concurrency: int = Field(2, ge=1)
    # Reviews with bodies over ``large_body_bytes`` (or of unknown length) take a lane of their
    # own: this many evaluate at once, in slots apart from ``app_concurrency``, with their own
    # queue and estimate, so a small review never waits behind a large one (docs/operations.md,
    # "Large reviews in a lane of their own").
    large_review_concurrency: int = Field(1, ge=1, le=16)


class InputSettings(_Section):
    """Bounds on manifests read from text: the ``/dry-run`` body, ``gpushare check`` files and
    snapshots (docs/operations.md, "Hostile input", says why these values)."""

    # Collections nested deeper than this (counted through aliases) are refused before the YAML
    # composer, which recurses in C once per level, ever runs. Kubernetes objects nest < 20 deep.
    max_depth: int = Field(100, ge=8, le=1000)
    # Bytes that YAML aliases may add to what is written, over one input: a billion-laughs
    # body is refused before it is expanded in memory or in an answer.
    max_alias_bytes: int = Field(1024 * 1024, ge=0)


class DryRunSettings(_Section):
    """Bounds on what ``POST /dry-run`` answers: an answer never outgrows its question. (The local
    ``gpushare score`` and ``gpushare explain`` keep full rankings.)"""

    # Objects judged per request at most; a body with more gets a 413 (send smaller batches, or
    # judge any number offline with `gpushare check`).
    max_documents: int = Field(100, ge=1)
    # Nodes listed in each object's ranking: the best this many; ``rankingOmitted`` counts the rest.
    ranking_nodes: int = Field(10, ge=0)
    # Bytes of the whole answer at most; a larger one is a 413 instead.
    max_answer_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024)


class LogSettings(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    # json: one JSON object per line (for log collectors); text: the same fields as key=value.
    format: Literal["json", "text"] = "json"
    # One line per admission review at info level (never the object body).
    requests: bool = True


class MetricsSettings(_Section):
    """The GPU allocation series on /metrics (docs/metrics.md has the list and the series count)."""

    # Whether this replica exports the GPU allocation series. Leader election decides only who judges
    # bindings: with several replicas each exports the same numbers, and the shipped dashboard and alerts
    # fold the copies with max(); turn it off to save the series (docs/metrics.md).
    export_allocation: bool = True
    # Per-card series besides the per-node ones: none, only cards holding a pod, or every card
    # (5,000 nodes x 8 cards x 4 series = 160,000 series).
    per_card: Literal["none", "in_use", "all"] = "none"
    # GPU quota series (gpushare_namespace_gpu_quota_*): one per namespace and quota limit covering it, at
    # most this many; past it the rest are left out and gpushare_gpu_quota_series_dropped says how many.
    max_quota_series: int = Field(1000, ge=0)
    # Seconds between two refreshes of the allocation cache from the watch's change log; a
    # scrape only copies the rendered text.
    refresh_seconds: float = Field(5.0, gt=0, le=300)


class AuthSettings(_Section):
    """Optional authentication, off by default (see docs/operations.md)."""

    # PEM CA bundle: clients on ``client_cert_paths`` must present a certificate it signed.
    client_ca_file: Path | None = None
    # Accepted client certificate names (subject CN or DNS SAN); empty accepts any the CA signed.
    client_names: tuple[str, ...] = ()
    client_cert_paths: tuple[str, ...] = ("/mutate", "/validate")
    # File holding the bearer token that ``bearer_paths`` require (re-read when it changes).
    bearer_token_file: Path | None = None
    bearer_paths: tuple[str, ...] = ("/dry-run", "/explain")
    # Start even when the token file is missing or empty (an optional Secret volume the operator
    # fills later): the bearer paths then refuse every request until a token appears.
    bearer_token_optional: bool = False


class ScoringSettings(_Section):
    """Node ranking for ``/dry-run``, ``gpushare score`` and the scheduler extender."""

    # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority: the scheduler multiplies by 10.
    extender_max_priority: int = Field(10, ge=1, le=100)


class LeaderSettings(_Section):
    """Leader election among replicas: ``pods/binding`` reviews are judged by the leader alone, so
    one assume-cache sees every admitted binding (docs/operations.md, "Replicas and the leader").

    The defaults are client-go's (k8s.io/component-base config defaults: lease 15 s, renew
    deadline 10 s, retry 2 s) and its rules hold: lease > renew deadline > 1.2 x retry."""

    # Off: every replica judges bindings with its own assume-cache (one replica is then exact).
    enabled: bool = True
    lease_name: str = Field("gpushare-webhook-bindings", min_length=1)
    # The Lease's namespace, the webhook's own ("" takes certs.namespace; the Deployment sets it
    # from the downward API).
    namespace: str = ""
    # A Lease stores whole seconds (coordination.k8s.io/v1 leaseDurationSeconds).
    lease_duration_seconds: int = Field(15, ge=1)
    renew_deadline_seconds: float = Field(10.0, gt=0)
    retry_period_seconds: float = Field(2.0, gt=0)
    # This replica's pod (downward API metadata.name): the leader labels it so that the bindings
    # Service selects it. Empty: no pod to label (outside a cluster), the Lease alone decides.
    pod_name: str = ""
    routing_label: str = "gpushare.io/binding-leader"

    @model_validator(mode="after")
    def _client_go_order(self) -> Self:
        # client-go's NewLeaderElector refuses the same (leaderelection.go, JitterFactor 1.2).
        if self.lease_duration_seconds <= self.renew_deadline_seconds:
            raise ValueError("leader.lease_duration_seconds must be greater than leader.renew_deadline_seconds")
        if self.renew_deadline_seconds <= 1.2 * self.retry_period_seconds:
            raise ValueError("leader.renew_deadline_seconds must be greater than 1.2 x leader.retry_period_seconds")
        return self


class Settings(PolicySettings):
    """Everything configurable. ``load_settings`` overlays a file and the environment on the defaults."""

    server: ServerSettings = Field(default_factory=ServerSettings.model_construct)
    certs: CertSettings = Field(default_factory=CertSettings.model_construct)
    cert_rotation: CertRotationSettings = Field(default_factory=CertRotationSettings.model_construct)
    check: CheckSettings = Field(default_factory=CheckSettings.model_construct)
    overload: OverloadSettings = Field(default_factory=OverloadSettings.model_construct)
    dry_run: DryRunSettings = Field(default_factory=DryRunSettings.model_construct)
    logging: LogSettings = Field(default_factory=LogSettings.model_construct)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings.model_construct)
    auth: AuthSettings = Field(default_factory=AuthSettings.model_construct)
    scoring: ScoringSettings = Field(default_factory=ScoringSettings.model_construct)
    input: InputSettings = Field(default_factory=InputSettings.model_construct)
    leader: LeaderSettings = Field(default_factory=LeaderSettings.model_construct)


