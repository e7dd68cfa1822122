"""Benchmark: what GS010 and GS011 add to one review and to the state's record of a pod.

    python bench/isolation_cost.py [--env 20] [--rounds 7] [--number 5000]

A realistic GPU pod (tests/data/pod-realistic.json) with ``--env`` ordinary variables plus GM003's
own ALIYUN_COM_GPU_MEM_CONTAINER (what every mutated GPU pod carries) is judged by the engine with
GS010 and GS011 enabled and disabled, and with a judged value written as ``$(VAR)`` (expanded
as the kubelet does), in turns within one process so that the host's load shifts them alike; and
projected into the state's record with and without what the audit keeps. Prints the median and the
best of ``--rounds`` per-call times, in microseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def realistic_pod(extra_env: int) -> dict[str, Any]:
    pod = json.loads((ROOT / "tests" / "data" / "pod-realistic.json").read_text())
    env = [{"name": f"APP_SETTING_{i}", "value": "x" * 20} for i in range(extra_env)]
    for container in pod["spec"]["containers"]:
        container["env"] = [*env, {"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "2"}]
        container["resources"] = {"limits": {"aliyun.com/gpu-mem": "2", "cpu": "2"},
                                  "requests": {"aliyun.com/gpu-mem": "2", "cpu": "2"}}
    return pod


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", type=int, default=20, help="ordinary env entries per container")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=5000, help="calls per timing")
    args = parser.parse_args()

    from policies.admission.engine import Engine
    from policies.model.cluster_manifests import pod_from_manifest
    from webhook.settings import Settings

    pod = realistic_pod(args.env)
    on = Engine(Settings())
    off = Engine(Settings(rules={"GS010": {"enabled": False}, "GS011": {"enabled": False}}))
    names = on.settings.names
    requests = on.subject("Pod", pod, namespace="default").containers
    # The same pod whose containers end with FLAG=false and CGPU_DISABLE=$(FLAG): the kubelet's expansion
    # reads every entry before it (policies/model/env_expansion.py).
    expanded = json.loads(json.dumps(pod))
    for container in expanded["spec"]["containers"]:
        container["env"] += [{"name": "FLAG", "value": "false"}, {"name": "CGPU_DISABLE", "value": "$(FLAG)"}]
    cases = {
        "validate, GS010/GS011 on": lambda: on.validate(on.subject("Pod", pod, namespace="default")),
        "validate, a $(VAR) judged": lambda: on.validate(on.subject("Pod", expanded, namespace="default")),
        "validate, GS010/GS011 off": lambda: off.validate(off.subject("Pod", pod, namespace="default")),
        "state record, with env": lambda: pod_from_manifest(pod, names, requests),
        "state record, without env": lambda: pod_from_manifest(pod, names, requests, with_env=False),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):  # in turns: a change in the host's load hits every case alike
        for name, call in cases.items():
            times[name].append(timeit.timeit(call, number=args.number) / args.number * 1e6)
    print(f"pod-realistic.json with {args.env} env entries + GM003's value, {args.rounds} rounds of "
          f"{args.number} calls")
    for name, found in times.items():
        print(f"  {name:<28} median {statistics.median(found):7.1f} us   best {min(found):7.1f} us")


if __name__ == "__main__":
    main()
