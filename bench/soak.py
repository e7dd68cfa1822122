"""Soak: the real server's view of a churning, faulty cluster never drifts and does not grow.

    python bench/soak.py [--minutes 20] [--nodes 1000] [--pods 10000] [--writes 20] [--reviews 20]
                         [--fault-every 8] [--checkpoint-every 120] [--relabels 6]

The test API server (tests/support/fake_apiserver.py, which compacts, expires and fails as kube-apiserver
does) runs in this process holding a cluster of GPU nodes (share, cgpu and core_mem; 1 to 8
cards of 16, 24 or 32 GiB) and pods in every phase: bound and recorded on cards (one container,
several, several cards with ``aliyun.com/gpu-count``, compute on core_mem nodes, the extender's
legacy card index), bound with no card record, with ``gpu-mem`` on init containers, Pending
unbound, terminating, Succeeded and Failed, and pods without GPUs. The real server
(``gpushare serve --kubeconfig``, gunicorn) watches it. Meanwhile:

- **churn**: ``--writes`` pod writes a second (create, bind, finish, mark terminating, delete)
  and ``--relabels`` node relabels a minute (mode share <-> cgpu, other labels);
- **faults**, one every ``--fault-every`` seconds in a fixed rotation: watch connections cut
  (resumed, no relist), 410 as an ``ERROR`` event on the open watches, 410 as HTTP when the
  resumed watch starts (after an outage and a compaction), 410 on a page of the relist (a
  compaction between two pages), 500s on the resumed watch; compaction every 30 s besides, as
  etcd compacts on its own (the webhook must not relist for it);
- **reviews**: ``--reviews`` a second over HTTPS — GPU Pod CREATE, Deployment CREATE, dry-run
  ``pods/binding`` of a pending pod — each answer checked for status 200 and its request uid.

At each checkpoint churn and faults pause; the truth is computed from the double's objects by the
test oracle (tests/support/scheduler_oracle.py: what the GPU-sharing scheduler counts, as docs/design.md
"Counting as the scheduler counts" says) and compared with the webhook's view: the allocation
metrics of every node (memory assigned and total, mode), polled until they agree (the catch-up
time, against ``metrics.refresh_seconds``); `gpushare inspect -o json` (per node and card); and
exact-fit binding verdicts (on share and cgpu nodes, a pending pod of exactly the free GiB of the
roomiest card must be admitted, one GiB more refused). RSS, open fds and threads of the server's
process tree are sampled after every relist (just before the next fault) and at each checkpoint.
Any divergence, wrong answer or fault that did not relist is printed and the exit code is 1 (a
double that silently drops one pod event in 50 is caught at the first checkpoint). Loopback only;
bounded by ``--minutes``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.cluster_objects import binding, gpu_pod, node  # noqa: E402
from tests.support.fake_apiserver import FakeApiServer  # noqa: E402
from tests.support.helpers import admission_review, gpushare_executable, gpushare_server  # noqa: E402
from tests.support.processes import children  # noqa: E402
from tests.support.scheduler_oracle import ALLOCATION, CORE_ALLOCATION, LEGACY, SPREAD, finds_room, oracle_node  # noqa: E402

MODES = ("share", "cgpu", "core_mem")
FAULTS = ("410-event", "410-http", "410-page", "cut", "410-event", "410-http", "410-page", "500")
RELISTING = ("410-event", "410-http", "410-page")
NAMESPACES = [f"team-{i}" for i in range(20)]
LISTS = ("/api/v1/pods", "/api/v1/nodes", "/api/v1/namespaces")


# -- the cluster ---------------------------------------------------------------------------------

@dataclass
class Card:
    total: int
    used: int = 0
    core: int = 0
    pods: int = 0


@dataclass
class Model:
    """What the generator and the churn believe is where, to place pods on cards with room (the
    truth is always recomputed from the double's objects, never from this)."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {"mode", "cards": [Card]}
    placed: dict[tuple[str, str], tuple[str, dict[int, int], dict[int, int]]] = field(default_factory=dict)
    pending: list[tuple[str, str]] = field(default_factory=list)
    terminating: list[tuple[str, str]] = field(default_factory=list)
    plain: list[tuple[str, str]] = field(default_factory=list)
    serial: int = 0

    def name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}-{self.serial}"

    def take(self, key: tuple[str, str], node_name: str, shares: dict[int, int], cores: dict[int, int]) -> None:
        cards = self.nodes[node_name]["cards"]
        for card, gib in shares.items():
            cards[card].used += gib
            cards[card].pods += 1
        for card, percent in cores.items():
            cards[card].core += percent
        self.placed[key] = (node_name, shares, cores)

    def release(self, key: tuple[str, str]) -> None:
        found = self.placed.pop(key, None)
        if found is None:
            return
        node_name, shares, cores = found
        cards = self.nodes[node_name]["cards"]
        for card, gib in shares.items():
            cards[card].used -= gib
            cards[card].pods -= 1
        for card, percent in cores.items():
            cards[card].core -= percent


