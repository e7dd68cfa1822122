"""Benchmark: wall time of the installed ``gpushare check`` over a large tree and one small file.

    python bench/check.py [--files 1000] [--objects 10000] [--rounds 3] [--keep DIR]

Generates FILES manifest files holding OBJECTS objects of mixed kinds as a chart renders them
(Deployments, StatefulSets, Jobs, CronJobs, DaemonSets, Pods, Nodes, Services, ConfigMaps;
about 4 % of the workloads break a rule), then times `gpushare check DIR` (the whole tree, all
findings rendered) and `gpushare check FILE` (one small file: start-up dominates). Prints each
round and the median (wall time, and the CPU time of the process, which a busy host moves less),
and the host's load average before and after (a shared machine moves these figures by half).
Targets on the 2-core development machine: 10,000 objects <= 4 s, one small file <= 0.25 s
(median of 20 runs).

The project's bytecode is compiled first, as installing the package does: with
PYTHONDONTWRITEBYTECODE set (common in containers) an editable install would otherwise compile
every changed module at each start, and the small-file figure would time Python's compiler.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.processes import compile_bytecode  # noqa: E402

MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"
WORKLOADS = ("Deployment", "StatefulSet", "Job", "CronJob", "DaemonSet", "Pod")


def gpushare() -> str:
    return str(Path(sys.executable).parent / "gpushare")


def pod_spec(rng: random.Random, bad: bool) -> dict[str, Any]:
    """A realistic pod spec: probes, env, mounts, and GPU limits on the main container."""
    mem = rng.choice([1, 2, 3, 4, 8])
    limits: dict[str, Any] = {"cpu": "4", "memory": "16Gi", MEM: mem}
    if rng.random() < 0.5:
        limits[CORE] = rng.choice([10, 20, 30, 50])
    if bad:
        if rng.random() < 0.5:
            limits[CORE] = 33
        else:
            limits[MEM] = f"{mem}Gi"
    return {
        "serviceAccountName": "inference",
        "containers": [
            {"name": "server", "image": "registry.example.com/ml/server:2.4.1", "imagePullPolicy": "IfNotPresent",
             "args": ["--port=8080", "--model=/models/resnet50", "--batch=8"],
             "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
             "env": [{"name": "LOG_LEVEL", "value": "info"},
                     {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
             "resources": {"limits": limits, "requests": {"cpu": "2", "memory": "8Gi"}},
             "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 5},
             "livenessProbe": {"httpGet": {"path": "/live", "port": "http"}, "initialDelaySeconds": 30},
             "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}]},
            {"name": "metrics", "image": "registry.example.com/obs/exporter:1.7.0",
             "ports": [{"name": "metrics", "containerPort": 9400}],
             "resources": {"limits": {"cpu": "100m", "memory": "128Mi"}}},
        ],
        "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}}],
        "nodeSelector": {"ack.node.gpu.schedule": "cgpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }


def workload(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ml", "labels": {"app.kubernetes.io/name": name,
                                                        "app.kubernetes.io/part-of": "inference"}}
    template = {"metadata": {"labels": {"app.kubernetes.io/name": name}}, "spec": spec}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if kind == "CronJob":
        spec = copy.deepcopy(spec) | {"restartPolicy": "OnFailure"}
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": {
            "schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template | {"spec": spec}}}}}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta,
                "spec": {"backoffLimit": 2, "template": template | {"spec": spec | {"restartPolicy": "Never"}}}}
    body: dict[str, Any] = {"selector": {"matchLabels": {"app.kubernetes.io/name": name}}, "template": template}
    if kind != "DaemonSet":
        body["replicas"] = 2
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": body}


def other(kind: str, name: str, rng: random.Random) -> dict[str, Any]:
    if kind == "Service":
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "ml"},
                "spec": {"selector": {"app.kubernetes.io/name": name},
                         "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}
    if kind == "Node":
        mode = rng.choice(["cgpu", "share", "core_mem"])
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "ack.node.gpu.schedule": mode, "ack.node.gpu.placement": "binpack",
            "topology.kubernetes.io/region": "cn-beijing"}}, "spec": {
            "providerID": "cn-beijing.i-" + "".join(ch for ch in name if ch.isalnum()).lower()}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ml"},
            "data": {"config.yaml": "batch: 8\nthreads: 4\n", "LOG_LEVEL": "info"}}


def generate(root: Path, files: int, objects: int, seed: int = 7) -> tuple[int, int]:
    """Write the tree; returns (objects written, objects meant to break a rule)."""
    rng = random.Random(seed)
    written = bad_count = 0
    per_file = objects // files
    for f in range(files):
        docs = []
        for i in range(per_file):
            name = f"svc-{f}-{i}"
            roll = rng.random()
            if roll < 0.6:
                bad = rng.random() < 0.04
                bad_count += bad
                docs.append(workload(rng.choice(WORKLOADS), name, pod_spec(rng, bad)))
            else:
                docs.append(other(rng.choice(["Service", "ConfigMap", "Node"]), name, rng))
            written += 1
        folder = root / f"team-{f % 20:02d}" / f"app-{f // 20:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        if f % 10 == 0:  # some JSON, as `kubectl get -o json` or generators write it
            (folder / "manifests.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        else:
            (folder / "manifests.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return written, bad_count


def timed(args: list[str]) -> tuple[float, float, subprocess.CompletedProcess[bytes]]:
    """Wall seconds, CPU seconds (user + system) and the finished run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([gpushare(), *args], capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--objects", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small-rounds", type=int, default=20)
    parser.add_argument("--keep", type=Path, help="generate into this directory and keep it")
    args = parser.parse_args()

    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    if not compile_bytecode():
        sys.exit("the project's modules do not all compile")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "tree"
        root.mkdir(parents=True, exist_ok=True)
        written, bad = generate(root, args.files, args.objects)
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        print(f"tree: {args.files} files, {written} objects ({bad} meant to break a rule), {size / 2**20:.1f} MiB")

        tree_times, tree_cpu = [], []
        for round_ in range(args.rounds):
            seconds, cpu, done = timed(["check", "--format", "json", str(root)])
            if done.returncode not in (0, 1):
                sys.exit(f"gpushare check failed ({done.returncode}): {done.stderr.decode()[:500]}")
            summary = json.loads(done.stdout)["summary"]
            tree_times.append(seconds)
            tree_cpu.append(cpu)
            print(f"  round {round_ + 1}: {seconds:.2f} s, CPU {cpu:.2f} s  (objects judged {summary['objects']}, "
                  f"skipped {summary['skipped']}, denials {summary['denials']}, exit {done.returncode})")
        print(f"check over the tree: median {statistics.median(tree_times):.2f} s, best {min(tree_times):.2f} s "
              f"(target <= 4 s); CPU median {statistics.median(tree_cpu):.2f} s")

        small = ROOT / "tests" / "data" / "seeds" / "000-cuda-sample.yaml"
        small_times, small_cpu = [], []
        for _ in range(args.small_rounds):
            seconds, cpu, done = timed(["check", str(small)])
            if done.returncode != 0:
                sys.exit(f"gpushare check on {small} failed: {done.stderr.decode()[:500]}")
            small_times.append(seconds)
            small_cpu.append(cpu)
        print(f"check on one small file ({small.name}): median {statistics.median(small_times):.3f} s, "
              f"best {min(small_times):.3f} s over {args.small_rounds} runs (target <= 0.25 s); "
              f"CPU median {statistics.median(small_cpu):.3f} s")
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
