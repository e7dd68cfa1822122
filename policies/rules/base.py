"""What a rule is, what it finds, and what it is shown."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from functools import cache
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..exemptions import Exemption, annotations_path, read_exemption
from ..grants import GrantOutcome, NamespaceLabels, annotation_permission, matching_grants
from ..resources import ContainerRequest, Path, container_requests, pod_spec, render_path
from ..settings import ExemptionSettings, Names, Severity

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..cluster import ClusterState
    from ..settings import PolicySettings


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule's verdict on one place in an object."""

    rule: str
    severity: Severity
    message: str
    path: Path = ()
    # The message as an admission warning words it, when the rule gives a shorter one than
    # ``message`` (policies/warning_text.py: the API server may truncate warnings past 256 characters).
    brief: str = ""

    @property
    def path_text(self) -> str:
        return render_path(self.path)


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
    # Every rule and mutation id (the engine knows both; rules cannot import mutations).
    known_ids: frozenset[str] | None = None
    # Results several rules share (e.g. one placement check feeds GB001-GB005).
    memo: dict[str, object] = field(default_factory=dict)
    # Every verdict names its object, so these are worked out at once (see __post_init__).
    metadata: dict[str, Any] = field(init=False, repr=False)
    name: str = field(init=False)
    # Where the object lives: its metadata.namespace, else the request's namespace.
    namespace: str = field(init=False)

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
        """How a message names the object: "Job default/cuda-33", "Node gpu-1"."""
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"

    @computed_once
    def pod_spec(self) -> tuple[dict[str, Any] | None, Path]:
        """The pod spec of a Pod or workload and its path ((None, path) when absent)."""
        return pod_spec(self.obj, self.kind)

    @computed_once
    def containers(self) -> list[ContainerRequest]:
        spec, base = self.pod_spec
        return container_requests(spec, base, self.names)

    @computed_once
    def asked(self) -> frozenset[str]:
        """Every GPU resource some container names, in limits or requests (for family tests)."""
        asked: set[str] = set()
        for container in self.containers:
            asked.update(container.limits)
            asked.update(container.requests)
        return frozenset(asked)

    @computed_once
    def exemption(self) -> Exemption | None:
        """What the object's gpushare.io/exempt annotations ask for, and whether an admin allows
        annotation exemptions in its namespace (the engine and GE001 both read it)."""
        found = read_exemption(self.obj, self.kind, self.names)
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
        path = (*annotations_path(self.kind)[:-1], "labels")
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
        known = self.known_ids if self.known_ids is not None else frozenset(REGISTRY)
        today = self.today or datetime.now(UTC).date()
        return matching_grants(exemptions, self.namespace, self.metadata, self.pod_labels, known, today)

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
        noun = "init container" if container.group == "initContainers" else "container"
        return f'{self.label} {noun} "{container.name}"'


@dataclass(frozen=True, slots=True)
class Found:
    """What a check finds at one place of the subject: the message (without the rule id, which
    the engine prefixes), where it is, and whether it is advisory (a warning even under a deny
    rule; an advisory finding never hardens a warn rule either)."""

    message: str
    path: Path = ()
    advisory: bool = False
    # A shorter message for admission warnings (rule id prefixed by the engine as well), when the
    # whole one runs past 256 characters with ordinary names; the whole one stays in /dry-run,
    # `check`, `explain` and the review's audit annotations.
    brief: str = ""


Check = Callable[[Subject], Iterable[Found]]


@dataclass(frozen=True, slots=True)
class Rule:
    """A rule: an id, a default severity, the seed it comes from, and its check.

    A check yields ``Found`` records; the engine prefixes the id and applies the configured
    severity (a warning where the record is advisory).
    """

    id: str
    severity: Severity
    title: str
    doc: str
    seed: str
    kinds: frozenset[str]
    check: Check
    operations: frozenset[str] = frozenset({"CREATE", "UPDATE"})
    stateful: bool = False
    # A cheap test shared by a family of rules (e.g. "is this a placement?"): when it fails the
    # check would find nothing, and the engine skips it; evaluated once per subject.
    applies: Callable[[Subject], bool] | None = None
    # The family the rule belongs to where others need to know it (e.g. "placement": the GB
    # rules, which /dry-run leaves to the ranking and the scoring engine reports per node).
    family: str = ""
    # A placement failure that no eviction can cure (kube-scheduler's FailedAndUnresolvable).
    unresolvable: bool = False


REGISTRY: dict[str, Rule] = {}


@cache
def rule_ids(family: str) -> frozenset[str]:
    """The ids of every registered rule of ``family``: lists of rules are derived, never typed out."""
    from policies import rules as _registered  # noqa: F401  (importing the package registers every rule)

    return frozenset(r.id for r in REGISTRY.values() if r.family == family)


@cache
def unresolvable_rule_ids() -> frozenset[str]:
    from policies import rules as _registered  # noqa: F401

    return frozenset(r.id for r in REGISTRY.values() if r.unresolvable)


def rule(
    id: str,
    *,
    severity: Severity,
    title: str,
    doc: str,
    seed: str,
    kinds: Iterable[str],
    operations: Iterable[str] = ("CREATE", "UPDATE"),
    stateful: bool = False,
    applies: Callable[[Subject], bool] | None = None,
    family: str = "",
    unresolvable: bool = False,
) -> Callable[[Check], Check]:
    """Register a check function as a rule."""

    def register(check: Check) -> Check:
        if id in REGISTRY:
            raise ValueError(f"rule {id} registered twice")
        REGISTRY[id] = Rule(id, severity, title, doc, seed, frozenset(kinds), check,
                            frozenset(operations), stateful, applies, family, unresolvable)
        return check

    return register
