"""Benchmark: the GPU allocation series at 5,000 nodes x 8 cards, and what they cost admission.

    python bench/gpu_metrics.py [--nodes 5000] [--cards 8] [--seconds 3] [--rounds 4]

1. In process: a full refresh of the cache, an incremental refresh after 100 pod changes, and
   rendering a scrape (a copy of the cached text), per node (default) and per card (all).
2. Real servers on a snapshot of that cluster: an HTTPS scrape of /metrics (median of 10) with
   per-card series on, and server CPU per /validate review with the series exported and with
   metrics.export_allocation=false (rounds alternate the order; medians are the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.admission import review_for  # noqa: E402
from bench.loadgen import drive  # noqa: E402
from certs.issue import ensure_serving_certs  # noqa: E402
from tests.support.processes import cpu_seconds, free_port, https_server  # noqa: E402
from webhook.http.allocation_metrics import AllocationExporter  # noqa: E402
from webhook.settings import MetricsSettings, Settings  # noqa: E402
from webhook.state.snapshot import snapshot_from_objects  # noqa: E402


def cluster(nodes: int, cards: int) -> list[dict]:
    """Nodes of ``cards`` 16 GiB cards, half of them core_mem, each with three pods placed on cards."""
    items: list[dict] = []
    for n in range(nodes):
        name = f"gpu-{n:05d}"
        mode = "core_mem" if n % 2 else "cgpu"
        items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "ack.node.gpu.schedule": mode, "aliyun.accelerator/nvidia_name": "Tesla-V100-SXM2-16GB"}},
            "status": {"addresses": [{"type": "InternalIP", "address": f"10.{n // 250}.{n % 250}.1"}],
                       "allocatable": {"aliyun.com/gpu-count": str(cards), "aliyun.com/gpu-mem": str(16 * cards)}}})
        for p in range(3):
            limits = {"aliyun.com/gpu-mem": "4"}
            annotations = {"scheduler.framework.gpushare.allocation": json.dumps({"0": {str(p % cards): 4}})}
            if mode == "core_mem":
                limits["aliyun.com/gpu-core.percentage"] = "30"
            items.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{name}-p{p}", "namespace": "default", "annotations": annotations},
                "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {"limits": limits}}]},
                "status": {"phase": "Running"}})
    return items


def in_process(items: list[dict]) -> None:
    names = Settings().names
    for per_card in ("none", "all"):
        state = snapshot_from_objects(items, names)
        exporter = AllocationExporter(state, names, MetricsSettings(per_card=per_card))
        started = time.perf_counter()
        exporter.refresh()
        full = time.perf_counter() - started
        pods = [p for p in state.pods()][:100]
        for pod in pods:
            state.upsert_pod(pod)
        started = time.perf_counter()
        exporter.refresh()
        incremental = time.perf_counter() - started
        scrapes = []
        for _ in range(20):
            started = time.perf_counter()
            text = exporter.exposition()
            scrapes.append(time.perf_counter() - started)
        print(f"per_card={per_card:4}: {exporter.series:7d} series, {len(text) / 1e6:5.1f} MB; full refresh "
              f"{full * 1000:7.1f} ms, refresh after 100 pod changes {incremental * 1000:6.1f} ms, "
              f"scrape render {statistics.median(scrapes) * 1e6:7.1f} us (median of 20)", flush=True)


def scrape_seconds(url: str, ca: Path) -> tuple[float, int]:
    context = ssl.create_default_context(cafile=str(ca))
    times, size = [], 0
    for _ in range(10):
        started = time.perf_counter()
        with urllib.request.urlopen(url, context=context, timeout=60) as reply:
            size = len(reply.read())
        times.append(time.perf_counter() - started)
    return statistics.median(times), size


def servers(items: list[dict], args: argparse.Namespace) -> None:
    pod = json.loads((ROOT / "tests" / "data" / "pod-realistic.json").read_text())
    review = review_for(pod)
    gpushare = Path(sys.executable).parent / "gpushare"
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        certs = Path(tmp, "certs")
        ensure_serving_certs(certs, ["localhost", "127.0.0.1"])
        ca = certs / "ca.crt"
        snapshot = Path(tmp, "cluster.json")
        snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        ports, pids = {}, {}
        for name, env in (("with", {"GPUSHARE_METRICS__PER_CARD": "all"}),
                          ("without", {"GPUSHARE_METRICS__EXPORT_ALLOCATION": "false"})):
            ports[name] = free_port()
            os.environ.update(env)
            command = [str(gpushare), "serve", "--host", "127.0.0.1", "--port", str(ports[name]),
                       "--cert-dir", str(certs), "--snapshot", str(snapshot)]
            pids[name] = stack.enter_context(https_server(command, ca, ports[name], Path(tmp, f"{name}.log"),
                                                          timeout=300)).pid
            for variable in env:
                del os.environ[variable]
        url = f"https://localhost:{ports['with']}/metrics"
        deadline = time.monotonic() + 120
        while b"gpushare_gpu_memory_total_gib{" not in urllib.request.urlopen(
                url, context=ssl.create_default_context(cafile=str(ca)), timeout=60).read():
            if time.monotonic() > deadline:
                raise RuntimeError("the allocation series never appeared")
            time.sleep(0.5)  # pacing a poll with a deadline
        seconds, size = scrape_seconds(url, ca)
        print(f"HTTPS scrape of /metrics, per-card series on: {size / 1e6:.1f} MB in {seconds * 1000:.0f} ms "
              "(median of 10)", flush=True)
        cpu: dict[str, list[float]] = {"with": [], "without": []}
        for round_no in range(1, args.rounds + 1):
            for name in ("with", "without") if round_no % 2 else ("without", "with"):
                target = f"https://localhost:{ports[name]}/validate"
                if round_no == 1:
                    drive(target, str(ca), review, 4, 1)
                before = cpu_seconds(pids[name])
                result = drive(target, str(ca), review, 1, args.seconds)
                cpu_us = (cpu_seconds(pids[name]) - before) / max(result.requests, 1) * 1e6
                cpu[name].append(cpu_us)
                print(f"round {round_no} {name:7} allocation series: {result.rps:7.1f} req/s, server CPU "
                      f"{cpu_us:6.0f} us/review", flush=True)
        print(f"server CPU per /validate review, median: with the series {statistics.median(cpu['with']):.0f} us, "
              f"without {statistics.median(cpu['without']):.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--cards", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--skip-servers", action="store_true")
    args = parser.parse_args()
    items = cluster(args.nodes, args.cards)
    print(f"cluster: {args.nodes} nodes x {args.cards} cards, {3 * args.nodes} GPU pods", flush=True)
    in_process(items)
    if not args.skip_servers:
        servers(items, args)


if __name__ == "__main__":
    main()
