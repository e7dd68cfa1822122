"""The engine: one object, one operation, the cluster state -> a Verdict.

Every way in (webhook, dry-run, ``gpushare check``) calls this, so they cannot disagree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from policies import rules as _rules  # noqa: F401  (registers every rule module)
from policies.admission.budget import BUDGET_ID, describe, overrun
from policies.model.grants import NamespaceLabels
from policies.model.resources import CUSTOM_WORKLOADS
from policies.model.settings import PolicySettings, Severity
from policies.model.subject import StateUnavailable, Subject, UserInfo
from policies.model.workloads import WorkloadKind, group_of, workload_table
from policies.rules.base import REGISTRY, Finding, Rule
from policies.rules.judged import JudgedParts, deleting, parts_for
from policies.rules.mutations import MUTATIONS, Op, plan_patch
from policies.rules.placement_rules import placed_pod, placement_of
from policies.rules.relevance import resolve

if TYPE_CHECKING:
    # The cluster's records, the ledger and the catalog are imported where they are used: what
    # judges manifests offline (gpushare check) loads none of them.
    from policies.model.catalog import Catalog
    from policies.model.cluster import ClusterState
    from policies.placement.assume import PlacementLedger


# Appended to a denial an UPDATE does not cause (the last clause: warnings keep it whole).
EXISTING = "; it was so before this update, which does not change it: admitted"


@functools.cache
def _pod_from_manifest() -> Callable[..., Any]:
    """policies.model.cluster's reader, imported when a server first records an admitted pod (an import
    statement in ``admit`` would look it up again on every review)."""
    from policies.model.cluster_manifests import pod_from_manifest

    return pod_from_manifest


@dataclass(slots=True)
class Verdict:
    kind: str
    name: str
    namespace: str
    findings: list[Finding] = field(default_factory=list)
    patch: list[Op] = field(default_factory=list)
    patch_ids: list[str] = field(default_factory=list)
    # Findings an honoured gpushare.io/exempt annotation set aside, and the reason it gave.
    exempted: list[Finding] = field(default_factory=list)
    exemption_reason: str = ""
    # Which honoured exemptions set them aside: "annotation", "grant:NAME".
    exempted_by: list[str] = field(default_factory=list)

    # Most verdicts have no findings: each property answers those without a pass over them.
    @property
    def allowed(self) -> bool:
        return not self.findings or not any(f.severity == "deny" for f in self.findings)

    @property
    def violations(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "deny"] if self.findings else []

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warn"] if self.findings else []

    @property
    def rule_ids(self) -> list[str]:
        """Every rule and mutation that fired, in order, without repeats."""
        if not self.findings:
            return list(self.patch_ids)  # already without repeats
        return list(dict.fromkeys([f.rule for f in self.findings] + self.patch_ids))


@dataclass(frozen=True, slots=True)
class ActiveRule:
    """A rule as configured, with what the engine's loop reads on every request copied flat."""

    rule: Rule
    severity: Severity
    id: str = field(init=False)
    check: Any = field(init=False)
    applies: Any = field(init=False)
    stateful: bool = field(init=False)

    def __post_init__(self) -> None:
        for name in ("id", "check", "applies", "stateful"):
            object.__setattr__(self, name, getattr(self.rule, name))


