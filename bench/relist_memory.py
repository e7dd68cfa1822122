"""Leak or high water? The live state's Python memory against its RSS over many relists.

    python bench/relist_memory.py [--relists 25] [--nodes 1000] [--pods 10000]

The soak's cluster (bench/soak.py) in the test API server; this process runs the real
``LiveClusterState`` against it, with ``tracemalloc`` on, and expires the watches ``--relists``
times (each a full paged relist of nodes and pods). After each relist it prints the memory Python
objects hold (traced) and the process's RSS: a leak grows the traced figure; allocator high water
grows RSS while the traced figure stays flat. At the end, the lines whose traced memory grew most
since the first sync.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.soak import build_cluster  # noqa: E402
from tests.support.fake_apiserver import FakeApiServer  # noqa: E402


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--relists", type=int, default=25)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    args = parser.parse_args()
    from webhook.settings import Settings
    from webhook.state.live import LiveClusterState, core_api

    _model, nodes, pods = build_cluster(args, random.Random(1))
    api = FakeApiServer().start()
    api.add_raw(("/api/v1", "nodes"), "Node", "v1",
                [(("", n["metadata"]["name"]), json.dumps(n).encode()) for n in nodes])
    api.add_raw(("/api/v1", "pods"), "Pod", "v1",
                [((p["metadata"]["namespace"], p["metadata"]["name"]), json.dumps(p).encode()) for p in pods])
    client, _ = core_api(api.kubeconfig(Path(tempfile.mkdtemp(prefix="gpushare-relist-")) / "kubeconfig"))
    settings = Settings()
    live = LiveClusterState(client, settings.names, settings.state)
    tracemalloc.start(10)
    live.start()
    if not live.wait_synced(300):
        raise TimeoutError("the first lists did not complete")
    first = tracemalloc.take_snapshot()
    print(f"synced: traced {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB, RSS {rss_mib():.1f} MiB", flush=True)
    for i in range(1, args.relists + 1):
        deadline = time.monotonic() + 120
        while api.open_watches() < len(live.reflectors):  # every watch open, or one would not expire
            if time.monotonic() > deadline:
                raise TimeoutError(f"the watches did not open before relist {i}")
            time.sleep(0.05)  # poll pacing under a deadline
        lists = live.pods_reflector.lists, live.nodes_reflector.lists
        api.expire_watches()
        while live.pods_reflector.lists <= lists[0] or live.nodes_reflector.lists <= lists[1] or \
                not all(r.connected for r in live.placement_reflectors):
            if time.monotonic() > deadline:
                raise TimeoutError(f"relist {i} did not complete")
            time.sleep(0.05)  # poll pacing under a deadline
        traced, peak = tracemalloc.get_traced_memory()
        print(f"relist {i:3d}: traced {traced / 2**20:5.1f} MiB (peak {peak / 2**20:5.1f}), RSS {rss_mib():6.1f} MiB",
              flush=True)
    print("grew most since the first sync:")
    for stat in tracemalloc.take_snapshot().compare_to(first, "lineno")[:8]:
        print(f"  {stat}")
    live.stop()
    api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
