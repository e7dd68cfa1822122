"""Admission scheduling, without sockets: what kind of work a request is, where it waits, what
it waits for, and when it is refused instead.

The transport (``webhook.server.worker``) reads requests and writes answers; it asks a
``Scheduler`` what to do with each complete request and never names a route. Each route
declares its class in the app's route table where it is registered
(``webhook.http.routing.RouteTable.declare``), which the app hands to the worker:

- ``review``: the API server's admission calls. Evaluated by the poller itself or in one of
  ``overload.app_concurrency`` evaluation slots; refused with a fast 503 only when they could
  not be answered before the API server's deadline (``webhook.http.deadline``) or when
  ``overload.max_waiting_requests`` are already waiting. Their evaluation times, and nothing
  else's, make the review-time estimate those refusals use.
- ``large review``: a review whose body is over ``overload.large_body_bytes`` (or of unknown
  length). The route declares ``review``; the scheduler puts it in a lane of its own (``lane``):
  ``overload.large_review_concurrency`` slots, its own queue and its own estimate, refused by the
  same deadline and count. A large review costs tens of milliseconds or more to read, decode and
  judge; in the same queue as the small ones, six clients sending 4 MiB reviews back to back
  made small reviews wait behind them for seconds (bench/fair_eval.py). In their own lane, small reviews
  never wait behind large ones; large ones wait behind each other (the API server's own Priority
  and Fairness keeps such flows apart the same way, by flow and by the work a request costs).
- ``tool``: /dry-run, /explain and the scheduler extender, in ``overload.auxiliary_concurrency``
  slots of their own; past ``overload.max_waiting_tools`` waiting, a fast 503.
- ``probe``: /healthz, /readyz, and anything no route declares (its 404 or 405 costs nothing):
  answered by the poller itself, ahead of the reviews it evaluates; no slot, never refused.
- ``scrape``: /metrics, on a helper thread, ``overload.scrape_concurrency`` at a time (a scrape
  of a large cluster renders megabytes); no evaluation slot, never refused.

Slots are for evaluation only: a request holds one from the moment it starts evaluating until
its answer is built, never while it is read or written.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from webhook.http import deadline
from webhook.http.routing import Work
from webhook.settings import OverloadSettings

T = TypeVar("T")


class Route(Enum):
    """Where a request goes once it has arrived."""

    POLLER = "poller"  # the poller evaluates it (probes first, then reviews in order)
    THREAD = "thread"  # a thread runs it now (with a slot for reviews and tools)
    QUEUED = "queued"  # it waits for a slot (``Scheduler.grants``)


class ReviewTime:
    """The recent time one review's evaluation takes: a moving average of measured evaluations
    (each weighs 1/64) that forgets.

    It decays with wall time (halving every ``half_life`` seconds without a new measurement)
    and with every refusal it decided (by 1/64 each): a refusal measures nothing, so an estimate
    inflated by a burst of costly reviews would otherwise refuse every review after the burst,
    and never learn that they are cheap again."""

    WEIGHT = 1 / 64

    def __init__(self, half_life: float) -> None:
        self._half_life = half_life
        self._value = 0.0
        self._at = 0.0

    def seconds(self, now: float) -> float:
        if not self._value:
            return 0.0
        return self._value * float(0.5 ** (max(0.0, now - self._at) / self._half_life))

    def observe(self, seconds: float, now: float) -> None:
        current = self.seconds(now)
        self._value = current + (seconds - current) * self.WEIGHT
        self._at = now

    def refused(self, now: float) -> None:
        self._value = self.seconds(now) * (1 - self.WEIGHT)
        self._at = now


@dataclass(slots=True)
class Waiting(Generic[T]):
    """A request waiting to be evaluated."""

    item: T
    work: Work
    queued_at: float
    timeout: str | None  # the API server's ?timeout= (reviews)
    behind: bool  # it could not start at once: its wait is judged again before it runs


@dataclass(frozen=True, slots=True)
class Refusal(Generic[T]):
    """A queued review whose turn came too late: answer it with ``reason``, do not evaluate it."""

    item: T
    reason: str


class Scheduler(Generic[T]):
    """The scheduling decisions. Not thread-safe: the project's worker calls it from its poller
    only, the gthread middleware (``webhook.server.scheduling_middleware``) under a lock.

    The transport reports each arrival (``arrive``), takes what the poller evaluates itself
    (``next_for_poller``) and what threads may start (``grants``), and reports each finished
    evaluation (``finished``)."""

    def __init__(self, limits: OverloadSettings) -> None:
        self.limits = limits
        self.estimate = ReviewTime(limits.estimate_half_life_seconds)  # of the small reviews
        self._estimates = {Work.REVIEW: self.estimate,
                           Work.LARGE_REVIEW: ReviewTime(limits.estimate_half_life_seconds)}
        self._free = {Work.REVIEW: limits.app_concurrency, Work.LARGE_REVIEW: limits.large_review_concurrency,
                      Work.TOOL: limits.auxiliary_concurrency, Work.SCRAPE: limits.scrape_concurrency}
        self._queued: dict[Work, deque[Waiting[T]]] = {work: deque() for work in self._free}
        self._probes: deque[T] = deque()
        self._inline: deque[Waiting[T]] = deque()  # reviews the poller evaluates, oldest first
        self.evaluating = 0  # requests holding a slot, plus the poller's review while it runs

    def lane(self, work: Work, body_bytes: int | None) -> Work:
        """A review's lane by its body's size (None: unknown, a chunked body): large or small."""
        if work is Work.REVIEW and (body_bytes is None or body_bytes > self.limits.large_body_bytes):
            return Work.LARGE_REVIEW
        return work

    # -- what is waiting

    def waiting(self) -> int:
        """Requests waiting to be evaluated (reviews and tools; probes are answered at once)."""
        queued = self._queued
        return len(self._inline) + len(queued[Work.REVIEW]) + len(queued[Work.LARGE_REVIEW]) + len(queued[Work.TOOL])

    def busy(self) -> bool:
        """Anything waiting or running (a draining worker waits for this to end)."""
        return bool(self.waiting() or self._queued[Work.SCRAPE] or self._probes or self.evaluating)

    def reviews_ahead(self, work: Work = Work.REVIEW) -> int:
        """Reviews waiting in ``work``'s lane."""
        if work is Work.LARGE_REVIEW:
            return len(self._queued[work])
        return len(self._inline) + len(self._queued[Work.REVIEW])

    def reviews_in_threads(self) -> int:
        return self.limits.app_concurrency - self._free[Work.REVIEW]

    # -- refusing at the door

    def expected_wait(self, now: float, work: Work = Work.REVIEW) -> float:
        """When a review arriving now in ``work``'s lane would be answered: the reviews ahead of it
        times the lane's estimate, divided by its slots (the poller evaluates its own queue alone),
        plus its own evaluation; and at least as late as the lane's oldest waiting review has waited
        already (a stalled queue shows there first)."""
        in_poller = len(self._inline) if work is Work.REVIEW else 0
        in_queue = len(self._queued[work])
        slots = self.limits.app_concurrency if work is Work.REVIEW else self.limits.large_review_concurrency
        estimate = (in_poller + in_queue / slots + 1) * self._estimates[work].seconds(now)
        return max(estimate, now - self._oldest(now, work))

    def _oldest(self, now: float, work: Work = Work.REVIEW) -> float:
        oldest = now
        if self._inline and work is Work.REVIEW:
            oldest = self._inline[0].queued_at
        queue = self._queued[work]
        if queue:
            oldest = min(oldest, queue[0].queued_at)
        return oldest

    def refusal(self, work: Work, timeout: str | None, now: float) -> str | None:
        """Why a request arriving now is refused at once ("full", "late", "busy"), or None.

        A review is refused only while other reviews wait: an idle server refuses nothing."""
        if work is Work.TOOL:
            return "busy" if len(self._queued[Work.TOOL]) >= self.limits.max_waiting_tools else None
        if work is not Work.REVIEW and work is not Work.LARGE_REVIEW:
            return None
        ahead = self.reviews_ahead(work)
        if not ahead:
            return None
        if ahead >= self.limits.max_waiting_requests:
            return "full"
        budget = deadline.budget_seconds(timeout, self.limits)
        if now - self._oldest(now, work) > budget:
            return "late"  # measured: the oldest waiting review has waited longer already
        if self.expected_wait(now, work) > budget:
            self._estimates[work].refused(now)  # predicted only: the prediction erodes with every refusal
            return "late"
        return None

    def reason(self, why: str, timeout: str | None) -> str:
        """The words of a refusal at the door."""
        if why == "full":
            return (f"gpushare-webhook is overloaded: {self.limits.max_waiting_requests} reviews are already "
                    "waiting to be evaluated (overload.max_waiting_requests), so this one was refused without "
                    "evaluation; the API server applies the webhook's failurePolicy")
        if why == "busy":
            return (f"gpushare-webhook is busy: {self.limits.max_waiting_tools} requests to its tools (dry runs, "
                    "explanations, the scheduler extender) are already waiting (overload.max_waiting_tools); "
                    "retry later")
        return ("gpushare-webhook is overloaded: this review would be answered after its deadline ("
                f"{deadline.describe(timeout, self.limits)}), so it was refused without evaluation; the API "
                "server applies the webhook's failurePolicy")

    def late_reason(self, waited: float, timeout: str | None) -> str:
        return (f"gpushare-webhook is overloaded: this review waited {waited:.2f} s to be evaluated and would be "
                f"answered after its deadline ({deadline.describe(timeout, self.limits)}), so it was refused "
                "without evaluation; the API server applies the webhook's failurePolicy")

    # -- placing what arrives

    def arrive(self, item: T, work: Work, timeout: str | None, now: float, *, inline: bool) -> Route:
        """Place a request that was not refused. ``inline``: a review the poller may evaluate
        itself (it arrived whole and small). Reviews keep their order: while one is with a thread
        or waiting for a slot, the next waits there too."""
        if work is Work.PROBE:
            self._probes.append(item)
            return Route.POLLER
        if work is Work.REVIEW and inline and self.limits.inline_admission and not self._queued[work] \
                and not self.reviews_in_threads():
            self._inline.append(Waiting(item, work, now, timeout, behind=bool(self._inline)))
            return Route.POLLER
        if not self._queued[work] and self._free[work]:
            self._take(work)
            return Route.THREAD
        self._queued[work].append(Waiting(item, work, now, timeout, behind=True))
        return Route.QUEUED

    def next_for_poller(self, now: float) -> tuple[T, Work, str | None] | None:
        """What the poller evaluates next: probes first, then its reviews in order; with the
        words of a refusal for a review whose wait behind others has used up its deadline."""
        if self._probes:
            return self._probes.popleft(), Work.PROBE, None
        if not self._inline:
            return None
        waiting = self._inline.popleft()
        return waiting.item, Work.REVIEW, self._late(waiting, now)

    def poller_has_work(self) -> bool:
        """Probes or reviews for the poller to evaluate (it then does not wait for its sockets)."""
        return bool(self._probes or self._inline)

    def _late(self, waiting: Waiting[T], now: float) -> str | None:
        waited = now - waiting.queued_at
        estimate = self._estimates[waiting.work].seconds(now)
        if waiting.behind and waited + estimate > deadline.budget_seconds(waiting.timeout, self.limits):
            return self.late_reason(waited, waiting.timeout)
        return None

    def grants(self, now: float) -> tuple[list[tuple[T, Work]], list[Refusal[T]]]:
        """Queued requests whose turn has come, each now holding a slot; and the queued reviews
        refused instead because their wait has used up their deadline (they hold none)."""
        started: list[tuple[T, Work]] = []
        refused: list[Refusal[T]] = []
        for work, queue in self._queued.items():
            while queue and self._free[work]:
                waiting = queue.popleft()
                why = self._late(waiting, now) if work in self._estimates else None
                if why is not None:
                    refused.append(Refusal(waiting.item, why))
                    continue
                self._take(work)
                started.append((waiting.item, work))
        return started, refused

    def withdraw(self, item: T) -> bool:
        """Take ``item`` out of its queue if it is still waiting for a slot (its wait outlived
        its deadline where nothing else would answer it: ``webhook.server.scheduling_middleware``)."""
        for queue in self._queued.values():
            for waiting in queue:
                if waiting.item is item:
                    queue.remove(waiting)
                    return True
        return False

    def _take(self, work: Work) -> None:
        self._free[work] -= 1
        self.evaluating += work is not Work.SCRAPE  # a scrape holds a slot of its own, not an evaluation slot

    def evaluating_in_poller(self, running: bool) -> None:
        """The poller starts (True) or ends (False) evaluating one of its reviews."""
        self.evaluating += 1 if running else -1

    def finished(self, work: Work, seconds: float, now: float, *, in_thread: bool) -> None:
        """An evaluation ended after ``seconds``: its slot is free again; a review's time feeds
        the estimate (probes, scrapes and tools never do)."""
        if in_thread and work in self._free:
            self._free[work] += 1
            self.evaluating -= work is not Work.SCRAPE
        lane = self._estimates.get(work)
        if lane is not None:
            lane.observe(seconds, now)
