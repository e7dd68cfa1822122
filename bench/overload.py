"""Benchmark: the real `gpushare serve` at twice its saturation rate.

    python bench/overload.py [--rounds 7] [--seconds 5] [--factor 2] [--connections 900] [--warm N]
                             [--client netpoll|threads] [--tool auto|c|python] [--max-idle N]

1. Saturation: a closed-loop client (32 keep-alive connections, each sending its next request
   as soon as the last is answered) POSTs a realistic 4 KB Pod review to /validate for a few
   seconds; the rate of 200s is the saturation rate S.
2. Overload: open-loop load at ``factor`` x S for ``seconds``: requests go out on schedule
   whether or not earlier ones were answered, over at most ``connections`` keep-alive
   connections (the API server opens one per concurrent webhook call).

Prints answered/total (an answer is any HTTP response within 10 s, the typical webhook
timeout: a 200 review or a 503 "overloaded" refusal), p50/p99/max latency from each
request's scheduled time, goodput against S and the server's peak RSS. Targets: 100 % answered,
max < 5 s, goodput >= 90 % of S.
The load comes from a C client when a C compiler and OpenSSL headers are present (server
pinned to CPU 0, client to CPU 1), else from the slower Python client, unpinned. The default C
client, bench/netpoll.c, waits on all its connections from one thread with epoll, as the API
server does (a Go program: a goroutine reading a connection is parked on the runtime's network
poller, and one thread collects every connection that became readable). ``--client threads``
uses bench/openloop.c, a blocking thread per connection: every answer the server writes then
wakes a sleeping thread on the other core, which on a loopback connection the server pays for
in its write (about twice the CPU per refusal, measured).

``--max-idle 25`` makes the netpoll client keep and dial connections in the overload windows as
kube-apiserver does (client-go keeps at most 25 idle connections per webhook host and dials for
the rest; every dial is a TLS handshake for the server).

The host's speed drifts by tens of percent within a minute, so the overload runs in windows,
each at ``factor`` x the S measured just before it and followed by another saturation run;
each window's goodput (verdicts per second over the window, its tail included) is set against
the mean of the S before and after it. The figure judged is the pooled goodput: all windows'
verdicts over all their time against the mean of every S (the median of the windows is printed
too; a ratio per window divides by one noisy S, which lifts it slightly).
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import openloop  # noqa: E402
from bench.admission import realistic_review_body  # noqa: E402
from tests.support.processes import cpu_seconds, https_server, rss_mib, serve_on_loopback  # noqa: E402
from webhook.settings import load_settings  # noqa: E402


class PeakRss:
    """Samples the server's resident memory every 100 ms in a background thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, rss_mib(self.pid))

    def __enter__(self) -> PeakRss:
        self.peak = rss_mib(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def scrape(url: str, ca: Path) -> dict[str, float]:
    """From the server's /metrics: requests by outcome, and queue-wait histogram buckets (le=...)."""
    from prometheus_client.parser import text_string_to_metric_families

    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(url + "/metrics", context=context, timeout=10) as reply:
        text = reply.read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpushare_admission_requests_total":
                outcome = sample.labels["outcome"]
                totals[outcome] = totals.get(outcome, 0) + sample.value
            elif sample.name in ("gpushare_connections_evicted_total", "gpushare_client_timeouts_total"):
                key = sample.name.split("_")[2] + ":" + next(iter(sample.labels.values()), "")
                totals[key] = totals.get(key, 0) + sample.value
            elif sample.name == "gpushare_queue_wait_seconds_bucket":
                totals["le=" + sample.labels["le"]] = sample.value
    return totals


def host_idle_note() -> str:
    """How this host's idle CPUs wait (Linux cpuidle), which moves the figures by a few points: on
    loopback every answer the server writes wakes the client's CPU (docs/operations.md, "Overload")."""
    cpuidle = Path("/sys/devices/system/cpu/cpuidle/current_driver")
    halt_poll = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    try:
        note = f"host: cpuidle driver {cpuidle.read_text().strip()}"
    except OSError:
        return "host: cpuidle not reported"
    try:
        return note + f", guest halt-polling {int(halt_poll.read_text())} ns"
    except (OSError, ValueError):
        return note


def queue_wait_summary(delta: dict[str, float]) -> str:
    """How long requests waited for a server thread during the run, from the histogram's buckets."""
    total = delta.get("le=+Inf", 0)
    if not total:
        return "no requests"
    shown = [(k[3:], v) for k, v in delta.items() if k.startswith("le=") and k[3:] in ("0.01", "0.1", "1.0", "2.5")]
    return ", ".join(f"<= {le} s: {100 * v / total:.1f} %" for le, v in shown)


def describe(summary: openloop.Summary, seconds: float) -> str:
    statuses = ", ".join(f"{code}: {count}" for code, count in sorted(summary.statuses.items()))
    share = 100 * summary.answered / max(summary.scheduled, 1)
    return (f"answered {summary.answered}/{summary.scheduled} ({share:.2f} %)"
            f"  [{statuses}]  unanswered {summary.unanswered}\n"
            f"    p50 {summary.p50 * 1000:.1f} ms  p99 {summary.p99 * 1000:.1f} ms  "
            f"max {summary.max * 1000:.1f} ms  ({summary.answered / seconds:.0f} answers/s, {summary.tool})")


@dataclass
class Round:
    """One overload window and the saturation rates measured just before and just after it."""

    overload: openloop.Summary
    rate_before: float
    rate_after: float
    cpu: float  # server CPU seconds from when the window's connections were open
    elapsed: float

    @property
    def capacity(self) -> float:
        return (self.rate_before + self.rate_after) / 2

    def goodput(self) -> float:
        """Verdicts per second over the window (its schedule and the tail of answers after it: the
        server is busy throughout), against S."""
        return self.overload.statuses.get(200, 0) / self.elapsed / self.capacity if self.capacity else 0.0


def pooled_goodput(rounds: list[Round]) -> float:
    """Every window's verdicts over every window's time, against the mean of every saturation run.
    A ratio per window divides by a noisy S, which lifts the mean and median of the ratios above
    the ratio of the means (by about the square of S's relative spread); pooled, the host's drift
    averages out in both terms instead."""
    if not rounds:
        return 0.0
    rates = [rounds[0].rate_before] + [r.rate_after for r in rounds]
    served = sum(r.overload.statuses.get(200, 0) for r in rounds)
    return served / sum(r.elapsed for r in rounds) / statistics.fmean(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5, help="length of each overload window")
    parser.add_argument("--rounds", type=int, default=7, help="overload windows, each between two saturation runs")
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=900)
    parser.add_argument("--warm", type=int, default=None,
                        help="connections opened before the clock starts (C client; default all)")
    parser.add_argument("--processes", type=int, default=2, help="client processes (Python client)")
    parser.add_argument("--saturation-seconds", type=float, default=3)
    parser.add_argument("--tool", choices=["auto", "c", "python"], default="auto")
    parser.add_argument("--client", choices=["netpoll", "threads"], default="netpoll",
                        help="C client: one epoll thread, as the API server's Go runtime (default), or a "
                             "blocking thread per connection")
    parser.add_argument("--max-idle", type=int, default=0,
                        help="netpoll client, overload windows: keep at most this many answered connections "
                             "open and dial new ones for the rest, as kube-apiserver does (its Go client keeps "
                             "25 idle per webhook host); default 0 keeps every connection open")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="C client: do not pin the server to CPU 0 and the client to CPU 1")
    args = parser.parse_args()
    binary = openloop.native_client(args.client) if args.tool in ("auto", "c") else None
    if args.tool == "c" and binary is None:
        raise SystemExit("the C client could not be built (needs cc and OpenSSL headers)")
    if args.max_idle and (binary is None or args.client != "netpoll"):
        raise SystemExit("--max-idle needs the netpoll C client (--client netpoll, cc and OpenSSL headers)")
    # The C client fits in one core, so server and client each get their own; the Python client
    # needs more than one core at 2x and runs unpinned (S is then measured under the same sharing).
    pin = args.pin and binary is not None
    payload = openloop.request_bytes("/validate", realistic_review_body())
    # Connections opened before each overload window (C client); with --max-idle, no more than the
    # API server's pool keeps, since the rest would be closed at once.
    window_warm = min(args.connections, args.connections if args.warm is None else args.warm,
                      args.max_idle or args.connections)

    def load(mode: str, seconds: float, connections: int, rate: float = 0,
             on_ready: Callable[[], None] | None = None) -> openloop.Summary:
        if binary is not None:
            warm = connections if mode == "closed" else window_warm
            return openloop.run_native(binary, mode, "127.0.0.1", port, str(ca), payload, rate=rate,
                                       seconds=seconds, connections=connections, warm=warm,
                                       cpu=1 if pin else None, on_ready=on_ready,
                                       max_idle=args.max_idle if mode == "open" else 0)
        return openloop.summarize(openloop.run(mode, args.processes, "127.0.0.1", port, str(ca), payload,
                                               rate=rate, seconds=seconds, connections=connections))

    with tempfile.TemporaryDirectory() as tmp:
        port, ca, command = serve_on_loopback(tmp, pin=pin)
        settings = load_settings()
        env_note = (f"(server: 1 gunicorn process, {settings.server.threads} threads, "
                    f"{settings.overload.app_concurrency} evaluating at once, deadline without ?timeout= "
                    f"{settings.overload.default_timeout_seconds:g} s, at most "
                    f"{settings.overload.max_waiting_requests} waiting{', pinned to CPU 0' if pin else ''})")
        with https_server(command, ca, port, Path(tmp, "server.log")) as server:
            url = f"https://localhost:{port}"
            load("closed", 1, 8)

            def saturation() -> tuple[float, openloop.Summary, float]:
                cpu_start = cpu_seconds(server.pid)
                summary = load("closed", args.saturation_seconds, 32)
                cpu = cpu_seconds(server.pid) - cpu_start
                return summary.statuses.get(200, 0) / args.saturation_seconds, summary, cpu

            rate, first, _ = saturation()
            print(f"saturation (closed loop, 32 connections, {args.saturation_seconds:g} s) {env_note}:")
            print("  " + describe(first, args.saturation_seconds))
            print(f"  -> saturation rate S = {rate:.0f} reviews/s")
            print(f"  {host_idle_note()}")
            before = scrape(url, ca)
            rounds: list[Round] = []
            saturation_cpu: list[tuple[float, float]] = []  # (CPU seconds, reviews) of each saturation run
            with PeakRss(server.pid) as rss:
                for _ in range(args.rounds):
                    # From when the connections are open (the C client says so): their TLS handshakes
                    # are not the load; the Python client opens them as it goes, so it counts them.
                    mark = {"cpu": cpu_seconds(server.pid), "at": time.monotonic()}

                    def ready(mark: dict[str, float] = mark) -> None:
                        mark.update(cpu=cpu_seconds(server.pid), at=time.monotonic())

                    overload = load("open", args.seconds, args.connections, rate * args.factor, on_ready=ready)
                    # From the first request's due time (the C clients start their clock a moment
                    # after "ready"; the Python client's mark is set before it starts).
                    elapsed = time.monotonic() - mark["at"] - (openloop.START_DELAY if binary is not None else 0.0)
                    cpu = cpu_seconds(server.pid) - mark["cpu"]
                    after_rate, summary, after_cpu = saturation()
                    saturation_cpu.append((after_cpu, summary.statuses.get(200, 0)))
                    rounds.append(Round(overload, rate, after_rate, cpu, elapsed))
                    rate = after_rate
            after = scrape(url, ca)
            log_tail = Path(tmp, "server.log").read_text(errors="replace").splitlines()[-3:]
    opened = f"{window_warm} opened before each window" if binary is not None else "opened on demand"
    if args.max_idle:
        opened += f", at most {args.max_idle} kept open when idle"
    print(f"\noverload: {args.rounds} windows of {args.seconds:g} s, each open loop at {args.factor:g} x the S "
          f"measured just before it, at most {args.connections} connections ({opened}), with a "
          f"{args.saturation_seconds:g} s saturation run after each; goodput against the mean of the S before "
          "and after (the host's speed drifts by tens of percent within a minute):")
    for i, r in enumerate(rounds, 1):
        served, refused = r.overload.statuses.get(200, 0), r.overload.statuses.get(503, 0)
        print(f"  window {i}: S {r.rate_before:.0f} -> {r.rate_after:.0f}/s; {served} reviews + {refused} refusals, "
              f"answered {100 * r.overload.answered / max(r.overload.scheduled, 1):.2f} %, "
              f"max {r.overload.max * 1000:.0f} ms; {r.overload.dials} connections dialled; "
              f"{r.elapsed:.2f} s, server CPU "
              f"{100 * r.cpu / r.elapsed:.0f} % busy; goodput {100 * r.goodput():.0f} % of S")
    total = openloop.Summary(
        sum(r.overload.scheduled for r in rounds), sum(r.overload.answered for r in rounds),
        sum(r.overload.unanswered for r in rounds),
        {code: sum(r.overload.statuses.get(code, 0) for r in rounds)
         for code in sorted({c for r in rounds for c in r.overload.statuses})},
        statistics.median(r.overload.p50 for r in rounds), max(r.overload.p99 for r in rounds),
        max(r.overload.max for r in rounds), rounds[0].overload.tool)
    print("  all windows: " + describe(total, sum(r.elapsed for r in rounds)).replace("p50", "median p50", 1)
          .replace("p99", "worst p99", 1))
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    outcomes = {k: v for k, v in delta.items() if not k.startswith("le=")}
    print(f"  server outcomes during the windows and saturation runs (from /metrics): {json.dumps(outcomes)}")
    print(f"  server queue wait (from /metrics): {queue_wait_summary(delta)}")
    print(f"  server peak RSS {rss.peak:.1f} MiB")
    goodputs = sorted(r.goodput() for r in rounds)
    median = statistics.median(goodputs)
    pooled = pooled_goodput(rounds)
    print(f"  goodput (reviews answered with a verdict per second, against S): median {100 * median:.0f} %, "
          f"windows {', '.join(f'{100 * g:.0f}' for g in goodputs)} %; pooled {100 * pooled:.1f} % "
          "(all windows' verdicts over all their time, against the mean of every S)")
    # Server CPU: per review from the saturation runs, the rest of each window's CPU per refusal.
    per_review = sum(c for c, _ in saturation_cpu) / max(sum(n for _, n in saturation_cpu), 1)
    served, refused = total.statuses.get(200, 0), total.statuses.get(503, 0)
    cpu_overload = sum(r.cpu for r in rounds)
    per_refusal = (cpu_overload - served * per_review) / max(refused, 1)
    print(f"  server CPU: {per_review * 1e6:.0f} us per review at saturation; during the windows "
          f"{cpu_overload:.1f} s for {served} reviews + {refused} refusals -> about {per_refusal * 1e6:.0f} us "
          "per refusal (the host's speed drifts, so this is rough)")
    answered_all = total.answered == total.scheduled
    print(f"\ntarget: 100 % answered -> {'met' if answered_all else 'NOT met'}; "
          f"max latency < 5 s -> {'met' if total.max < 5 else 'NOT met'} ({total.max:.2f} s); "
          f"goodput >= 90 % of S -> {'met' if pooled >= 0.9 else 'NOT met'} (pooled {100 * pooled:.1f} %)")
    print("server log tail:\n  " + "\n  ".join(line[:200] for line in log_tail))


if __name__ == "__main__":
    main()
