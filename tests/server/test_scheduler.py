"""The scheduler's decisions, without sockets: classes, slots, refusals and the review-time estimate."""

from __future__ import annotations

import pytest

from policies.admission.engine import Engine
from webhook.http.routing import route_table
from webhook.routes.app import create_app
from webhook.routes.services import Services
from webhook.server.scheduling import ReviewTime, Route, Scheduler, Work
from webhook.settings import OverloadSettings, Settings
from webhook.state.snapshot import load_demo_snapshot

# timeout=1s leaves 1 - 0.5 (rounding) - 0.25 (answer margin) = 0.25 s to answer a review.
SHORT = "1s"


def _scheduler(**limits: object) -> Scheduler[str]:
    return Scheduler(OverloadSettings(**limits))


def test_routes_declare_their_class_and_anything_else_is_a_probe():
    settings = Settings()
    routes = route_table(create_app(Services(settings, Engine(settings), load_demo_snapshot(settings.names))))
    work_of = routes.work_of  # the table the routes declare in, handed to the worker with the app
    routes.declare("/test-review", Work.REVIEW, ["POST"])
    assert work_of("POST", "/test-review") is Work.REVIEW
    assert work_of("GET", "/test-review") is Work.PROBE  # a 405: costs nothing
    assert work_of("GET", "/nowhere") is Work.PROBE  # a 404
    assert work_of("GET", "/metrics") is Work.SCRAPE  # declared by its route (webhook.routes.ops)
    assert work_of("GET", "/healthz") is Work.PROBE
    assert work_of("POST", "/dry-run") is Work.TOOL
    assert work_of("POST", "/validate") is Work.REVIEW and work_of("POST", "/mutate") is Work.REVIEW
    assert work_of("POST", "/scheduler/filter") is Work.TOOL and work_of("GET", "/explain") is Work.TOOL


def test_probes_and_scrapes_take_no_slot_and_are_never_refused():
    scheduler = _scheduler(app_concurrency=1, max_waiting_requests=1)
    assert scheduler.arrive("a", Work.REVIEW, None, 0.0, inline=False) is Route.THREAD  # the only slot
    assert scheduler.arrive("b", Work.REVIEW, None, 0.0, inline=False) is Route.QUEUED
    for work in (Work.PROBE, Work.SCRAPE):
        assert scheduler.refusal(work, SHORT, 10.0) is None
    assert scheduler.arrive("probe", Work.PROBE, None, 10.0, inline=False) is Route.POLLER
    assert scheduler.arrive("scrape", Work.SCRAPE, None, 10.0, inline=False) is Route.THREAD
    assert scheduler.next_for_poller(10.0) == ("probe", Work.PROBE, None)
    assert scheduler.evaluating == 1 and scheduler.waiting() == 1  # the probe and the scrape count nowhere


def test_probes_go_before_the_reviews_the_poller_evaluates():
    scheduler = _scheduler()
    assert scheduler.arrive("review", Work.REVIEW, None, 0.0, inline=True) is Route.POLLER
    scheduler.arrive("probe", Work.PROBE, None, 0.0, inline=False)
    assert [scheduler.next_for_poller(0.0)[0], scheduler.next_for_poller(0.0)[0]] == ["probe", "review"]


def test_only_a_review_evaluation_feeds_the_estimate():
    scheduler = _scheduler(app_concurrency=1, auxiliary_concurrency=1)
    for work in (Work.PROBE, Work.SCRAPE, Work.TOOL):
        scheduler.finished(work, 5.0, 0.0, in_thread=False)
    assert scheduler.estimate.seconds(0.0) == 0.0
    scheduler.finished(Work.REVIEW, 0.64, 0.0, in_thread=False)
    assert scheduler.estimate.seconds(0.0) == pytest.approx(0.01)


def test_a_slot_is_free_again_when_its_evaluation_ends_and_the_next_review_gets_it():
    scheduler = _scheduler(app_concurrency=1)
    scheduler.arrive("a", Work.REVIEW, None, 0.0, inline=False)
    scheduler.arrive("b", Work.REVIEW, "10s", 0.0, inline=True)  # behind one in a thread: queued, in order
    assert scheduler.grants(0.1) == ([], [])
    scheduler.finished(Work.REVIEW, 0.1, 0.1, in_thread=True)
    assert scheduler.grants(0.1) == ([("b", Work.REVIEW)], [])
    assert scheduler.evaluating == 1


