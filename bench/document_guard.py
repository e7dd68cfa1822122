"""What the bounded document reader costs: the event pass (depth, alias bytes, duplicate keys)
against the full read, on a realistic 4 KB review body and a 1 MB multi-document manifest,
and how fast it refuses the nesting and alias bombs. Prints medians; loopback-free, no server.

    python -m bench.document_guard
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from webhook.documents.manifests import ManifestError, parse_manifests
from webhook.documents.reader import check_yaml

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"


def median_ms(run: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        with contextlib.suppress(ManifestError):  # the bombs are refused: that is the measurement
            run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    pod = json.loads((DATA / "pod-realistic.json").read_text())
    review_yaml = yaml.safe_dump({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "request": {"uid": "u", "object": pod}})
    manifest_1mb = "---\n".join([yaml.safe_dump(pod)] * (1_000_000 // len(yaml.safe_dump(pod))))
    bombs = {
        "nesting bomb, 50 KB (25,000 levels)": "x: " + "[" * 25_000 + "]" * 25_000,
        "nesting bomb, 40 KB (20,000 levels)": "x: " + "[" * 20_000 + "]" * 20_000,
        "alias bomb, 160 KB": "a0: &a0 '" + "x" * 150_000 + "'\n" + "".join(
            f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 10)),
    }
    print(f"{'input':40s} {'bytes':>9s} {'event pass ms':>14s} {'full read ms':>13s} {'share':>6s}")
    for name, text, rounds in (("review as YAML, 4 KB", review_yaml, 200),
                               ("review as JSON, 4 KB", json.dumps(pod), 200),
                               ("manifests, 1 MB", manifest_1mb, 7)):
        full = median_ms(lambda t=text: parse_manifests(t, "bench"), rounds)
        if text.startswith("{"):  # JSON: strict decode and an iterative depth walk, no event pass
            print(f"{name:40s} {len(text):>9d} {'(none)':>14s} {full:>13.2f}")
            continue
        guard = median_ms(lambda t=text: check_yaml(t, "bench"), rounds)
        print(f"{name:40s} {len(text):>9d} {guard:>14.2f} {full:>13.2f} {guard / full:>6.0%}")
    for name, text in bombs.items():
        full = median_ms(lambda t=text: parse_manifests(t, "bench"), 20)
        print(f"{name:40s} {len(text):>9d} {'':>14s} {full:>13.2f}  refused")


if __name__ == "__main__":
    main()
