"""The one configuration object: every name, limit and switch the project uses.

Sources, strongest first: environment (``GPUSHARE_`` prefix, ``__`` between nested keys),
then a YAML config file, then the defaults below. The same file configures the webhook
server and ``gpushare check`` so that CI and admission judge alike.

pydantic-settings reads the environment, and is imported only when a ``GPUSHARE_``
variable is set: it costs a third of ``gpushare check``'s start-up otherwise.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from datetime import date
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Severity = Literal["deny", "warn"]
# names.scheduler_name value that turns GM001 off (ACK Pro clusters).
NO_SCHEDULER = "none"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResourceNames(_Section):
    gpu_mem: str = "aliyun.com/gpu-mem"
    gpu_core: str = "aliyun.com/gpu-core.percentage"
    gpu_count: str = "aliyun.com/gpu-count"
    gpu_topology: str = "aliyun.com/gpu"
    gpu_exclusive: str = "nvidia.com/gpu"


class LabelNames(_Section):
    schedule: str = "ack.node.gpu.schedule"
    placement: str = "ack.node.gpu.placement"
    card_name: str = "aliyun.accelerator/nvidia_name"
    card_mem: str = "aliyun.accelerator/nvidia_mem"
    card_count: str = "aliyun.accelerator/nvidia_count"
    region: str = "topology.kubernetes.io/region"
    # Where the kubelet's CPU manager policy is published (label or annotation; it wins over the
    # opt-in state.kubelet_configz source); see docs/state.md, "CPU manager policy".
    cpu_manager_policy: str = "gpushare.io/cpu-manager-policy"


class CardAnnotationNames(_Section):
    """Annotations that say which cards a pod holds or how a node's cards are linked (read, never written)."""

    # ACK GPU sharing v2: {"<container index>": {"<card index>": <core percent>}}.
    core_allocation: str = "gpushare.alibabacloud.com/core-percentage"
    # ACK topology-aware scheduling: the whole GPUs a topology pod was given, "0,1".
    topology_visible: str = "topology.kubernetes.io/gpu-visible"
    # This project's node annotation: the interconnect bandwidth matrix (docs/scoring.md).
    node_topology: str = "gpushare.io/gpu-topology"


class AssignmentAnnotationNames(_Section):
    """Pod annotations the GPU-sharing scheduler and device plugin use to say whether a bound pod
    got its card yet (read, never written). The scheduler writes assigned="false" and the assume
    time (Unix nanoseconds) at binding; the device plugin flips assigned to "true" when the
    container starts. Sources: the open-source gpushare-scheduler-extender (pkg/utils/const.go,
    pkg/utils/pod.go: EnvAssignedFlag, EnvResourceAssumeTime) and gpushare-device-plugin
    (pkg/gpu/nvidia/podutils.go); ACK's v2 names as Koordinator's ACK compatibility constants
    spell them (AnnotationACKGPUShareAssigned, AnnotationACKGPUShareAssumeTime)."""

    # (assigned flag, assume time) pairs, tried in order; the first pair present on a pod wins.
    pairs: tuple[tuple[str, str], ...] = (
        ("scheduler.framework.gpushare.assigned", "scheduler.framework.gpushare.assume-time"),
        ("ALIYUN_COM_GPU_MEM_ASSIGNED", "ALIYUN_COM_GPU_MEM_ASSUME_TIME"),
    )