def test_a_queued_review_whose_wait_used_its_deadline_is_refused_without_a_slot():
    scheduler = _scheduler(app_concurrency=1)
    scheduler.arrive("a", Work.REVIEW, None, 0.0, inline=False)
    scheduler.arrive("b", Work.REVIEW, SHORT, 0.0, inline=False)
    scheduler.finished(Work.REVIEW, 0.5, 0.5, in_thread=True)
    started, refused = scheduler.grants(0.5)
    assert started == [] and [r.item for r in refused] == ["b"]
    assert "this review waited 0.50 s" in refused[0].reason and "timeout=1s" in refused[0].reason
    assert scheduler.evaluating == 0


def test_the_shed_latch_clears_an_idle_server_refuses_nothing():
    """After a burst of costly reviews the estimate is far above a short deadline; once nothing is
    waiting, the next review is evaluated all the same (and measured), not refused."""
    scheduler = _scheduler(app_concurrency=1)
    for _ in range(64):
        scheduler.finished(Work.REVIEW, 4.0, 0.0, in_thread=False)
    assert scheduler.estimate.seconds(0.0) > 2.0
    assert scheduler.refusal(Work.REVIEW, SHORT, 0.0) is None
    assert scheduler.arrive("next", Work.REVIEW, SHORT, 0.0, inline=True) is Route.POLLER
    assert scheduler.next_for_poller(0.0) == ("next", Work.REVIEW, None)


def test_the_estimate_decays_with_wall_time_and_with_each_refusal_it_decided():
    estimate = ReviewTime(half_life=1.0)
    estimate.observe(6.4, 0.0)
    assert estimate.seconds(0.0) == pytest.approx(0.1)
    assert estimate.seconds(2.0) == pytest.approx(0.025)  # two half-lives without a measurement
    estimate.refused(2.0)
    assert estimate.seconds(2.0) == pytest.approx(0.025 * 63 / 64)
    scheduler = _scheduler(app_concurrency=1, estimate_half_life_seconds=60)
    for _ in range(64):
        scheduler.finished(Work.REVIEW, 1.0, 0.0, in_thread=False)
    scheduler.arrive("a", Work.REVIEW, None, 0.0, inline=True)  # something ahead: refusals are possible
    before = scheduler.estimate.seconds(0.0)
    assert scheduler.refusal(Work.REVIEW, SHORT, 0.0) == "late"  # predicted: (1 + 1) x estimate > 0.25 s
    assert scheduler.estimate.seconds(0.0) == pytest.approx(before * 63 / 64)
    refusals = 0
    while scheduler.refusal(Work.REVIEW, SHORT, 0.0) == "late":
        refusals += 1
    assert 0 < refusals < 200  # the prediction erodes until a review is let through and measured


def test_a_measured_wait_refuses_without_eroding_the_estimate():
    scheduler = _scheduler(app_concurrency=1)
    scheduler.finished(Work.REVIEW, 0.001, 0.0, in_thread=False)
    scheduler.arrive("a", Work.REVIEW, None, 0.0, inline=True)
    before = scheduler.estimate.seconds(1.0)
    assert scheduler.refusal(Work.REVIEW, SHORT, 1.0) == "late"  # the review ahead has waited 1 s already
    assert scheduler.estimate.seconds(1.0) == before


def test_the_waiting_room_and_the_tools_queue_are_bounded():
    scheduler = _scheduler(app_concurrency=1, auxiliary_concurrency=1, max_waiting_requests=2, max_waiting_tools=1)
    scheduler.arrive("a", Work.REVIEW, None, 0.0, inline=False)
    scheduler.arrive("b", Work.REVIEW, None, 0.0, inline=False)
    scheduler.arrive("c", Work.REVIEW, None, 0.0, inline=False)
    assert scheduler.refusal(Work.REVIEW, "30s", 0.0) == "full"
    scheduler.arrive("t1", Work.TOOL, None, 0.0, inline=False)
    assert scheduler.refusal(Work.TOOL, None, 0.0) is None
    scheduler.arrive("t2", Work.TOOL, None, 0.0, inline=False)
    assert scheduler.refusal(Work.TOOL, None, 0.0) == "busy"
    assert "overload.max_waiting_tools" in scheduler.reason("busy", None)