def make_node(i: int, rng: random.Random) -> dict[str, Any]:
    mode = MODES[i % 3] if i % 10 else "share"
    cards = rng.choice((1, 2, 4, 8))
    card_gib = rng.choice((16, 24, 32))
    obj = node(f"cn-hangzhou.10.{i // 250}.{i % 250}", mode=mode, cards=cards, card_gib=card_gib,
               card_name="Tesla-A10" if card_gib == 24 else "Tesla-V100-SXM2-32GB")
    obj["metadata"]["uid"] = f"soak-node-{i}"
    return obj


def pod_object(name: str, namespace: str, *, mem: int, containers: int = 1, core: int | None = None,
               node_name: str | None = None, phase: str = "Running", spread: int = 1,
               init_mem: int | None = None) -> dict[str, Any]:
    obj = gpu_pod(name, mem=mem, core=core, node_name=node_name, namespace=namespace, phase=phase)
    obj["metadata"]["uid"] = str(uuid.uuid4())
    if containers > 1:
        first = obj["spec"]["containers"][0]
        obj["spec"]["containers"] = [json.loads(json.dumps({**first, "name": f"cuda-{c}"}))
                                     for c in range(containers)]
    if spread > 1:
        obj["metadata"]["labels"][SPREAD] = str(spread)
    if init_mem is not None:
        obj["spec"]["initContainers"] = [{"name": "warm-up", "image": "busybox", "resources": {
            "limits": {"aliyun.com/gpu-mem": str(init_mem)}, "requests": {"aliyun.com/gpu-mem": str(init_mem)}}}]
    return obj


def plain_object(name: str, namespace: str, node_name: str | None) -> dict[str, Any]:
    obj = gpu_pod(name, mem=None, node_name=node_name, namespace=namespace)
    obj["metadata"]["uid"] = str(uuid.uuid4())
    return obj


def place(model: Model, rng: random.Random, name: str, namespace: str, node_name: str) -> dict[str, Any] | None:
    """A pod bound to the node and recorded as the scheduler records it, of a shape picked at
    random, on cards with room; None when the node has no room for it."""
    info = model.nodes[node_name]
    cards: list[Card] = info["cards"]
    shape = rng.random()
    if info["mode"] == "core_mem":
        mem, core = rng.choice((2, 4, 8)), rng.choice((10, 20, 30, 50))
        roomy = [i for i, c in enumerate(cards) if c.total - c.used >= mem and 100 - c.core >= core and c.pods < 20]
        if not roomy:
            return None
        card = rng.choice(roomy)
        obj = pod_object(name, namespace, mem=mem, core=core, node_name=node_name)
        obj["metadata"]["annotations"] = {ALLOCATION: json.dumps({"0": {str(card): mem}}),
                                          CORE_ALLOCATION: json.dumps({"0": {str(card): core}})}
        model.take((namespace, name), node_name, {card: mem}, {card: core})
        return obj
    limit = 20 if info["mode"] == "cgpu" else 10_000
    if shape < 0.12 and len(cards) >= 2:  # several cards: N/M on each of M cards
        spread = 2
        each = rng.choice((2, 4))
        roomy = [i for i, c in enumerate(cards) if c.total - c.used >= each and c.pods < limit]
        if len(roomy) < spread:
            return None
        chosen = rng.sample(roomy, spread)
        obj = pod_object(name, namespace, mem=each * spread, node_name=node_name, spread=spread)
        obj["metadata"]["annotations"] = {ALLOCATION: json.dumps({"0": {str(c): each for c in chosen}})}
        for c in chosen:
            cards[c].used += each
            cards[c].pods += 1
        model.placed[(namespace, name)] = (node_name, dict.fromkeys(chosen, each), {})
        return obj
    mem = rng.choice((1, 2, 2, 4, 4, 6, 8))
    containers = 2 if shape > 0.88 else 1
    roomy = [i for i, c in enumerate(cards) if c.total - c.used >= mem * containers and c.pods < limit]
    if not roomy:
        return None
    card = rng.choice(roomy)
    obj = pod_object(name, namespace, mem=mem, containers=containers, node_name=node_name,
                     init_mem=mem * containers if 0.12 <= shape < 0.22 else None)
    if 0.22 <= shape < 0.28:  # the open-source extender's record: the whole pod on one card
        obj["metadata"]["annotations"] = {LEGACY: str(card)}
    elif 0.28 <= shape < 0.31:  # bound, but the scheduler recorded no card: on the node, on no card
        obj["metadata"]["annotations"] = {}
        model.placed[(namespace, name)] = (node_name, {}, {})
        return obj
    else:
        obj["metadata"]["annotations"] = {ALLOCATION: json.dumps({str(i): {str(card): mem} for i in range(containers)})}
    model.take((namespace, name), node_name, {card: mem * containers}, {})
    return obj


