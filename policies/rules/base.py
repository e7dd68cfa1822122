"""What a rule is, what it finds, and what it is shown."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from policies.model.resources import Path, render_path
from policies.model.settings import Severity
from policies.model.subject import Subject
from policies.rules.relevance import NOTHING, Relevance


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule's verdict on one place in an object."""

    rule: str
    severity: Severity
    message: str
    path: Path = ()
    # The message as an admission warning words it, when the rule gives a shorter one than
    # ``message`` (policies/model/warning_text.py: the API server may truncate warnings past 256 characters).
    brief: str = ""

    @property
    def path_text(self) -> str:
        return render_path(self.path)


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
    # What an object must show for the check to find anything: the webhooks' matchConditions
    # send exactly the objects some rule declares relevant (policies/generate/match_conditions.py).
    relevance: Relevance = NOTHING
    # Subresources whose UPDATE the rule judges (e.g. "ephemeralcontainers"); on the object itself it
    # judges ``operations`` as always, and on any other subresource nothing.
    subresources: frozenset[str] = frozenset()


REGISTRY: dict[str, Rule] = {}


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
    relevance: Relevance | None = None,
    subresources: Iterable[str] = (),
) -> Callable[[Check], Check]:
    """Register a check function as a rule. A rule that judges objects (``kinds``) says what makes an
    object relevant to it: that is what the webhooks are sent."""

    def register(check: Check) -> Check:
        if id in REGISTRY:
            raise ValueError(f"rule {id} registered twice")
        kinds_judged = frozenset(kinds)
        if kinds_judged and relevance is None:
            raise ValueError(f"rule {id} judges {sorted(kinds_judged)} but declares no relevance")
        REGISTRY[id] = Rule(id, severity, title, doc, seed, kinds_judged, check, frozenset(operations), stateful,
                            applies, family, relevance or NOTHING, frozenset(subresources))
        return check

    return register
