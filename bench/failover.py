"""Failover time of the binding leader with the standard timings (lease 15 s, renew deadline
10 s, retry 2 s): two real `gpushare serve --kubeconfig` replicas against the test API server;
the leader is SIGKILLed (master and worker, as a container dies), the time until the other
holds the Lease and carries the routing label is measured, and the killed replica is started
again as a follower. Run: python -m bench.failover [--kills 10]. It takes minutes.

Expect about 13-22 s: a follower counts the lease duration from when it last saw a renewal
(up to one retry period, jittered, before the kill) and notices expiry at its next poll."""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from tests.support.fake_apiserver import FakeApiServer
from tests.support.helpers import gpushare_server
from tests.support.processes import children

NS = "gpushare-system"
LABEL = "gpushare.io/binding-leader"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/gpushare-webhook-bindings"


def _labels(api: FakeApiServer, pod: str) -> dict[str, str]:
    return ((api.get(f"/api/v1/namespaces/{NS}/pods/{pod}") or {}).get("metadata") or {}).get("labels") or {}


def leader(api: FakeApiServer) -> str:
    """The replica that holds the Lease and is the only one labelled, or ""."""
    holder = ((api.get(LEASE) or {}).get("spec") or {}).get("holderIdentity") or ""
    marked = [p for p in ("replica-a", "replica-b") if _labels(api, p).get(LABEL) == "true"]
    return marked[0] if len(marked) == 1 and holder.startswith(marked[0] + "_") else ""


def wait_for(probe, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.05)  # poll pacing under a deadline
    raise TimeoutError("no leader within the deadline")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    api = FakeApiServer().start()
    for name in ("replica-a", "replica-b"):
        labels = {"app.kubernetes.io/name": "gpushare-webhook"}
        api.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels},
                 "spec": {"containers": [{"name": "webhook"}]}})
    work = Path(tempfile.mkdtemp(prefix="gpushare-failover-"))
    kubeconfig = str(api.kubeconfig(work / "kubeconfig"))
    env_base = {"GPUSHARE_LEADER__NAMESPACE": NS, "GPUSHARE_AUDIT__INTERVAL_SECONDS": "0",
                "GPUSHARE_LOGGING__REQUESTS": "false"}
    stacks: dict[str, ExitStack] = {}
    servers = {}

    def start(name: str, round_: int) -> None:
        workdir = work / f"{name}-{round_}"
        workdir.mkdir()
        stack = ExitStack()
        servers[name] = stack.enter_context(gpushare_server(
            workdir, "--kubeconfig", kubeconfig, ready_path="/readyz",
            env={**env_base, "GPUSHARE_LEADER__POD_NAME": name}))
        stacks[name] = stack

    times: list[float] = []
    try:
        start("replica-a", 0)
        start("replica-b", 0)
        current = wait_for(lambda: leader(api), 60)
        for kill in range(1, args.kills + 1):
            other = "replica-b" if current == "replica-a" else "replica-a"
            victim = servers[current]
            killed_at = time.monotonic()
            for pid in [*children(victim.process.pid), victim.process.pid]:
                os.kill(pid, signal.SIGKILL)
            new = wait_for(lambda other=other: leader(api) == other and other, 60)
            took = time.monotonic() - killed_at
            times.append(took)
            print(f"kill {kill:2d}: {current} killed, {new} leads after {took:5.1f} s", flush=True)
            stacks.pop(current).close()
            start(current, kill)  # back as a follower
            current = new
    finally:
        for stack in stacks.values():
            stack.close()
        api.stop()
    print(f"failover over {len(times)} kills (lease 15 s, renew deadline 10 s, retry 2 s): "
          f"min {min(times):.1f} s, median {statistics.median(times):.1f} s, max {max(times):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
