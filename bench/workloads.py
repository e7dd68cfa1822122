"""Benchmark: what the engine spends judging one object, for a plain Pod and for each custom workload.

    python bench/workloads.py [--rounds 2000]

The rules judge a custom workload template by template (a PyTorchJob's Master and Worker, a Workflow's
templates), so its cost grows with its replicas; a plain Pod's must not move. Each object is the
realistic review body's Pod (bench/admission.py) or a sample of tests/data/workloads with its
shared-GPU requests, judged with ``Engine.subject`` + ``Engine.validate`` as the webhook does, without
cluster state. Prints microseconds per object (median of 7 runs of ``--rounds`` each, with the
spread); wall-clock figures on a shared host move by 10-20 %, so compare runs taken back to back.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.admission import realistic_review_body  # noqa: E402
from policies.admission.engine import Engine  # noqa: E402
from webhook.settings import Settings  # noqa: E402

SAMPLES = ROOT / "tests" / "data" / "workloads"


def per_object(engine: Engine, obj: dict, rounds: int, group: str) -> list[float]:
    kind = obj["kind"]
    runs = []
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(rounds):
            engine.validate(engine.subject(kind, obj, namespace="default", group=group))
        runs.append((time.perf_counter() - started) / rounds * 1e6)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    engine = Engine(Settings())
    pod = json.loads(realistic_review_body())["request"]["object"]
    objects = [("Pod (realistic review body)", pod, "")]
    for path in sorted(SAMPLES.glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        objects.append((f"{obj['kind']} ({path.name})", obj, obj["apiVersion"].rpartition("/")[0]))
    print(f"{'object':50} {'us/object':>10} {'spread':>14}")
    for label, obj, group in objects:
        runs = per_object(engine, obj, args.rounds, group)
        print(f"{label:50} {statistics.median(runs):10.1f} {min(runs):6.1f}-{max(runs):6.1f}")


if __name__ == "__main__":
    main()
