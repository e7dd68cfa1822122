"""Benchmark: the live state loading a large cluster through list + watch.

    python bench/state.py [--nodes 5000] [--pods 150000] [--gpu-share 0.33] [--via list|watch|both] [--env 0]

A fake API server (tests/support/fake_apiserver.py) runs in a child process holding the cluster:
realistic Nodes and ~4 KB Pods shaped like tests/data/pod-realistic.json, a share of them
asking for aliyun.com/gpu-mem. This process runs the real ``LiveClusterState`` (the
official kubernetes client, raw JSON, msgspec decoding) against it and prints the time
until the state holds every node and pod, and this process's peak RSS.

``--via list``: the server holds everything; the reflectors page through it (limit 500)
and then watch. ``--via watch``: the server starts empty; once both watches are open it
sends every object as an ADDED event. ``--env N`` gives every pod's container N ordinary env
entries and every GPU pod GM003's own ALIYUN_COM_GPU_MEM_CONTAINER (as a mutated pod carries it):
the state decodes env names and values for GS010 and GS011. Targets: <= 400 MB peak RSS, < 10 s to
sync.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))



def own_memory_mib() -> tuple[float, float]:
    """This process's resident memory now and its peak (VmRSS, VmHWM), without children."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024

TOKENS = ("__NAME__", "__NS__", "__UID__", "__NODE__", "__RV__")