class Names(_Section):
    resources: ResourceNames = ResourceNames()
    labels: LabelNames = LabelNames()
    card_annotations: CardAnnotationNames = CardAnnotationNames()
    # GM001: the scheduler set on shared-GPU pods, or "none" to set none. Registered clusters run
    # ack-co-scheduler (Shared GPU scheduling in registered clusters); ACK Pro clusters schedule
    # shared GPUs with their own kube-scheduler, where "none" is right. The deploy manifests make
    # the installer choose; outside a deployment (serve on a snapshot, check, /dry-run) this
    # default applies.
    scheduler_name: str = Field("ack-co-scheduler", min_length=1)
    default_scheduler: str = "default-scheduler"
    priority_class: str = "system-node-critical"
    gpushare_daemonsets: tuple[str, ...] = ("gpushare-device-plugin-ds",)
    env_mem_container: str = "ALIYUN_COM_GPU_MEM_CONTAINER"
    # ECS nodes' spec.providerID: REGION.INSTANCEID, bare or behind alicloud:// (policies/ecs.py
    # cites the cloud provider). Named groups "region" and "instance" are required.
    ecs_provider_id_pattern: str = r"(?:alicloud://)?(?P<region>[a-z]+(?:-[a-z0-9]+)+)\.(?P<instance>i-[a-z0-9]+)"
    # Where the GPU-sharing scheduler records the card it chose for a pod (read, never written).
    allocation_annotation: str = "scheduler.framework.gpushare.allocation"
    card_index_annotation: str = "ALIYUN_COM_GPU_MEM_IDX"
    exempt_annotation: str = "gpushare.io/exempt"
    exempt_reason_annotation: str = "gpushare.io/exempt-reason"
    assignment: AssignmentAnnotationNames = AssignmentAnnotationNames()

    @property
    def injected_scheduler(self) -> str | None:
        """The scheduler GM001 sets, or None when configured as "none"."""
        return None if self.scheduler_name.strip().lower() == NO_SCHEDULER else self.scheduler_name

    @field_validator("ecs_provider_id_pattern")
    @classmethod
    def _pattern_with_groups(cls, value: str) -> str:
        try:
            groups = re.compile(value).groupindex
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        if not {"region", "instance"} <= set(groups):
            raise ValueError("needs the named groups (?P<region>...) and (?P<instance>...)")
        return value


class NearMissSettings(_Section):
    """GS007: resource names that look like the shared-GPU names but are not them."""

    # Domains a near miss may be written under: the real one, Alibaba's other names, and
    # (always) typos within two edits of the real domain or no domain at all.
    # alibabacloud.com is not here: Alibaba's open-gpu-share and unified device scheduling use
    # alibabacloud.com/gpu-mem, gpu-core, ... as real, different resources.
    lookalike_domains: tuple[str, ...] = ("aliyun.com", "alibaba.com", "alicloud.com", "aliyun.cn", "aliyuncs.com")
    # Real resources that are never near misses, whatever they look like (aliyun.com/gpu is
    # topology-aware whole GPUs, gpu-count the node's card count; fpga, npu and rdma are
    # resources Alibaba Cloud's device plugins publish).
    allowed: tuple[str, ...] = ("aliyun.com/gpu", "aliyun.com/gpu-count", "aliyun.com/fpga", "aliyun.com/npu",
                                "aliyun.com/rdma")


class RuleOverride(_Section):
    enabled: bool = True
    severity: Severity | None = None


class ServerSettings(_Section):
    host: str = "0.0.0.0"
    port: int = Field(8443, ge=0, le=65535)
    cert_dir: Path = Path("certs-dev")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # One process keeps the binding assume-cache exact (GB001); threads serve keep-alive.
    workers: int = Field(1, ge=1)
    threads: int = Field(16, ge=1)
    keepalive_seconds: int = Field(75, ge=1)
    request_timeout_seconds: int = Field(30, ge=1)
    graceful_timeout_seconds: int = Field(25, ge=1)


