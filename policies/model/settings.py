"""The domain's settings: every name, limit and switch the rules, placement, audit and backstop
read. The one configuration object, ``webhook.settings.Settings``, composes these with the
edge's sections (server, overload, logging, auth, ...) and the certificates' (``certs.settings``),
and loads them from a config file and the environment.

The names read in objects are in policies/model/names.py, ``workloads.kinds`` in
policies/model/workload_settings.py; both are imported from here as well."""

# Annotations stay objects (no ``from __future__ import annotations``): pydantic reads each field's
# type as it is instead of evaluating its text when the class is made, which `gpushare check` pays at
# every start.
from datetime import date
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from policies.model.names import (
    MAX_CARD_GIB,
    MIB_PER_GIB,
    NO_SCHEDULER,
    AssignmentAnnotationNames,
    CardAnnotationNames,
    EnvNames,
    LabelNames,
    MemoryUnit,
    Names,
    NearMissSettings,
    ResourceNames,
)
from policies.model.settings_section import _Section
from policies.model.workload_settings import (
    KUBERNETES_GROUPS,
    WorkloadHolds,
    WorkloadKindSettings,
    WorkloadPath,
    WorkloadSettings,
)

__all__ = [
    "KUBERNETES_GROUPS", "MAX_CARD_GIB", "MIB_PER_GIB", "NO_SCHEDULER", "AssignmentAnnotationNames", "AuditSettings",
    "BackstopSettings", "BudgetOutcome", "BudgetSettings", "CapacitySettings", "CardAnnotationNames",
    "CatalogSettings", "EnvNames", "ExemptionGrant", "ExemptionSettings", "FailMode", "IsolationSettings",
    "KubeletConfigzSettings", "LabelNames", "LabelSelector", "LabelSelectorRequirement", "MemoryUnit", "Names",
    "NearMissSettings", "NodePolicySettings", "PolicySettings", "ReportKind", "ResourceNames", "RuleOverride",
    "Severity", "StateSettings", "WhenStateUnavailable", "WorkloadHolds", "WorkloadKindSettings", "WorkloadPath",
    "WorkloadSettings", "_Section",
]

Severity = Literal["deny", "warn"]


class RuleOverride(_Section):
    enabled: bool = True
    severity: Severity | None = None


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
    # GQ005 (do the namespace's GPU quotas hold a workload's pods?) only advises, like GC001.
    quota: FailMode = "open"


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

    when_unavailable: WhenStateUnavailable = Field(default_factory=WhenStateUnavailable.model_construct)
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
    kubelet_configz: KubeletConfigzSettings = Field(default_factory=KubeletConfigzSettings.model_construct)


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
    # Report objects for report UIs (docs/audit.md): auto (whichever CRD the cluster serves,
    # OpenReports first; nothing when it serves neither), openreports (openreports.io/v1alpha1
    # Report), policyreport (wgpolicyk8s.io/v1alpha2 PolicyReport) or none. The server writes
    # them after each periodic audit, from the elected leader alone (from this replica when
    # leader.enabled is false); none turns that off. `gpushare audit --write-reports` uses the
    # same kind (none there means auto: the flag asks for them).
    reports: ReportKind = "auto"
    # The server audits in a child process; one that has not finished after this long is
    # stopped (and the run counted as failed).
    run_timeout_seconds: float = Field(120.0, gt=0)
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
    def _targets_something(self) -> Self:
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
    def _unique_grant_names(self) -> Self:
        seen = [g.name for g in self.grants]
        twice = sorted({n for n in seen if seen.count(n) > 1})
        if twice:
            raise ValueError(f"exemption grant names must be unique: {', '.join(twice)}")
        return self


class IsolationSettings(_Section):
    """GS010 and GS011 beyond what the rule overrides say (docs/isolation.md)."""

    # envFrom (a ConfigMap or Secret) in a container that uses GPUs: the names it sets are not
    # visible at admission. warn: GS010 warns about it whatever GS010's severity; deny: it takes
    # GS010's severity.
    env_from: Severity = "warn"


class BackstopSettings(_Section):
    """The ValidatingAdmissionPolicy ``gpushare policy export`` prints (policies/generate/backstop.py)."""

    policy_name: str = "gpushare-backstop"
    # Off by default: a GPU pod must name names.scheduler_name. It keeps GPU pods off the default
    # scheduler while the mutating webhook is down, at the price of blocking those that do not
    # name it during the outage (docs/operations.md, "When the webhook is down").
    scheduler_rule: bool = False
    # Left out like the webhooks leave them out (deploy/kustomize/webhooks.yaml).
    excluded_namespaces: tuple[str, ...] = ("kube-system", "gpushare-system")


class CapacitySettings(_Section):
    """What GC001 may do for one review (policies/placement/capacity_index.py; docs/operations.md, "What one
    review may cost")."""

    # Units of work (a group or node looked at, a selector requirement matched, a label read, a
    # card compared, a container placed on a card) per review at most; past it the pod is "too
    # costly to evaluate" (GC001's severity). A real pod takes a few hundred at 5,000 nodes.
    max_work: int = Field(100_000, ge=1_000)


BudgetOutcome = Literal["deny", "admit"]


class BudgetSettings(_Section):
    """What one object may make the rules judge (policies/admission/budget.py; docs/operations.md, "What one
    review may cost"). The rules' work grows with pod templates, containers and affinity terms,
    not with bytes; an object over any of these is not judged."""

    # Pod templates (a Pod or a Deployment has one, a Volcano Job one per task, an Argo Workflow
    # one per template). Real workloads have a few; 4 MiB of Volcano Job holds 5,000.
    max_templates: int = Field(256, ge=1)
    # Containers of every kind in all the templates together (real pods have a few; 4 MiB of Pod
    # holds 7,000).
    max_containers: int = Field(1024, ge=1)
    # Node affinity requirements (at least one per term) and pod (anti-)affinity terms, together.
    # Reading them is linear; what they cost GC001 against the nodes is capped by capacity.max_work.
    max_affinity_terms: int = Field(4096, ge=1)
    # deny: the object is refused, the answer saying what was counted and what is accepted;
    # admit: it is admitted unjudged, with a warning saying so (the backstop policy, where it is
    # installed, still judges it inside the API server).
    when_exceeded: BudgetOutcome = "deny"


class PolicySettings(_Section):
    """What the domain reads: names, rule overrides and the sections rules, placement, audit,
    exemptions and the backstop use. The edge's settings object (``webhook.settings.Settings``)
    extends it with the server's, the certificates' and the commands' sections."""

    names: Names = Field(default_factory=Names.model_construct)
    rules: dict[str, RuleOverride] = Field(default_factory=dict)
    state: StateSettings = Field(default_factory=StateSettings.model_construct)
    nodes: NodePolicySettings = Field(default_factory=NodePolicySettings.model_construct)
    catalog: CatalogSettings = Field(default_factory=CatalogSettings.model_construct)
    near_miss: NearMissSettings = Field(default_factory=NearMissSettings.model_construct)
    audit: AuditSettings = Field(default_factory=AuditSettings.model_construct)
    exemptions: ExemptionSettings = Field(default_factory=ExemptionSettings.model_construct)
    isolation: IsolationSettings = Field(default_factory=IsolationSettings.model_construct)
    backstop: BackstopSettings = Field(default_factory=BackstopSettings.model_construct)
    capacity: CapacitySettings = Field(default_factory=CapacitySettings.model_construct)
    budget: BudgetSettings = Field(default_factory=BudgetSettings.model_construct)
    workloads: WorkloadSettings = Field(default_factory=WorkloadSettings.model_construct)
