"""The telemetry queue: request threads append, one thread (or a scrape, or exit) runs the calls."""

from __future__ import annotations

import threading

from tests.support.helpers import wait_until
from webhook.http.telemetry import Telemetry


def test_calls_run_in_order_in_the_background_and_after_flush_sees_them():
    seen: list[int] = []
    flushed: list[int] = []
    telemetry = Telemetry(interval=0.01)
    telemetry.after_flush(lambda: flushed.append(len(seen)))
    for i in range(100):
        telemetry.call(seen.append, i)
    wait_until(lambda: len(seen) == 100, what="the telemetry thread to run the calls")
    assert seen == list(range(100))
    wait_until(lambda: flushed and flushed[-1] == 100, what="an after-flush hook after the calls")
    telemetry.close()


def test_flush_runs_everything_pending_at_once_and_a_failing_call_stops_nothing():
    seen: list[str] = []
    telemetry = Telemetry(interval=3600)  # the thread never gets there first
    telemetry.call(seen.append, "a")
    telemetry.call(lambda: 1 / 0)
    telemetry.call(seen.append, "b")
    telemetry.flush()
    assert seen == ["a", "b"]
    telemetry.close()


def test_many_threads_lose_nothing():
    counted: list[int] = []
    telemetry = Telemetry(interval=3600, wake_at=50)

    def produce() -> None:
        for _ in range(1000):
            telemetry.call(counted.append, 1)

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    telemetry.close()
    assert len(counted) == 8000
