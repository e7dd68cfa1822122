"""The object under review, with what the rules derive from it computed once.

Below the rule registry: mutations and rules both read a Subject, and neither imports the other
to get it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from policies.model.exemptions import Exemption, annotations_path, read_exemption
from policies.model.grants import GrantOutcome, NamespaceLabels, annotation_permission, matching_grants
from policies.model.resources import (
    POD_SPEC_PATHS,
    ContainerRequest,
    Path,
    container_noun,
    container_requests,
    pod_spec,
    render_path,
)
from policies.model.settings import ExemptionSettings, Names
from policies.model.workload_sites import PodSite, pod_sites, site_requests
from policies.model.workloads import WorkloadKind

if TYPE_CHECKING:
    from policies.model.catalog import Catalog
    from policies.model.cluster import ClusterState
    from policies.model.settings import PolicySettings


@dataclass(frozen=True, slots=True)
class UserInfo:
    username: str = ""
    groups: tuple[str, ...] = ()


class StateUnavailable(Exception):
    """A stateful rule needs the cluster state and it is not usable; the engine applies the
    configured fail mode (``state.when_unavailable.<switch>``)."""

    def __init__(self, switch: str, what: str, reason: str, cause: str = "the cluster state is not usable",
                 retry_when: str = "the webhook has synced") -> None:
        super().__init__(f"{what}: {reason}")
        self.switch, self.what, self.reason = switch, what, reason
        self.cause, self.retry_when = cause, retry_when


T = TypeVar("T")


@dataclass(slots=True)
class SubjectPod:
    """One pod the object makes: a Pod itself, a workload's template, or one replica's template (or
    pod spec, or container set) of a custom resource. The rules that judge a pod as a whole (job-type
    mixing, capacity) judge each of these."""

    # How messages name it: "Job default/train", "PyTorchJob default/x spec.pytorchReplicaSpecs.Worker.template".
    label: str
    spec: dict[str, Any] | None  # where nodeSelector, affinity and schedulerName are
    spec_path: Path
    containers: list[ContainerRequest]
    site: PodSite | None = None  # a custom resource's: where it is and its raw containers
    labels: dict[str, str] = field(default_factory=dict)  # its pods' labels (the multi-GPU label is one)


class computed_once(Generic[T]):
    """``functools.cached_property`` without its lock: on Python 3.11 every first access takes
    one RLock shared by all instances, which serialised the webhook's request threads. A
    Subject belongs to one request thread, so the lock protects nothing here."""

    def __init__(self, fn: Callable[[Any], T]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> T:
        if instance is None:
            return self  # type: ignore[return-value]
        value = instance.__dict__[self.name] = self.fn(instance)  # later reads skip this descriptor
        return value


@dataclass
class Subject:
    """The object under review, with what the rules derive from it computed once."""

    kind: str
    obj: dict[str, Any]
    names: Names
    operation: str = "CREATE"
    # The namespace the request names (an AdmissionReview's request.namespace; "" offline).
    request_namespace: str = ""
    old: dict[str, Any] | None = None
    user: UserInfo = field(default_factory=UserInfo)
    state: ClusterState | None = None
    settings: PolicySettings | None = None
    catalog: Catalog | None = None
    # Namespace labels (who allows annotation exemptions); None: not known, nothing allowed by label.
    namespaces: NamespaceLabels | None = None
    # The day grant expiry is judged against (UTC today when not given).
    today: date | None = None
    # Every rule and mutation id: a grant naming another id is not honoured (the engine passes them).
    known_ids: frozenset[str] = frozenset()
    # A custom resource of the workload table (policies/model/workloads.py); None for Kubernetes' own kinds.
    workload: WorkloadKind | None = None
    # The subresource an admission review names ("ephemeralcontainers" for kubectl debug; "" for the
    # object itself): only the rules registered for it run, on what it changes.
    sub_resource: str = ""
    # Sent by the API server (the webhooks), not read from a file: what the webhooks are never sent
    # (a GPU-free container's envFrom) is left to check and the audit.
    admission: bool = False
    # Results several rules share (e.g. one placement check feeds GB001-GB005).
    memo: dict[str, object] = field(default_factory=dict)
    # Every verdict names its object, so these are worked out at once (see __post_init__).
    metadata: dict[str, Any] = field(init=False, repr=False)
    name: str = field(init=False)
    # Where the object lives: its metadata.namespace, else the request's namespace.
    namespace: str = field(init=False)
    # The kind whose pod template the built-in paths know ("" for a custom workload, whose own
    # metadata carries its exemption and labels).
    template_kind: str = field(init=False)

    def __post_init__(self) -> None:
        meta = self.obj.get("metadata")
        self.metadata = meta = meta if isinstance(meta, dict) else {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            generate = meta.get("generateName")
            name = f"{generate}*" if isinstance(generate, str) and generate else "<unnamed>"
        self.name = name
        ns = meta.get("namespace")
        self.namespace = ns if isinstance(ns, str) and ns else self.request_namespace
        self.template_kind = self.kind if self.workload is None else ""

    def usable_state(self, switch: str, what: str) -> ClusterState:
        """The cluster state, or StateUnavailable naming what could not be checked and why."""
        if self.state is None:
            raise StateUnavailable(switch, what, "no cluster state was given")
        availability = self.state.availability()
        if not availability.usable:
            raise StateUnavailable(switch, what, availability.reason, availability.cause, availability.retry_when)
        return self.state

    @computed_once
    def label(self) -> str:
        """How a message names the object: "Job default/cuda-33", "Node gpu-1"; a custom workload whose
        kind Kubernetes has too by kind.group: "Job.batch.volcano.sh default/mnist"."""
        kind = self.kind
        if self.workload is not None and kind in POD_SPEC_PATHS:
            kind = self.workload.name
        return f"{kind} {self.namespace}/{self.name}" if self.namespace else f"{kind} {self.name}"

    @computed_once
    def pod_spec(self) -> tuple[dict[str, Any] | None, Path]:
        """The pod spec of a Pod or workload and its path ((None, path) when absent); Kubernetes'
        own kinds only (a custom workload has ``pods``)."""
        return pod_spec(self.obj, self.kind)

    @computed_once
    def containers(self) -> list[ContainerRequest]:
        """Every container asking for a GPU resource, in every pod the object makes."""
        if self.workload is None:
            spec, base = self.pod_spec
            return container_requests(spec, base, self.names)
        return [c for pod in self.pods for c in pod.containers]

    @computed_once
    def pods(self) -> list[SubjectPod]:
        """Every pod the object makes, with its GPU requests."""
        if self.workload is None:
            spec, base = self.pod_spec
            return [SubjectPod(self.label, spec, base, self.containers, labels=self.pod_labels)]
        return [SubjectPod(f"{self.label} {render_path(site.path)}", site.spec, site.spec_path,
                           site_requests(site.containers, self.names), site, _string_labels(site.meta))
                for site in pod_sites(self.workload, self.obj)]

    @computed_once
    def asked(self) -> frozenset[str]:
        """Every GPU resource some container names, in limits or requests (for family tests). A value
        rule (GS001, GS003, GS004) judges what is written, a zero too; the rules that ask whether a
        container requests something judge by value (``ContainerRequest.has``: a zero is no request)."""
        asked: set[str] = set()
        for container in self.containers:
            asked.update(container.limits)
            asked.update(container.requests)
        return frozenset(asked)

    @computed_once
    def exemption(self) -> Exemption | None:
        """What the object's gpushare.io/exempt annotations ask for, and whether an admin allows
        annotation exemptions in its namespace (the engine and GE001 both read it)."""
        found = read_exemption(self.obj, self.template_kind, self.names)
        if found is None:
            return None
        permission = annotation_permission(self.namespace, self._exemption_settings, self.namespaces)
        return replace(found, allowed=permission.allowed, permission=permission.why)

    @property
    def _exemption_settings(self) -> ExemptionSettings:
        return self.settings.exemptions if self.settings is not None else ExemptionSettings()

    @computed_once
    def pod_labels(self) -> dict[str, str]:
        """The labels a grant's selector matches: the pod's own, or a workload's pod template's."""
        path = (*annotations_path(self.template_kind)[:-1], "labels")
        obj: Any = self.obj
        for part in path:
            obj = obj.get(part) if isinstance(obj, dict) else None
        return {k: v for k, v in obj.items() if isinstance(v, str)} if isinstance(obj, dict) else {}

    @computed_once
    def grants(self) -> list[GrantOutcome]:
        """Config grants covering this object (honoured or not: GE001 says why not)."""
        exemptions = self._exemption_settings
        if not exemptions.grants or not self.namespace:
            return []
        today = self.today or datetime.now(UTC).date()
        return matching_grants(exemptions, self.namespace, self.metadata, self.pod_labels, self.known_ids,
                               today)

    @computed_once
    def set_aside(self) -> frozenset[str]:
        """Every rule and mutation id an honoured exemption (annotation or grant) sets aside."""
        ids = self.exemption.set_aside if self.exemption is not None else frozenset()
        for outcome in self.grants:
            ids = ids | outcome.ids
        return ids

    def exempted_by(self, rule_ids: set[str]) -> list[tuple[str, str]]:
        """(source, reason) of every honoured exemption covering one of ``rule_ids``: source is
        "annotation" or "grant:NAME"."""
        found = []
        exemption = self.exemption
        if exemption is not None and exemption.honoured and rule_ids & exemption.set_aside:
            found.append(("annotation", exemption.reason))
        for outcome in self.grants:
            if rule_ids & outcome.ids:
                found.append((f"grant:{outcome.grant.name}", outcome.grant.reason))
        return found

    def where(self, container: ContainerRequest) -> str:
        return self.naming(container.group, container.name, container.path)

    def naming(self, group: str, name: str, path: Path) -> str:
        """How a message names a container: 'Job default/x container "c"'; in a custom workload by its
        path, which names the replica: 'PyTorchJob default/x spec.pytorchReplicaSpecs.Worker.template
        .spec.containers[0] (container "pytorch")'."""
        noun = container_noun(group)
        if self.workload is None:
            return f'{self.label} {noun} "{name}"'
        if group == "resources":  # a ResourceRequirements standing for the containers it sizes
            return f"{self.label} {render_path(path)}"
        return f'{self.label} {render_path(path)} ({noun} "{name}")'


def _string_labels(meta: dict[str, Any] | None) -> dict[str, str]:
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return {k: v for k, v in labels.items() if isinstance(v, str)} if isinstance(labels, dict) else {}