def _pod_template(gpu: bool, env: int = 0) -> str:
    pod = json.loads((ROOT / "tests" / "data" / "pod-realistic.json").read_text())
    if env:
        entries = [{"name": f"APP_SETTING_{i}", "value": f"value-{i}"} for i in range(env)]
        if gpu:
            entries.append({"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "2"})
        pod["spec"]["containers"][0]["env"] = entries
    pod["metadata"].update(name="__NAME__", namespace="__NS__", uid="__UID__", resourceVersion="__RV__")
    pod["metadata"].pop("generateName", None)
    pod["spec"]["nodeName"] = "__NODE__"
    pod["status"]["phase"] = "Running"
    resources = pod["spec"]["containers"][0]["resources"]
    for block in resources.values():
        block.pop("aliyun.com/gpu-mem", None)
        if gpu:
            block["aliyun.com/gpu-mem"] = "2"
        block.update({"cpu": "2", "memory": "4Gi"})
    return json.dumps(pod, separators=(",", ":"))


def _node_template() -> str:
    from tests.support.cluster_objects import node

    obj = node("__NAME__", mode="cgpu", resource_version="__RV__")
    obj["metadata"]["uid"] = "__UID__"
    obj["metadata"]["labels"].update({f"node.example.com/label-{i}": f"value-{i}" for i in range(12)})
    return json.dumps(obj, separators=(",", ":"))


def _fill(template: str, name: str, namespace: str, uid: str, node: str, rv: int) -> bytes:
    return (template.replace("__NAME__", name).replace("__NS__", namespace).replace("__UID__", uid)
            .replace("__NODE__", node).replace("__RV__", str(rv))).encode()


def cluster(nodes: int, pods: int, gpu_share: float, env: int = 0):
    """(nodes, pods) as ((namespace, name), json bytes) pairs."""
    node_t, gpu_t, plain_t = _node_template(), _pod_template(True, env), _pod_template(False, env)
    node_names = [f"cn-beijing.10.{i // 250}.{i % 250}" for i in range(nodes)]
    node_items = [(("", n), _fill(node_t, n, "", f"n-{i}", "", 1)) for i, n in enumerate(node_names)]
    every = round(1 / gpu_share) if gpu_share > 0 else 0
    pod_items = []
    for i in range(pods):
        namespace, name = f"team-{i % 40}", f"worker-{i}"
        template = gpu_t if every and i % every == 0 else plain_t
        pod_items.append(((namespace, name), _fill(template, name, namespace, f"p-{i}", node_names[i % nodes], 1)))
    return node_items, pod_items


def serve(args: argparse.Namespace) -> None:
    """Child process: the fake API server with the cluster, in list or watch mode."""
    from tests.support.fake_apiserver import FakeApiServer

    node_items, pod_items = cluster(args.nodes, args.pods, args.gpu_share, args.env)
    api = FakeApiServer().start()
    nodes_key, pods_key = ("/api/v1", "nodes"), ("/api/v1", "pods")
    if args.via == "list":
        api.add_raw(nodes_key, "Node", "v1", node_items)
        api.add_raw(pods_key, "Pod", "v1", pod_items)
    print(f"READY {api.url}", flush=True)
    if args.via == "watch":
        while api.open_watches() < 2:
            time.sleep(0.01)  # waiting for the client's watches; not a measurement
        api.emit_raw(nodes_key, "Node", "v1", "ADDED", node_items)
        api.emit_raw(pods_key, "Pod", "v1", "ADDED", pod_items)
    sys.stdin.read()  # serve until the parent closes our stdin
    api.stop()


def measure(args: argparse.Namespace, via: str) -> dict[str, float]:
    command = [sys.executable, __file__, "--serve", "--via", via, "--nodes", str(args.nodes), "--pods",
               str(args.pods), "--gpu-share", str(args.gpu_share), "--env", str(args.env)]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line.startswith("READY "):
            raise RuntimeError(f"server did not start: {line!r}")
        url = line.split()[1]
        return _load(url, args)
    finally:
        if child.stdin:
            child.stdin.close()
        child.wait(timeout=60)


def _load(url: str, args: argparse.Namespace) -> dict[str, float]:
    from webhook.settings import Settings
    from webhook.state.live import LiveClusterState, core_api

    every = round(1 / args.gpu_share) if args.gpu_share > 0 else 0
    gpu_pods = len(range(0, args.pods, every)) if every else 0
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "bench",
            "clusters": [{"name": "bench", "cluster": {"server": url}}], "users": [{"name": "bench", "user": {}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}]}))
        api, _ = core_api(kubeconfig)
    settings = Settings()
    live = LiveClusterState(api, settings.names, settings.state)
    before, _ = own_memory_mib()
    start = time.perf_counter()
    cpu_start = time.process_time()
    live.start()
    # Poll with a deadline: the figure is the time until the state is complete.
    deadline = start + 300
    while time.perf_counter() < deadline:
        if live.synced() and live.counts() == (args.nodes, gpu_pods) \
                and len(live.snapshot.pod_keys()) == args.pods:
            break
        time.sleep(0.005)
    else:
        raise TimeoutError(f"state incomplete after 300 s: {live.counts()}")
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    after, peak = own_memory_mib()
    live.stop()
    return {"seconds": elapsed, "cpu_seconds": cpu, "peak_rss_mib": peak, "rss_before_mib": before,
            "rss_after_mib": after, "gpu_pods": gpu_pods}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--gpu-share", type=float, default=1 / 3, help="share of pods that request gpu-mem")
    parser.add_argument("--via", choices=("list", "watch", "both"), default="both")
    parser.add_argument("--env", type=int, default=0, help="ordinary env entries per pod")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return
    modes = ("list", "watch") if args.via == "both" else (args.via,)
    print(f"{args.nodes} nodes, {args.pods} pods ({args.gpu_share:.0%} with gpu-mem), "
          f"{os.cpu_count()} CPUs; targets: peak RSS <= 400 MiB, sync < 10 s")
    for via in modes:
        # Each mode in a fresh process, so one peak does not hide the other.
        if len(modes) > 1:
            result = subprocess.run([sys.executable, __file__, "--via", via, "--nodes", str(args.nodes), "--pods",
                                     str(args.pods), "--gpu-share", str(args.gpu_share), "--env", str(args.env)],
                                    capture_output=True, text=True, check=True)
            print(result.stdout.splitlines()[-1])
            continue
        r = measure(args, via)
        print(f"via {via:5s}: synced in {r['seconds']:.2f} s (client CPU {r['cpu_seconds']:.2f} s); "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB (after imports {r['rss_before_mib']:.0f} MiB, "
              f"holding the state {r['rss_after_mib']:.0f} MiB); {r['gpu_pods']} GPU pods kept in full")


if __name__ == "__main__":
    main()
