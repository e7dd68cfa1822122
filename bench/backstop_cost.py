"""Benchmark: what GS007 in the backstop costs the API server, in CEL cost units.

    python bench/backstop_cost.py

The API server stops an expression past 1,000,000 units (PerCallLimit) and a policy evaluation
past 10,000,000 (RuntimeCELCostBudget): k8s.io/apiserver/pkg/apis/cel, the constants of
https://pkg.go.dev/k8s.io/apiserver/pkg/apis/cel. GS007's cost is its ``matches`` calls (the rest
is a few units per key): cel-go charges ceil((1 + len(text)) * 0.1) * ceil(len(regex) * 0.25)
per call (interpreter/runtimecost.go; StringTraversalCostFactor 0.1, RegexStringLengthCostFactor
0.25 in common/cost.go). The name-part regex runs on every key not skipped by list (the known
names, the allow-list, cpu, memory, ephemeral-storage) and on each container's label; the
domain regex only on keys whose name part is a near miss.

Prints the regex lengths, the cost of a few pod shapes and how many keys fit under PerCallLimit.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from policies.generate.backstop import SECTION  # noqa: E402
from policies.generate.near_miss_regex import domain_regex, name_part_regex  # noqa: E402
from policies.model.near_miss import skipped_keys  # noqa: E402
from webhook.settings import Settings  # noqa: E402

PER_CALL_LIMIT = 1_000_000
RUNTIME_BUDGET = 10_000_000


def matches_cost(text: str, regex: str) -> int:
    return math.ceil((1 + len(text)) * 0.1) * math.ceil(len(regex) * 0.25)


def main() -> None:
    settings = Settings()
    r = settings.names.resources
    name = name_part_regex(r.gpu_mem, r.gpu_core, before=SECTION)
    domain = domain_regex(r.gpu_mem, tuple(settings.near_miss.lookalike_domains), before=SECTION)
    mem_only = name_part_regex(r.gpu_mem, r.gpu_core, mem_only=True, before=SECTION)
    skipped = set(skipped_keys(settings))
    print(f"regex lengths: name part {len(name):,}, domain {len(domain):,}, message's gpu-mem test {len(mem_only):,}")

    def pod_cost(containers: list[dict[str, list[str]]], near: frozenset[str]) -> int:
        cost = 0
        for container in containers:
            for section, keys in container.items():
                for key in keys:
                    if key in skipped:
                        continue
                    cost += matches_cost(f"{section}.{key}", name)
                    if key in near:
                        cost += matches_cost(f"{section}.{key}", domain)
        return cost

    gpu = {"limits": ["cpu", "memory", r.gpu_mem], "requests": ["cpu", "memory"]}
    busy = {"limits": ["cpu", "memory", "ephemeral-storage", r.gpu_mem, r.gpu_core],
            "requests": ["cpu", "memory", "ephemeral-storage"]}
    long_keys = [f"vendor-{i:02d}.example.com/accelerator-x" for i in range(10)]  # 34 characters each
    shapes = [
        ("GPU pod: 1 container, cpu/memory/gpu-mem", [gpu], frozenset()),
        ("4 containers + 2 init, 8 keys each", [busy] * 6, frozenset()),
        ("near miss: aliyun.com/gpu-memory beside cpu/memory",
         [{"limits": ["cpu", "memory", "aliyun.com/gpu-memory"]}], frozenset({"aliyun.com/gpu-memory"})),
        ("20 containers x 20 keys of 34 characters", [{"limits": long_keys, "requests": long_keys}] * 20, frozenset()),
    ]
    for label, containers, near in shapes:
        cost = pod_cost(containers, near)
        print(f"{label:55s} {cost:>9,} units in matches ({cost / PER_CALL_LIMIT:6.1%} of PerCallLimit, "
              f"{cost / RUNTIME_BUDGET:6.2%} of the evaluation budget)")
    for length in (3, 15, 34):
        per_key = matches_cost("requests." + "x" * length, name)
        print(f"a key of {length} characters: {per_key:,} units; {PER_CALL_LIMIT // per_key:,} such keys (limits and "
              f"requests of all containers together) fit under PerCallLimit")


if __name__ == "__main__":
    main()