def build_cluster(args: argparse.Namespace, rng: random.Random) -> tuple[Model, list[dict], list[dict]]:
    model = Model()
    nodes = [make_node(i, rng) for i in range(args.nodes)]
    for obj in nodes:
        capacity = obj["status"]["capacity"]
        count, total = int(capacity["aliyun.com/gpu-count"]), int(capacity["aliyun.com/gpu-mem"])
        model.nodes[obj["metadata"]["name"]] = {"mode": obj["metadata"]["labels"]["ack.node.gpu.schedule"],
                                                "cards": [Card(total // count) for _ in range(count)], "obj": obj}
    names = list(model.nodes)
    pods: list[dict[str, Any]] = []
    # Pending pods of every size for the exact-fit verdicts (never churned).
    for gib in range(1, 34):
        for copy in range(2):
            pods.append(pod_object(f"fit-{gib}-{copy}", "fit", mem=gib, phase="Pending"))
    while len(pods) < args.pods:
        namespace = rng.choice(NAMESPACES)
        draw = rng.random()
        name = model.name("pod")
        if draw < 0.35:
            node_name = rng.choice(names)
            pods.append(plain_object(name, namespace, node_name))
            model.plain.append((namespace, name))
        elif draw < 0.42:
            pods.append(pod_object(name, namespace, mem=rng.choice((1, 2, 4)), phase="Pending"))
            model.pending.append((namespace, name))
        elif draw < 0.50:  # finished: hold nothing
            obj = pod_object(name, namespace, mem=rng.choice((2, 4)), node_name=rng.choice(names),
                             phase=rng.choice(("Succeeded", "Failed")))
            obj["metadata"]["annotations"] = {ALLOCATION: json.dumps({"0": {"0": 2}})}
            pods.append(obj)
        else:
            obj = place(model, rng, name, namespace, rng.choice(names))
            if obj is None:
                continue
            if draw > 0.97:  # terminating: still holding its card until deleted
                obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                obj["metadata"]["deletionGracePeriodSeconds"] = 30
                model.terminating.append((namespace, name))
            pods.append(obj)
    return model, nodes, pods


# -- churn -----------------------------------------------------------------------------------------

class Churn:
    def __init__(self, api: FakeApiServer, model: Model, rng: random.Random, writes: float, relabels: float) -> None:
        self.api, self.model, self.rng = api, model, rng
        self.writes, self.relabels = writes, relabels
        self.running = threading.Event()
        self.idle = threading.Event()
        self.stop = threading.Event()
        self.done: Counter[str] = Counter()
        self.thread = threading.Thread(target=self._run, name="churn", daemon=True)

    def _pod(self, key: tuple[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": key[0], "name": key[1]}}

    def _delete(self, key: tuple[str, str]) -> None:
        if self.api.get(self._pod(key)) is not None:
            self.api.delete(self._pod(key))
        self.model.release(key)

    def step(self) -> None:
        model, rng, api = self.model, self.rng, self.api
        draw = rng.random()
        names = list(model.nodes)
        if draw < 0.25:  # a new pod, bound and recorded
            namespace = rng.choice(NAMESPACES)
            obj = place(model, rng, model.name("churn"), namespace, rng.choice(names))
            if obj is not None:
                api.add(obj)
                self.done["create"] += 1
        elif draw < 0.42 and model.placed:  # a pod goes
            key = rng.choice(list(model.placed))
            if key in model.terminating:
                model.terminating.remove(key)
            self._delete(key)
            self.done["delete"] += 1
        elif draw < 0.52 and model.placed:  # a pod finishes: its card is free again
            key = rng.choice(list(model.placed))
            obj = api.get(self._pod(key))
            if obj is not None and key not in model.terminating:
                obj["status"]["phase"] = rng.choice(("Succeeded", "Failed"))
                api.update(obj)
                model.release(key)
                self.done["finish"] += 1
        elif draw < 0.60 and model.placed:  # deletion requested: terminating, still holding
            key = rng.choice(list(model.placed))
            obj = api.get(self._pod(key))
            if obj is not None and "deletionTimestamp" not in obj["metadata"]:
                obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                api.update(obj)
                model.terminating.append(key)
                self.done["terminating"] += 1
        elif draw < 0.68 and model.terminating:  # a terminating pod is gone
            key = model.terminating.pop(0)
            self._delete(key)
            self.done["delete"] += 1
        elif draw < 0.78 and model.pending:  # the scheduler binds a pending pod
            key = model.pending.pop(rng.randrange(len(model.pending)))
            bound = place(model, rng, key[1], key[0], rng.choice(names))
            if bound is not None:
                api.update(bound)
                self.done["bind"] += 1
            else:
                model.pending.append(key)
        elif draw < 0.86:  # a pending pod is created
            key = (rng.choice(NAMESPACES), model.name("pending"))
            api.add(pod_object(key[1], key[0], mem=rng.choice((1, 2, 4)), phase="Pending"))
            model.pending.append(key)
            self.done["pending"] += 1
        elif model.plain:  # pods without GPUs come and go
            if rng.random() < 0.5:
                key = model.plain.pop(rng.randrange(len(model.plain)))
                self._delete(key)
            else:
                key = (rng.choice(NAMESPACES), model.name("web"))
                api.add(plain_object(key[1], key[0], rng.choice(names)))
                model.plain.append(key)
            self.done["plain"] += 1

    def relabel(self) -> None:
        model, rng = self.model, self.rng
        name = rng.choice([n for n, info in model.nodes.items() if info["mode"] in ("share", "cgpu")])
        info = model.nodes[name]
        obj = self.api.get({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        if obj is None:
            return
        if rng.random() < 0.5 and all(c.pods <= 20 for c in info["cards"]):
            info["mode"] = "cgpu" if info["mode"] == "share" else "share"
            obj["metadata"]["labels"]["ack.node.gpu.schedule"] = info["mode"]
        else:
            obj["metadata"]["labels"]["soak.example.com/revision"] = str(self.done["relabel"])
        self.api.update(obj)
        self.done["relabel"] += 1

    def _run(self) -> None:
        next_write = next_relabel = time.monotonic()
        while not self.stop.is_set():
            if not self.running.is_set():
                self.idle.set()
                self.running.wait(0.5)
                next_write = next_relabel = time.monotonic()
                continue
            self.idle.clear()
            now = time.monotonic()
            if now >= next_write:
                self.step()
                next_write += 1 / self.writes
            if self.relabels and now >= next_relabel:
                self.relabel()
                next_relabel += 60 / self.relabels
            self.stop.wait(max(0.0, min(next_write, next_relabel) - time.monotonic()))

    def pause(self) -> None:
        self.running.clear()
        self.idle.wait(30)


# -- faults ----------------------------------------------------------------------------------------

class Faults:
    def __init__(self, api: FakeApiServer, churn: Churn) -> None:
        self.api, self.churn = api, churn
        self.injected: Counter[str] = Counter()
        self.relists: Counter[str] = Counter()
        self.turn = 0

    def lists(self) -> int:
        """List requests that start a list (no continue token), of nodes, pods and namespaces."""
        with self.api._lock:
            requests = list(self.api.requests)
        return sum(1 for r in requests if r.method == "GET" and r.path in LISTS and r.query.get("watch") != "true"
                   and "continue" not in r.query)

    def inject(self) -> str:
        kind = FAULTS[self.turn % len(FAULTS)]
        self.turn += 1
        api = self.api
        if kind == "cut":
            api.drop_watches()
        elif kind == "410-event":
            api.expire_watches()
        elif kind == "410-http":
            api.gone_as_http = True
            api.set_unavailable()  # the watches are cut, and the resumed ones wait for the outage
            self.churn.relabel()  # the cluster moves on meanwhile, then etcd compacts
            self.churn.step()
            api.compact()
            api.set_unavailable(False)
        elif kind == "410-page":
            api.compact_before_next_page("/api/v1/pods")
            api.expire_watches()
        elif kind == "500":
            api.fail_next(3, 500, "/api/v1/pods")
            api.drop_watches()
        self.injected[kind] += 1
        return kind

    def settle(self) -> None:
        """Undo what must not outlast a fault (HTTP 410s are one of its forms, not the default)."""
        self.api.gone_as_http = False


# -- the webhook's view ----------------------------------------------------------------------------

_SERIES = re.compile(r'^(gpushare_node_gpu_memory_(?:assigned|total)_gib|gpushare_node_gpu_mode)\{([^}]*)\} (\S+)$',
                     re.M)


def metrics_view(session: Any, url: str) -> dict[str, dict[str, Any]]:
    text = session.get(url + "/metrics", timeout=30).text
    view: dict[str, dict[str, Any]] = defaultdict(dict)
    for name, labels, value in _SERIES.findall(text):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        entry = view[fields["node"]]
        if name.endswith("assigned_gib"):
            entry["assigned"] = float(value)
        elif name.endswith("total_gib"):
            entry["total"] = float(value)
        else:
            entry["mode"] = fields["mode"]
    return view


def truth(api: FakeApiServer) -> dict[str, Any]:
    """Every node as the scheduler counts it, from the double's objects."""
    with api._lock:
        node_bodies = [s.body for s in api._collection(("/api/v1", "nodes")).objects.values()]
        pod_bodies = [s.body for s in api._collection(("/api/v1", "pods")).objects.values()]
    nodes = [json.loads(b) for b in node_bodies]
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    pending: list[dict[str, Any]] = []
    for body in pod_bodies:
        pod = json.loads(body)
        where = pod["spec"].get("nodeName")
        if where:
            by_node[where].append(pod)
        elif pod["metadata"]["namespace"] == "fit":
            pending.append(pod)
    oracle = {n["metadata"]["name"]: oracle_node(n, by_node[n["metadata"]["name"]]) for n in nodes}
    return {"nodes": oracle, "fit": pending}


def metric_divergences(view: dict[str, dict[str, Any]], true: dict[str, Any]) -> list[str]:
    out = []
    for name, o in true["nodes"].items():
        seen = view.get(name)
        if seen is None:
            out.append(f"{name}: missing")
        elif (seen.get("assigned"), seen.get("total"), seen.get("mode")) != (float(o.held), float(o.total), o.mode):
            out.append(f"{name}: webhook {seen.get('assigned')}/{seen.get('total')} {seen.get('mode')}, "
                       f"truth {o.held}/{o.total} {o.mode}")
    out += [f"{name}: not in the cluster" for name in set(view) - set(true["nodes"])]
    return out


def inspect_divergences(kubeconfig: Path, true: dict[str, Any]) -> tuple[list[str], float]:
    started = time.monotonic()
    done = subprocess.run([gpushare_executable(), "inspect", "--kubeconfig", str(kubeconfig), "-o", "json"],
                          capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    if done.returncode != 0:
        return [f"inspect exited {done.returncode}: {done.stderr[-300:]}"], took
    shown = {n["name"]: n for n in json.loads(done.stdout)["nodes"]}
    out = []
    for name, o in true["nodes"].items():
        n = shown.get(name)
        cards = [c.used for c in o.cards]
        if n is None:
            out.append(f"{name}: missing from inspect")
        elif (n["allocatedMemGiB"], n["totalMemGiB"], [g["allocatedMemGiB"] for g in n["gpus"]]) != (
                o.held, o.total, cards):
            out.append(f"{name}: inspect {n['allocatedMemGiB']}/{n['totalMemGiB']} "
                       f"{[g['allocatedMemGiB'] for g in n['gpus']]}, truth {o.held}/{o.total} {cards}")
    return out, took


def exact_fit_verdicts(session: Any, url: str, true: dict[str, Any], rng: random.Random,
                       count: int) -> tuple[int, int, list[str]]:
    """On share and cgpu nodes: a pending pod of exactly the roomiest card's free GiB, and one of a
    GiB more; the webhook's verdict against the oracle's."""
    by_size: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for pod in true["fit"]:
        by_size[int(pod["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"])].append(pod)
    candidates = [o for o in true["nodes"].values() if o.mode in ("share", "cgpu")]
    right = total = 0
    wrong: list[str] = []
    for o in rng.sample(candidates, min(count, len(candidates))):
        free = max((c.total - c.used for c in o.cards if o.mode != "cgpu" or len(c.pods) < 20), default=0)
        for gib in (free, free + 1):
            if gib < 1 or not by_size.get(gib):
                continue
            pod = rng.choice(by_size[gib])
            expected = finds_room(o, pod)
            review = admission_review(binding(pod["metadata"]["name"], o.name, "fit"), kind="Binding",
                                      namespace="fit", resource="pods", sub_resource="binding", dry_run=True)
            answer = session.post(url + "/validate", data=json.dumps(review), timeout=30,
                                  headers={"Content-Type": "application/json"}).json()["response"]
            total += 1
            if answer["allowed"] == expected:
                right += 1
            else:
                message = answer.get("status", {}).get("message", "")
                wrong.append(f"{pod['metadata']['name']} -> {o.name} (free {free}): webhook "
                             f"{answer['allowed']}, scheduler {expected}: {message}")
    return right, total, wrong


# -- review load -----------------------------------------------------------------------------------

class Reviews:
    def __init__(self, server: Any, model: Model, rate: float) -> None:
        self.server, self.model, self.rate = server, model, rate
        self.answers = 0
        self.wrong: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="reviews", daemon=True)
        template = pod_object("tpl", "team-0", mem=2)
        self.deployment = {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer", "namespace": "team-0"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "infer"}},
                     "template": {"metadata": {"labels": {"app": "infer"}}, "spec": template["spec"]}}}

    def one(self, session: Any, rng: random.Random) -> None:
        kind = rng.choice(("Pod", "Deployment", "Binding"))
        if kind == "Pod":
            review = admission_review(pod_object(f"new-{rng.randrange(10**6)}", "team-1", mem=rng.choice((1, 2, 4))))
        elif kind == "Deployment":
            review = admission_review(self.deployment, kind="Deployment", group="apps", resource="deployments")
        else:
            try:  # the churn thread binds and adds pending pods meanwhile
                pending = self.model.pending[rng.randrange(len(self.model.pending))]
            except (IndexError, ValueError):
                pending = ("team-0", "gone")
            review = admission_review(binding(pending[1], rng.choice(list(self.model.nodes)), pending[0]),
                                      kind="Binding", namespace=pending[0], resource="pods", sub_resource="binding",
                                      dry_run=True)
        uid = review["request"]["uid"]
        try:
            answer = session.post(self.server.url + "/validate", data=json.dumps(review), timeout=30,
                                  headers={"Content-Type": "application/json"})
            body = answer.json()
            if answer.status_code != 200 or body["response"]["uid"] != uid or "allowed" not in body["response"]:
                self.wrong.append(f"{kind}: {answer.status_code} {answer.text[:200]}")
        except Exception as exc:  # a wrong answer is any failure to answer
            self.wrong.append(f"{kind}: {exc!r}")
        self.answers += 1

    def _run(self) -> None:
        session = self.server.session()
        rng = random.Random(7)
        next_at = time.monotonic()
        while not self.stop.is_set():
            self.one(session, rng)
            next_at += 1 / self.rate
            self.stop.wait(max(0.0, next_at - time.monotonic()))


# -- the server's process tree ---------------------------------------------------------------------

def tree_stats(pid: int) -> tuple[float, int, int]:
    """RSS (MiB), open fds and threads of the server process and its children."""
    rss = fds = threads = 0
    for p in [pid, *children(pid)]:
        try:
            status = dict(line.split(":", 1) for line in Path(f"/proc/{p}/status").read_text().splitlines()
                          if ":" in line)
            rss += int(status["VmRSS"].split()[0])
            threads += int(status["Threads"])
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            continue
    return rss / 1024, fds, threads


def wait_for(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)  # poll pacing under a deadline
    raise TimeoutError(what)


# -- the run ---------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--writes", type=float, default=20, help="pod writes per second")
    parser.add_argument("--relabels", type=float, default=6, help="node relabels per minute")
    parser.add_argument("--reviews", type=float, default=20, help="reviews per second")
    parser.add_argument("--fault-every", type=float, default=8, help="seconds between faults")
    parser.add_argument("--checkpoint-every", type=float, default=120, help="seconds between checkpoints")
    parser.add_argument("--verdicts", type=int, default=20, help="nodes judged exactly at each checkpoint")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    refresh = 5.0
    print(f"soak: {args.nodes} nodes, {args.pods} pods, {args.writes:g} pod writes/s, {args.relabels:g} relabels/min, "
          f"{args.reviews:g} reviews/s, a fault every {args.fault_every:g} s, {args.minutes:g} min; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    model, nodes, pods = build_cluster(args, rng)
    api = FakeApiServer(bookmark_interval=10).start()
    work = Path(tempfile.mkdtemp(prefix="gpushare-soak-"))
    kubeconfig = api.kubeconfig(work / "kubeconfig")
    env = {"GPUSHARE_LEADER__ENABLED": "false", "GPUSHARE_AUDIT__INTERVAL_SECONDS": "0",
           "GPUSHARE_LOGGING__REQUESTS": "false", "GPUSHARE_METRICS__REFRESH_SECONDS": str(refresh)}
    churn = Churn(api, model, rng, args.writes, args.relabels)
    faults = Faults(api, churn)
    rows: list[str] = []
    samples: list[tuple[str, float, int, int]] = []  # after each relisting fault: (kind, rss, fds, threads)
    failures: list[str] = []
    with gpushare_server(work, "--kubeconfig", str(kubeconfig), ready_path="/readyz", env=env) as server:
        pid = server.process.pid
        session = server.session()
        reviews = Reviews(server, model, args.reviews)
        for _ in range(30):  # every path warm before the empty baseline
            reviews.one(session, rng)
        empty = tree_stats(pid)
        # The cluster arrives as after a compaction: the watches expire and the webhook lists it all.
        api.add_raw(("/api/v1", "nodes"), "Node", "v1",
                    [(("", n["metadata"]["name"]), json.dumps(n).encode()) for n in nodes])
        api.add_raw(("/api/v1", "pods"), "Pod", "v1",
                    [((p["metadata"]["namespace"], p["metadata"]["name"]), json.dumps(p).encode()) for p in pods])
        api.add(*({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                  for ns in [*NAMESPACES, "fit"]))
        loaded_at = time.monotonic()
        api.expire_watches()
        true = truth(api)
        wait_for(lambda true=true: not metric_divergences(metrics_view(session, server.url), true), 180,
                 "the first sync")
        synced = tree_stats(pid)
        print(f"synced {args.nodes} nodes and {args.pods} pods in {time.monotonic() - loaded_at:.1f} s; server tree "
              f"RSS {empty[0]:.0f} MiB empty -> {synced[0]:.0f} MiB "
              f"({(synced[0] - empty[0]) * 1024 / (args.nodes + args.pods):.1f} KiB per object), "
              f"{synced[1]} fds, {synced[2]} threads", flush=True)
        header = (f"{'min':>5} {'writes':>7} {'faults':>7} {'relists':>7} {'catch-up':>9} {'metrics':>8} "
                  f"{'inspect':>8} {'verdicts':>9} {'answers':>8} {'wrong':>6} {'RSS MiB':>8} {'fds':>5} {'thr':>4}")
        print(header, flush=True)
        rows.append(header)
        start = time.monotonic()
        end = start + args.minutes * 60
        churn.thread.start()
        reviews.thread.start()
        churn.running.set()
        next_fault = time.monotonic() + args.fault_every
        next_checkpoint = start + args.checkpoint_every
        next_compaction = start + 30
        catchups: list[float] = []
        totals: Counter[str] = Counter()
        previous = ""
        while True:
            now = time.monotonic()
            final = now >= end
            if now >= next_checkpoint or final:
                churn.pause()
                faults.settle()
                paused = time.monotonic()
                true = truth(api)
                diverged: list[str] = []
                try:
                    wait_for(lambda true=true: not metric_divergences(metrics_view(session, server.url), true),
                             60, "catch-up")
                    catchup = time.monotonic() - paused
                except TimeoutError:
                    catchup = float("nan")
                    diverged = metric_divergences(metrics_view(session, server.url), true)
                    failures += diverged[:10]
                catchups.append(catchup)
                inspected, _took = inspect_divergences(kubeconfig, true)
                failures += inspected[:10]
                right, judged, wrong = exact_fit_verdicts(session, server.url, true, rng, args.verdicts)
                failures += wrong
                totals.update(metrics=len(diverged), inspect=len(inspected), right=right, judged=judged)
                rss, fds, threads = tree_stats(pid)
                row = (f"{(time.monotonic() - start) / 60:5.1f} {sum(churn.done.values()):7d} "
                       f"{sum(faults.injected.values()):7d} {sum(faults.relists.values()):7d} "
                       f"{f'{catchup:.1f}s' if catchup == catchup else 'never':>9} "
                       f"{len(diverged):8d} {len(inspected):8d} {right:4d}/{judged:<4d} {reviews.answers:8d} "
                       f"{len(reviews.wrong):6d} {rss:8.1f} {fds:5d} {threads:4d}")
                print(row, flush=True)
                rows.append(row)
                if final or time.monotonic() >= end:
                    break
                churn.running.set()
                previous = ""  # a checkpoint came between: the next sample is not this fault's
                next_checkpoint = time.monotonic() + args.checkpoint_every
                next_fault = time.monotonic() + args.fault_every
                continue
            if now >= next_compaction:  # etcd compacts on its own: open watches must not notice
                api.compact()
                next_compaction = now + 30
            if now >= next_fault:
                if previous in RELISTING:  # the memory once the last fault's relist is done
                    samples.append((previous, *tree_stats(pid)))
                before = faults.lists()
                kind = previous = faults.inject()
                if kind in RELISTING:
                    try:  # the relist it causes
                        wait_for(lambda before=before: faults.lists() > before, 60, f"a relist after {kind}")
                        faults.relists[kind] += 1
                    except TimeoutError:
                        failures.append(f"no relist after {kind}")
                faults.settle()
                next_fault = time.monotonic() + args.fault_every
            time.sleep(0.1)  # the driver's tick; every wait above has its own deadline
        reviews.stop.set()
        churn.stop.set()
        churn.running.set()
        reviews.thread.join(60)
        churn.thread.join(60)
        log_tail = server.log()[-2000:]
    api.stop()
    print()
    print(f"writes by kind: {dict(churn.done)}")
    print(f"faults injected: {dict(faults.injected)}; relists seen after them: {dict(faults.relists)}")
    print(f"410s the double answered, by form: {dict(api.gone)}; compactions every 30 s besides; lists started "
          f"in all: {faults.lists()}")
    print(f"catch-up after pausing: max {max(catchups):.1f} s (nan: never; metrics refresh every {refresh:g} s, two "
          f"refreshes "
          f"{2 * refresh:g} s); metric divergences after catch-up {totals['metrics']}, inspect divergences "
          f"{totals['inspect']}; exact-fit verdicts right {totals['right']}/{totals['judged']}; "
          f"answers {reviews.answers}, wrong {len(reviews.wrong)}")
    if samples:
        first, last = samples[0], samples[-1]
        tail = samples[-11:]
        print(f"over {len(samples)} relists: RSS {first[1]:.1f} -> {last[1]:.1f} MiB (max "
              f"{max(s[1] for s in samples):.1f}); the last ten relists add {tail[-1][1] - tail[0][1]:+.1f} MiB; "
              f"fds {min(s[2] for s in samples)}-{max(s[2] for s in samples)}, "
              f"threads {min(s[3] for s in samples)}-{max(s[3] for s in samples)}")
        print("RSS after each relist (MiB): " + " ".join(f"{s[1]:.0f}" for s in samples))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    for form in ("watch-event", "watch-http", "continue"):
        if not api.gone[form]:
            failures.append(f"no 410 of the form {form} was answered")
    for line in failures[:40] + reviews.wrong[:10]:
        print("  " + line)
    if failures or reviews.wrong:
        print("server log tail:\n" + log_tail)
    return 1 if failures or reviews.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