class Engine:
    """Rules and mutations as configured; cheap to call, built once per settings object."""

    def __init__(self, settings: PolicySettings) -> None:
        self.settings = settings
        self.names = settings.names
        # Overrides are validated here, so a broken one is refused at start, never in a request; the
        # shipped catalog alone (valid: the node rules' tests read it) is read when a node rule first
        # needs it (default_catalog), so a run judging no node never parses it.
        overrides = settings.catalog
        self.catalog: Catalog | None = None
        if overrides.file is not None or overrides.regions or overrides.versions:
            from policies.model.catalog import build_catalog

            self.catalog = build_catalog(overrides)
        unknown = set(settings.rules) - set(REGISTRY) - set(MUTATIONS)
        if unknown:
            raise ValueError(f"config names unknown rules: {', '.join(sorted(unknown))}")
        self._active: list[ActiveRule] = []
        for rule_id, rule in sorted(REGISTRY.items()):
            override = settings.rules.get(rule_id)
            if override is not None and not override.enabled:
                continue
            severity = override.severity if override is not None and override.severity else rule.severity
            self._active.append(ActiveRule(rule, severity))
        self._by_kind: dict[tuple[str, str, str], list[ActiveRule]] = {}
        self._plans: dict[tuple[str, str, str], list[tuple[Any, list[ActiveRule]]]] = {}
        self._mutations = frozenset(m for m in MUTATIONS if self.mutation_enabled(m))
        self._known_ids = frozenset(REGISTRY) | frozenset(MUTATIONS)
        self._handled = frozenset(k for a in self._active for k in a.rule.kinds) | {"Pod", "DaemonSet"}
        self.workloads = workload_table(settings)
        self._judged: dict[str, JudgedParts] = {}

    def warm(self) -> None:
        """Read now what the node rules otherwise read on first use (the shipped catalog: two YAML
        files and their validators), so that a server's first node review does not pay for it."""
        if self.catalog is None:
            from policies.model.catalog import default_catalog

            self.catalog = default_catalog()

    @property
    def known_ids(self) -> frozenset[str]:
        """Every rule and mutation id."""
        return self._known_ids

    def rules_for(self, kind: str, operation: str, sub_resource: str = "") -> list[ActiveRule]:
        """The active rules for kind and operation; on a subresource, those registered for it."""
        key = (kind, operation, sub_resource)
        found = self._by_kind.get(key)
        if found is None:
            found = [a for a in self._active if kind in a.rule.kinds and operation in a.rule.operations
                     and (not sub_resource or sub_resource in a.rule.subresources)]
            self._by_kind[key] = found
        return found

    def _plan(self, kind: str, operation: str, sub_resource: str = "") -> list[tuple[Any, list[ActiveRule]]]:
        """The rules for kind and operation in id order, runs of one family test grouped, so
        that a failed test skips its whole run (e.g. GB001-GB005 for a pod that is not placed)."""
        key = (kind, operation, sub_resource)
        plan = self._plans.get(key)
        if plan is None:
            plan = []
            for active in self.rules_for(kind, operation, sub_resource):
                if plan and plan[-1][0] is active.applies:
                    plan[-1][1].append(active)
                else:
                    plan.append((active.applies, [active]))
            self._plans[key] = plan
        return plan

    def mutation_enabled(self, mutation_id: str) -> bool:
        override = self.settings.rules.get(mutation_id)
        return override is None or override.enabled

    def handles(self, kind: str, group: str = "") -> bool:
        """Whether any rule or mutation judges objects of this kind (a custom workload's: ``group``)."""
        return kind in self._handled or self.workload(kind, group) is not None

    def workload(self, kind: str, group: str) -> WorkloadKind | None:
        """The workload table's entry for a custom resource kind, None for Kubernetes' own kinds."""
        return self.workloads.lookup(group, kind)

    def subject(self, kind: str, obj: dict[str, Any], *, operation: str = "CREATE", namespace: str = "",
                old: dict[str, Any] | None = None, user: UserInfo | None = None,
                state: ClusterState | None = None, namespaces: NamespaceLabels | None = None,
                group: str | None = None, sub_resource: str = "", admission: bool = False) -> Subject:
        """The subject; namespace labels come from ``namespaces``, else from the state when it has them.
        ``group`` is the object's API group (None: read from its apiVersion); ``sub_resource`` the
        subresource a review names; ``admission``: sent by the API server."""
        if namespaces is None and hasattr(state, "namespace_labels"):
            namespaces = state  # type: ignore[assignment]
        if group is None:
            group = group_of(obj)
        workload = self.workloads.lookup(group, kind) if group else None  # core kinds (Pod): no call
        return Subject(kind=kind, obj=obj, names=self.names, operation=operation, request_namespace=namespace,
                       old=old, user=user or UserInfo(), state=state, settings=self.settings,
                       catalog=self.catalog, namespaces=namespaces, known_ids=self._known_ids, workload=workload,
                       sub_resource=sub_resource, admission=admission)

    def judged(self, kind: str) -> JudgedParts:
        """What the enabled rules judge on objects of ``kind`` (a custom workload's: CUSTOM_WORKLOADS),
        from their declarations (policies/rules/judged.py)."""
        parts = self._judged.get(kind)
        if parts is None:
            found = resolve([a.rule.relevance for a in self.rules_for(kind, "UPDATE")], self.settings)
            parts = self._judged[kind] = parts_for(kind, found, self.settings)
        return parts

    def validate(self, subject: Subject) -> Verdict:
        """Run every active rule for the subject's kind and operation; an UPDATE is judged on what
        it changes (``_ratchet``).

        Stateful rules are skipped without cluster state (``gpushare check`` without
        ``--snapshot``). Findings of rules the object is exempted from are kept apart.
        """
        # A subresource's review (kubectl debug's ephemeralcontainers) is judged on what it adds already.
        if subject.operation == "UPDATE" and isinstance(subject.old, dict) and not subject.sub_resource:
            return self._ratchet(subject)
        return self._judge(subject)

    def _ratchet(self, subject: Subject) -> Verdict:
        """An UPDATE denies only what it changes (Kubernetes' validation ratcheting, Kyverno's
        allowExistingViolations): an object being deleted is admitted unjudged (removing a finalizer
        is the garbage collector's work); when every judged part is as it was, every denial becomes a
        warning naming the existing violation; otherwise a denial found on the old object as well, word
        for word (same rule, same object, container and value), is not made worse and becomes one too.
        Findings are kept, so the audit and the warnings still report them."""
        old = subject.old
        if deleting(subject.obj) or old is None:
            return Verdict(subject.kind, subject.name, subject.namespace)
        verdict = self._judge(subject)
        if verdict.allowed:
            return verdict
        kind = subject.kind if subject.workload is None else CUSTOM_WORKLOADS
        before: set[tuple[str, str]] | None = None  # None: nothing judged changed
        if not self.judged(kind).unchanged(subject.obj, old):
            unchanged = replace(subject, obj=old, memo={})  # the old object, as an update that changes nothing
            before = {(f.rule, f.message) for f in self._judge(unchanged).findings}
        verdict.findings = [replace(f, severity="warn", message=f"{f.message}{EXISTING}",
                                    brief=f"{f.brief}{EXISTING}" if f.brief else "")
                            if f.severity == "deny" and (before is None or (f.rule, f.message) in before) else f
                            for f in verdict.findings]
        return verdict

    def _judge(self, subject: Subject) -> Verdict:
        """Every active rule for the subject's kind and operation, as the object stands."""
        verdict = self._over_budget(subject)
        if verdict is not None:
            return verdict
        verdict = Verdict(subject.kind, subject.name, subject.namespace)
        # Not honoured: GE001 says why, and the rules judge the object as if it asked for nothing.
        set_aside = subject.set_aside
        stateless = subject.state is None
        # Rules that could not run for the same reason are reported together, once.
        unavailable: dict[tuple[str, str, str], tuple[StateUnavailable, list[str]]] = {}
        applicable: dict[Any, bool] = {}  # each family test once per subject
        # A custom workload's rules are those registered for all of them (inline: this runs per review).
        rule_kind = subject.kind if subject.workload is None else CUSTOM_WORKLOADS
        for applies, run in self._plan(rule_kind, subject.operation, subject.sub_resource):
            if applies is not None:
                ok = applicable.get(applies)
                if ok is None:
                    ok = applicable[applies] = applies(subject)
                if not ok:
                    continue
            for active in run:
                if active.stateful and stateless:
                    continue
                exempt = active.id in set_aside
                try:
                    for found in active.check(subject):
                        severity = "warn" if found.advisory else active.severity
                        (verdict.exempted if exempt else verdict.findings).append(
                            Finding(active.id, severity, f"{active.id}: {found.message}", found.path,
                                    f"{active.id}: {found.brief}" if found.brief else ""))
                except StateUnavailable as exc:
                    if not stateless and not exempt:
                        unavailable.setdefault((exc.switch, exc.what, exc.reason), (exc, []))[1].append(active.id)
        verdict.findings.extend(self._unavailable(exc, ids) for exc, ids in unavailable.values())
        if verdict.exempted:  # only an honoured exemption sets findings aside
            sources = subject.exempted_by({f.rule for f in verdict.exempted})
            verdict.exempted_by = [source for source, _ in sources]
            verdict.exemption_reason = sources[0][1] if len(sources) == 1 else "; ".join(
                f"{source}: {reason}" for source, reason in sources)
        return verdict

    def _over_budget(self, subject: Subject) -> Verdict | None:
        """The verdict on an object over ``budget`` (denied, or admitted unjudged), None when within.
        Counted before any rule runs, on each object judged: an UPDATE's old object is judged (and
        so counted) only when the new one would be denied and its judged parts changed."""
        limits = self.settings.budget
        found = overrun(subject.kind, subject.obj, subject.workload, limits)
        if found is None:
            return None
        message, brief = describe(found, subject.label, limits)
        severity: Severity = "warn" if limits.when_exceeded == "admit" else "deny"
        return Verdict(subject.kind, subject.name, subject.namespace,
                       [Finding(BUDGET_ID, severity, message, (), brief)])

    def _unavailable(self, exc: StateUnavailable, rule_ids: list[str]) -> Finding:
        """The configured fail mode for stateful rules whose state is not usable."""
        mode = getattr(self.settings.state.when_unavailable, exc.switch)
        setting = f"state.when_unavailable.{exc.switch}"
        prefix = f"{', '.join(rule_ids)}: {exc.what} because {exc.cause} ({exc.reason})"
        if mode == "closed":
            return Finding(rule_ids[0], "deny", f"{prefix}; denied ({setting}: closed), retry when "
                                                f"{exc.retry_when}")
        return Finding(rule_ids[0], "warn", f"{prefix}; admitted without the check ({setting}: open)")

    def admit(self, subject: Subject, ledger: PlacementLedger) -> Verdict:
        """``validate`` plus its admission side effect: record what was admitted in ``ledger``.

        A placement is judged and recorded under its node's lock, so concurrent placements onto
        one node see each other. ``subject.state`` should be ``ledger.view(...)``. Dry-run and
        offline paths call ``validate`` instead and record nothing.
        """
        if subject.sub_resource:  # a subresource's change places and creates nothing
            return self.validate(subject)
        where = placement_of(subject)
        if where is None:
            verdict = self.validate(subject)
            if verdict.allowed and subject.kind == "Pod" and subject.operation == "CREATE" \
                    and subject.metadata.get("name"):
                pod = _pod_from_manifest()(subject.obj, self.names, subject.containers, with_env=False)
                ledger.remember_created(pod if pod.namespace == subject.namespace or not subject.namespace
                                        else replace(pod, namespace=subject.namespace))
            return verdict
        with ledger.node_lock(where.node):
            verdict = self.validate(subject)
            if verdict.allowed:
                placed = placed_pod(subject)
                if placed is not None:
                    ledger.assume(placed)
        return verdict

    def mutate(self, subject: Subject) -> Verdict:
        """Plan the JSON patch for the subject (no rules run)."""
        verdict = self._over_budget(subject)
        if verdict is not None:
            return verdict  # not patched either: planning walks every container too
        verdict = Verdict(subject.kind, subject.name, subject.namespace)
        if subject.sub_resource:  # the mutations patch objects, never a subresource's change
            return verdict
        set_aside = subject.set_aside
        enabled = self._mutations - set_aside if set_aside else self._mutations
        for mutation_id, op in plan_patch(subject, enabled.__contains__):
            verdict.patch.append(op)
            if mutation_id not in verdict.patch_ids:
                verdict.patch_ids.append(mutation_id)
        return verdict
