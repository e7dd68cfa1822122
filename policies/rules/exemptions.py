"""GE001: an exemption that cannot be honoured says why, instead of silently not applying."""

from __future__ import annotations

from collections.abc import Iterator

from policies.model.exemptions import annotations_path
from policies.model.resources import CUSTOM_WORKLOADS, POD_SPEC_PATHS, render_path
from policies.model.subject import Subject
from policies.rules.base import REGISTRY, Found, rule
from policies.rules.mutations import MUTATIONS
from policies.rules.pod_resources import names_a_near_miss
from policies.rules.relevance import Relevance

EXEMPTABLE_KINDS = (*POD_SPEC_PATHS, CUSTOM_WORKLOADS, "Node", "Binding")


def _known_ids() -> set[str]:
    return set(REGISTRY) | set(MUTATIONS)


# An object carrying the exemption annotation; for grants (which match whole namespaces), an
# object some shared-GPU rule judges: a grant's news matters only where its rules do.
CARRIES_OR_NEEDS_AN_EXEMPTION = Relevance(annotations=("exempt_annotation",), resources=("gpu_mem", "gpu_core"),
                                          near_miss=True, reads=("names.exempt_reason_annotation",))


@rule("GE001", severity="warn", kinds=EXEMPTABLE_KINDS, relevance=CARRIES_OR_NEEDS_AN_EXEMPTION,
      seed="project choice: an exemption that is not applied must not pass silently",
      title="Exemptions are allowed by an admin, carry a reason and name known rules",
      doc="gpushare.io/exempt lists rule ids to skip for this object and needs a non-empty "
          "gpushare.io/exempt-reason; it is honoured only in namespaces an admin allows (a Namespace "
          "label or the config). Without that, without a reason, or on a workload's own metadata "
          "instead of its pod template, the exemption is not applied and the rules it names still "
          "judge the object. A config grant that has expired or names unknown rules says so too.")
def exemption_is_usable(subject: Subject) -> Iterator[Found]:
    yield from _grant_problems(subject)
    names = subject.names
    exemption = subject.exemption
    if exemption is None:
        return
    listed = ",".join(exemption.ids) or "(nothing)"
    if exemption.misplaced:
        wanted = render_path(annotations_path(subject.template_kind))  # the map, not the key inside it
        yield Found(f"{subject.label}: {names.exempt_annotation}={listed} is on the {subject.kind}'s own metadata, "
                    f"which its pods do not inherit, so it is not applied; put it and "
                    f"{names.exempt_reason_annotation} in the pod template's annotations, {wanted}", exemption.path)
    elif not exemption.reason:
        yield Found(f"{subject.label}: {names.exempt_annotation}={listed} has no {names.exempt_reason_annotation}, "
                    f"so it is not applied; add {names.exempt_reason_annotation} saying why the rules do not "
                    f"apply here", exemption.path)
    elif exemption.ids and not exemption.allowed:
        yield Found(f"{subject.label}: {names.exempt_annotation}={listed} is not applied: {exemption.permission}",
                    exemption.path)
    if not exemption.ids:
        yield Found(f"{subject.label}: {names.exempt_annotation} names no rule; list rule ids such as GS003,GN002 "
                    f"(see `gpushare rules`)", exemption.path)
    unknown = [rule_id for rule_id in exemption.ids if rule_id not in _known_ids()]
    if unknown:
        yield Found(f"{subject.label}: {names.exempt_annotation} names unknown rule id(s) {', '.join(unknown)}; "
                    f"use ids listed by `gpushare rules`", exemption.path)


def _grant_problems(subject: Subject) -> Iterator[Found]:
    """Config grants covering the object that are not (fully) honoured, and why: for an object a
    shared-GPU rule judges (a grant covers a namespace; elsewhere its news is noise)."""
    r = subject.names.resources
    if not subject.grants or ((subject.workload is not None or subject.kind in POD_SPEC_PATHS)
                              and r.gpu_mem not in subject.asked
                              and r.gpu_core not in subject.asked and not names_a_near_miss(subject)):
        return
    for outcome in subject.grants:
        grant = outcome.grant
        listed = ",".join(grant.rules)
        if outcome.expired:
            yield Found(f"{subject.label}: exemption grant {grant.name!r} ({listed}) expired on "
                        f"{grant.expires.isoformat()}, so it is not applied; an admin renews it in exemptions.grants",
                        ("metadata",))
        if outcome.unknown:
            yield Found(f"{subject.label}: exemption grant {grant.name!r} names unknown rule id(s) "
                        f"{', '.join(outcome.unknown)}, which are not applied; use ids listed by `gpushare rules`",
                        ("metadata",))