def test_the_poller_hands_reviews_to_a_thread_while_one_is_there_and_takes_them_back_after():
    """Inline/thread hand-over: a review over overload.inline_max_bytes goes to a thread; small
    reviews after it wait for a slot behind it (in order), never to the poller meanwhile; once
    no review is with a thread, the poller evaluates small ones itself again."""
    scheduler = _scheduler(app_concurrency=1)
    assert scheduler.arrive("small-1", Work.REVIEW, None, 0.0, inline=True) is Route.POLLER
    assert scheduler.arrive("large", Work.REVIEW, None, 0.0, inline=False) is Route.THREAD
    assert scheduler.next_for_poller(0.0) == ("small-1", Work.REVIEW, None)  # already the poller's
    assert scheduler.arrive("small-2", Work.REVIEW, None, 0.1, inline=True) is Route.QUEUED
    assert scheduler.arrive("small-3", Work.REVIEW, None, 0.1, inline=True) is Route.QUEUED
    assert scheduler.next_for_poller(0.1) is None
    assert scheduler.reviews_in_threads() == 1 and scheduler.waiting() == 2
    scheduler.finished(Work.REVIEW, 0.2, 0.2, in_thread=True)
    assert scheduler.grants(0.2) == ([("small-2", Work.REVIEW)], [])  # in order, each in the slot
    assert scheduler.arrive("small-4", Work.REVIEW, None, 0.2, inline=True) is Route.QUEUED  # small-3 is ahead
    scheduler.finished(Work.REVIEW, 0.01, 0.21, in_thread=True)
    assert scheduler.grants(0.21) == ([("small-3", Work.REVIEW)], [])
    scheduler.finished(Work.REVIEW, 0.01, 0.22, in_thread=True)
    assert scheduler.grants(0.22) == ([("small-4", Work.REVIEW)], [])
    scheduler.finished(Work.REVIEW, 0.01, 0.23, in_thread=True)
    assert scheduler.grants(0.23) == ([], []) and not scheduler.busy()
    assert scheduler.arrive("small-5", Work.REVIEW, None, 0.3, inline=True) is Route.POLLER  # the poller's again


def test_without_inline_admission_every_review_takes_a_slot_on_a_thread():
    """overload.inline_admission: false: the poller evaluates no review, however small; probes stay its own."""
    scheduler = _scheduler(app_concurrency=2, inline_admission=False)
    assert scheduler.arrive("a", Work.REVIEW, None, 0.0, inline=True) is Route.THREAD
    assert scheduler.arrive("b", Work.REVIEW, None, 0.0, inline=True) is Route.THREAD
    assert scheduler.arrive("c", Work.REVIEW, None, 0.0, inline=True) is Route.QUEUED
    assert scheduler.arrive("probe", Work.PROBE, None, 0.0, inline=False) is Route.POLLER
    assert scheduler.next_for_poller(0.0) == ("probe", Work.PROBE, None)
    assert scheduler.next_for_poller(0.0) is None
    assert scheduler.evaluating == 2 and scheduler.waiting() == 1
    scheduler.finished(Work.REVIEW, 0.1, 0.1, in_thread=True)
    assert scheduler.grants(0.1) == ([("c", Work.REVIEW)], [])


def test_a_withdrawn_request_leaves_its_queue_and_is_never_granted():
    scheduler = _scheduler(app_concurrency=1)
    scheduler.arrive("a", Work.REVIEW, None, 0.0, inline=False)
    scheduler.arrive("b", Work.REVIEW, None, 0.0, inline=False)
    scheduler.arrive("c", Work.REVIEW, None, 0.0, inline=False)
    assert scheduler.withdraw("b") is True and scheduler.withdraw("b") is False
    assert scheduler.withdraw("a") is False  # holding the slot: not waiting
    scheduler.finished(Work.REVIEW, 0.1, 0.1, in_thread=True)
    assert scheduler.grants(0.1) == ([("c", Work.REVIEW)], []) and scheduler.waiting() == 0