class CertSettings(_Section):
    service_name: str = "gpushare-webhook"
    namespace: str = "gpushare-system"
    extra_sans: tuple[str, ...] = ()
    key_type: Literal["ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-4096"] = "ecdsa-p256"
    ca_days: int = Field(3650, ge=1)
    cert_days: int = Field(365, ge=1)

    # Services that reach the same pods under other names: the bindings Service selects the
    # leader alone (docs/operations.md, "Replicas and the leader"); the certificate names it too.
    other_services: tuple[str, ...] = ("gpushare-webhook-bindings",)

    def service_dns_names(self) -> list[str]:
        ns = self.namespace
        return [name for svc in (self.service_name, *self.other_services)
                for name in (svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local")]


class CertRotationSettings(_Section):
    """When ``gpushare certs rotate`` reissues, and where the CA bundle and key material live."""

    # Reissue a certificate once this fraction of its lifetime has passed (CA and serving alike).
    renew_after_fraction: float = Field(2 / 3, gt=0, lt=1)
    # After a CA change the old CA stays in the injected bundle this long, so servers whose
    # Secret volume has not caught up yet are still trusted.
    ca_overlap_hours: float = Field(24.0, ge=0)
    # The webhook configurations ``certs inject`` patches (cluster-scoped objects).
    mutating_webhook: str = "gpushare-webhook"
    validating_webhook: str = "gpushare-webhook"
    # Secrets in ``certs.namespace``: the serving pair the Deployment mounts, and the CA
    # (with its key) that only the certificate job reads.
    tls_secret: str = "gpushare-webhook-tls"
    ca_secret: str = "gpushare-webhook-ca"


FailMode = Literal["open", "closed"]


class WhenStateUnavailable(_Section):
    """What stateful rules do when the cluster state is not there (not synced, unreachable, stale).

    fail-open admits with an admission warning; fail-closed denies and says why.
    """

    # A pod (binding) that cannot be checked is admitted: the scheduler and kubelet still
    # guard capacity, and blocking every binding while the API is flaky stops the cluster.
    placement: FailMode = "open"
    # A node mode change that cannot be checked is refused: it is rare, done by a person
    # who can retry, and getting it wrong breaks running GPU pods (ACK "Manage the shared GPU scheduling component").
    node_mode_change: FailMode = "closed"
    # GC001 (can any node hold this pod?) only advises: never block a pod because it could not be judged.
    capacity: FailMode = "open"


class KubeletConfigzSettings(_Section):
    """Opt-in second source of a node's CPU manager policy (GN002, GB005): its kubelet's /configz,
    read through the API server's node proxy. Off by default: it needs RBAC ``get`` on
    ``nodes/proxy``, which reaches the whole kubelet API (docs/state.md, "CPU manager policy")."""

    enabled: bool = False
    # Every GPU node is read again this often (0: only when it appears or its kubelet restarts).
    refresh_seconds: float = Field(600.0, ge=0)
    # One read's connect and read timeout, through the API server to the kubelet.
    timeout_seconds: float = Field(5.0, gt=0, le=60)
    # Reads in flight at once (a cluster coming up lists every GPU node at the same moment).
    concurrency: int = Field(4, ge=1, le=32)


class StateSettings(_Section):
    """The cluster state the stateful rules read, and the record of admitted placements."""

    when_unavailable: WhenStateUnavailable = WhenStateUnavailable()
    # A watch that has been disconnected longer than this makes the state stale.
    stale_after_seconds: float = Field(30.0, gt=0)
    # Bindings this process admitted that the watch has not shown yet (GB001 under concurrency).
    assume_ttl_seconds: float = Field(60.0, gt=0)
    assume_max_entries: int = Field(20000, ge=1)
    # Pods this process admitted at CREATE, so a binding that follows before the watch finds them.
    recent_pods_ttl_seconds: float = Field(60.0, gt=0)
    recent_pods_max_entries: int = Field(20000, ge=1)
    # The live source (list + watch of Nodes and Pods).
    list_page_size: int = Field(500, ge=1)
    watch_timeout_seconds: int = Field(300, ge=1)
    connect_timeout_seconds: float = Field(10.0, gt=0)
    backoff_initial_seconds: float = Field(0.5, gt=0)
    backoff_max_seconds: float = Field(30.0, gt=0)
    kubelet_configz: KubeletConfigzSettings = KubeletConfigzSettings()


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
    def _client_go_order(self) -> LeaderSettings:
        # client-go's NewLeaderElector refuses the same (leaderelection.go, JitterFactor 1.2).
        if self.lease_duration_seconds <= self.renew_deadline_seconds:
            raise ValueError("leader.lease_duration_seconds must be greater than leader.renew_deadline_seconds")
        if self.renew_deadline_seconds <= 1.2 * self.retry_period_seconds:
            raise ValueError("leader.renew_deadline_seconds must be greater than 1.2 x leader.retry_period_seconds")
        return self


class NodePolicySettings(_Section):
    """Node rules GN001-GN008: who may switch modes, where nodes show what the rules read."""

    # GN005: identities allowed to switch an existing node to core_mem (the node-pool machinery).
    node_pool_users: tuple[str, ...] = ()
    node_pool_groups: tuple[str, ...] = ()
    # GN007: node labels (first present wins) that carry the NVIDIA driver version.
    driver_version_labels: tuple[str, ...] = ("ack.aliyun.com/nvidia-driver-version",
                                              "aliyun.accelerator/nvidia_driver_version")
    # GN008: a label or annotation with one of these keys (value not "false") shows the MPS control daemon.
    mps_daemon_keys: tuple[str, ...] = ("gpushare.io/mps-control-daemon",)
    # GN004: a node with this taint has not been initialised by its cloud provider yet.
    uninitialized_taint: str = "node.cloudprovider.kubernetes.io/uninitialized"


class CatalogSettings(_Section):
    """Facts from the ACK documentation pages (policies/data/*.yaml), overridable by operators.

    ``file`` is a YAML file with the same keys as the shipped data; ``regions`` and
    ``versions`` override single entries inline. Later sources win per key.
    """

    file: Path | None = None
    regions: dict[str, tuple[str, ...] | None] = Field(default_factory=dict)
    versions: dict[str, Any] = Field(default_factory=dict)


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
    # Requests evaluated at once per process. Threads past this wait on a semaphore, not the
    # GIL: with the GIL more would only contend with each other and with the poller that reads,
    # refuses and dispatches requests (at 16, overload starved the poller and answers took 10 s).
    app_concurrency: int = Field(2, ge=1, le=64)
    # /dry-run and the scheduler extender evaluate at most this many at once, in slots apart from
    # the admission reviews', so an expensive body there never holds the API server's reviews.
    auxiliary_concurrency: int = Field(1, ge=1, le=64)
    # Bodies up to this many bytes are read in full before a request takes an evaluation slot,
    # so a slow sender holds a thread but never a slot; the poller refuses requests this size
    # at the door when the queue is over budget (docs/operations.md).
    buffer_body_bytes: int = Field(1024 * 1024, ge=0)
    # On a kept-alive connection, a request's headers and body must arrive within this many seconds
    # of its first byte (slowloris); the first request of a new connection: new_connection_seconds.
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
    # Bodies larger than this are JSON-decoded at most ``large_body_concurrency`` at a time, so a
    # burst of huge reviews cannot multiply the decoded size by the thread count.
    large_body_bytes: int = Field(256 * 1024, ge=1024)
    large_body_concurrency: int = Field(2, ge=1)


class InputSettings(_Section):
    """Bounds on manifests read from text: the ``/dry-run`` body, ``gpushare check`` files and
    snapshots (docs/operations.md, "Hostile input", says why these values)."""

    # Collections nested deeper than this (counted through aliases) are refused before the YAML
    # composer, which recurses in C once per level, ever runs. Kubernetes objects nest < 20 deep.
    max_depth: int = Field(100, ge=8, le=1000)
    # Bytes that YAML aliases may add to what is written, over one input: a billion-laughs
    # body is refused before it is expanded in memory or in an answer.
    max_alias_bytes: int = Field(1024 * 1024, ge=0)


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


ReportKind = Literal["none", "auto", "openreports", "policyreport"]


class AuditSettings(_Section):
    """``gpushare audit`` and the server's periodic audit of the live state (docs/audit.md)."""

    # Seconds between audits in the server on a live state; 0 turns it off. Never on snapshots
    # (a snapshot does not change, `gpushare audit --snapshot` judges it once).
    interval_seconds: float = Field(300.0, ge=0)
    # A bound pod still marked not assigned (see names.assignment) this long after its assume
    # time is reported (GA006): the device plugin never picked it up.
    unassigned_after_seconds: float = Field(600.0, gt=0)
    # GA007: GPU pods must be scheduled by this scheduler; empty turns the check off (a cluster
    # running the open-source extender schedules with default-scheduler).
    expected_scheduler: str = ""
    # Report objects for report UIs: none, auto (whichever CRD the cluster serves, OpenReports
    # first), openreports (openreports.io/v1alpha1 Report) or policyreport (wgpolicyk8s.io/v1alpha2).
    reports: ReportKind = "none"
    # One report per namespace holds at most this many results; the rest are counted in its summary.
    max_results_per_report: int = Field(200, ge=1, le=5000)
    # Report objects written at most for this many namespaces (those with the most findings).
    max_reports: int = Field(100, ge=1, le=5000)


class LabelSelectorRequirement(_Section):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()


class LabelSelector(_Section):
    """A Kubernetes label selector (matchLabels and matchExpressions, ANDed)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[LabelSelectorRequirement, ...] = Field((), alias="matchExpressions")


class ExemptionGrant(_Section):
    """An exemption an admin grants in the config: objects in ``namespace`` whose name matches
    ``names`` (a glob: ``*`` and ``?``) and whose pod labels match ``selector`` skip ``rules``
    until the end of ``expires`` (UTC). A grant needs ``names`` or ``selector``."""

    name: str = Field(min_length=1)
    namespace: str = Field(min_length=1)
    names: str | None = None
    selector: LabelSelector | None = None
    rules: tuple[str, ...] = Field(min_length=1)
    reason: str = Field(min_length=1)
    expires: date

    @model_validator(mode="after")
    def _targets_something(self) -> ExemptionGrant:
        if self.names is None and self.selector is None:
            raise ValueError(f"exemption grant {self.name!r} needs names (a glob) or selector")
        if not self.reason.strip():
            raise ValueError(f"exemption grant {self.name!r} needs a non-empty reason")
        return self


class ExemptionSettings(_Section):
    """Who may exempt what (docs/operations.md, "Exemptions"). Secure by default: the
    ``gpushare.io/exempt`` annotation is honoured nowhere until an admin allows a namespace."""

    # A Namespace carrying this label with this value lets its objects exempt themselves.
    namespace_label: str = "gpushare.io/exemptions"
    namespace_label_value: str = "allowed"
    # Namespaces whose objects may exempt themselves, whatever their labels.
    annotation_namespaces: tuple[str, ...] = ()
    # Nodes are cluster-scoped (no namespace to allow): their annotation exemptions need this.
    allow_on_nodes: bool = False
    grants: tuple[ExemptionGrant, ...] = ()

    @model_validator(mode="after")
    def _unique_grant_names(self) -> ExemptionSettings:
        seen = [g.name for g in self.grants]
        twice = sorted({n for n in seen if seen.count(n) > 1})
        if twice:
            raise ValueError(f"exemption grant names must be unique: {', '.join(twice)}")
        return self


class BackstopSettings(_Section):
    """The ValidatingAdmissionPolicy ``gpushare policy export`` prints (policies/backstop.py)."""

    policy_name: str = "gpushare-backstop"
    # Off by default: a GPU pod must name names.scheduler_name. It keeps GPU pods off the default
    # scheduler while the mutating webhook is down, at the price of blocking those that do not
    # name it during the outage (docs/operations.md, "When the webhook is down").
    scheduler_rule: bool = False
    # Left out like the webhooks leave them out (deploy/kustomize/webhooks.yaml).
    excluded_namespaces: tuple[str, ...] = ("kube-system", "gpushare-system")


class ScoringSettings(_Section):
    """Node ranking for ``/dry-run``, ``gpushare score`` and the scheduler extender."""

    # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority: the scheduler multiplies by 10.
    extender_max_priority: int = Field(10, ge=1, le=100)


ENV_PREFIX = "GPUSHARE_"
ENV_NESTED_DELIMITER = "__"


class Settings(_Section):
    """Everything configurable. ``load_settings`` overlays a file and the environment on the defaults."""

    names: Names = Names()
    rules: dict[str, RuleOverride] = Field(default_factory=dict)
    server: ServerSettings = ServerSettings()
    certs: CertSettings = CertSettings()
    cert_rotation: CertRotationSettings = CertRotationSettings()
    check: CheckSettings = CheckSettings()
    overload: OverloadSettings = OverloadSettings()
    logging: LogSettings = LogSettings()
    metrics: MetricsSettings = MetricsSettings()
    auth: AuthSettings = AuthSettings()
    scoring: ScoringSettings = ScoringSettings()
    input: InputSettings = InputSettings()
    state: StateSettings = StateSettings()
    leader: LeaderSettings = LeaderSettings()
    nodes: NodePolicySettings = NodePolicySettings()
    catalog: CatalogSettings = CatalogSettings()
    near_miss: NearMissSettings = NearMissSettings()
    audit: AuditSettings = AuditSettings()
    exemptions: ExemptionSettings = ExemptionSettings()
    backstop: BackstopSettings = BackstopSettings()


class ConfigFileError(ValueError):
    """The config file cannot be read or does not fit the settings schema."""


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_settings(path: str | Path | None = None, known_rules: Collection[str] | None = None) -> Settings:
    """Defaults, overlaid by the YAML file at ``path`` (if any), overlaid by the environment.

    Errors are one ``ConfigFileError`` in plain words that names its source: the file, or the
    environment variable that set the value. With ``known_rules``, rule ids outside it are one too
    (the rules import this module, so the caller, not this module, knows them).
    """
    from pydantic import ValidationError

    from_file: dict[str, Any] = {}
    if path is not None:
        import yaml

        try:
            text = Path(path).read_text(encoding="utf-8")
            loaded = yaml.safe_load(text) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ConfigFileError(f"{path}: cannot read config: {_one_line(str(exc))}") from None
        if not isinstance(loaded, dict):
            raise ConfigFileError(f"{path}: config must be a mapping of sections (names, rules, server, ...), "
                                  f"not {_kind(loaded)}")
        from_file = _rule_ids_upper(loaded)
    from_environment = _from_environment()
    try:
        settings = Settings(**_deep_merge(from_file, from_environment))
    except ValidationError as exc:
        raise ConfigFileError(plain_errors(exc, lambda loc: _source_of(loc, path, from_environment))) from None
    if known_rules is not None:
        _check_rule_ids(settings, set(known_rules), path, from_environment)
    return settings


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _kind(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "true/false", int: "a number",
            float: "a number", type(None): "empty"}.get(type(value), type(value).__name__)


def _rule_ids_upper(data: dict[str, Any]) -> dict[str, Any]:
    """Rule ids are upper case (GS003); the environment hands them over lower case."""
    rules = data.get("rules")
    if isinstance(rules, dict):
        return {**data, "rules": {str(key).upper(): value for key, value in rules.items()}}
    return data


def _env_name(loc: tuple[Any, ...]) -> str:
    return ENV_PREFIX + ENV_NESTED_DELIMITER.join(str(part).upper() for part in loc)


def _env_sets(loc: tuple[Any, ...], environment: dict[str, Any]) -> bool:
    node: Any = environment
    for part in loc:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _source_of(loc: tuple[Any, ...], path: str | Path | None, environment: dict[str, Any]) -> str:
    for end in range(len(loc), 0, -1):  # the variable may set a whole section as JSON
        if _env_sets(loc[:end], environment):
            return f"environment variable {_env_name(loc[:end])}"
    return str(path) if path is not None else "settings"


def _check_rule_ids(settings: Settings, known: set[str], path: str | Path | None,
                    environment: dict[str, Any]) -> None:
    unknown = sorted(set(settings.rules) - known)
    if unknown:
        source = _source_of(("rules", unknown[0]), path, environment)
        raise ConfigFileError(f"{source}: names unknown rules: {', '.join(unknown)} "
                              "(`gpushare rules` lists every rule id)")


_PLAIN = {
    "int_parsing": "is not a whole number", "int_type": "is not a whole number",
    "int_from_float": "is not a whole number", "float_parsing": "is not a number", "float_type": "is not a number",
    "bool_parsing": "is not true or false", "bool_type": "is not true or false",
    "string_type": "is not text", "dict_type": "is not a mapping", "model_type": "is not a mapping",
    "list_type": "is not a list", "tuple_type": "is not a list", "missing": "is missing",
    "extra_forbidden": "is not a setting", "path_type": "is not a file path",
}


def plain_errors(exc: Any, source: Any) -> str:
    """pydantic's validation errors as one line of plain words, each with where it came from."""
    parts = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        where = ".".join(str(p) for p in loc) or "config"
        value = error.get("input")
        kind, ctx = error["type"], error.get("ctx") or {}
        shown = _show(value)
        if kind == "extra_forbidden":
            text = f"{where}: unknown setting"
        elif kind == "literal_error":
            text = f"{where}: {shown} is not one of {ctx.get('expected', '')}"
        elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            bound = {"greater_than_equal": ("at least", "ge"), "greater_than": ("more than", "gt"),
                     "less_than_equal": ("at most", "le"), "less_than": ("less than", "lt")}[kind]
            text = f"{where}: {shown} must be {bound[0]} {ctx.get(bound[1])}"
        elif kind == "missing":
            text = f"{where}: is missing"
        elif kind in _PLAIN:
            text = f"{where}: {shown} {_PLAIN[kind]}"
        else:
            text = f"{where}: {shown}: {error['msg'][:1].lower()}{error['msg'][1:]}"
        parts.append(f"{source(loc)}: {text}")
    return "; ".join(parts)


def _show(value: object) -> str:
    import json

    try:
        return json.dumps(value, default=str)[:80]
    except (TypeError, ValueError):
        return repr(value)[:80]


def _from_environment() -> dict[str, Any]:
    """The settings given as GPUSHARE_* variables (``__`` between nested keys), as a nested dict."""
    if not any(name.upper().startswith(ENV_PREFIX) for name in os.environ):
        return {}
    from pydantic import ValidationError, create_model
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class FromEnvironment(BaseSettings):
        model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTED_DELIMITER,
                                          extra="forbid")

    fields: dict[str, Any] = {name: (info.annotation, info) for name, info in Settings.model_fields.items()}
    reader = create_model("SettingsFromEnvironment", __base__=FromEnvironment, **fields)
    try:
        values = reader().model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise ConfigFileError(plain_errors(exc, lambda loc: f"environment variable {_env_name(loc)}")) from None
    return _rule_ids_upper(values)
