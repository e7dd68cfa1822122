"""Benchmark: the real `gpushare serve` under hostile clients, on loopback only, bounded.

    python bench/attack.py [--seconds 30] [--nodes 5000] [--pods 40000] [--attacks none,...] [--pin]

The server judges a snapshot of ``--nodes`` GPU nodes (8 x 16 GiB cards each, half of them
core_mem) and ``--pods`` GPU pods placed on their cards. For each attack, run for ``seconds``
(bounded in connections and rate):

- slow-headers: 200 TLS connections trickling request headers, a byte per second each;
- slow-body: 200 TLS connections sending complete headers, then the body a byte per second;
- slow-handshake: 200 TCP connections trickling a TLS ClientHello, a byte per second;
- idle-tls: 1,000 TLS connections that finish the handshake and send nothing;
- nested-yaml: two concurrent 40 KB bodies of nested flow sequences per second to /dry-run;
- inline-stall: two connections sending legal reviews under overload.inline_max_bytes, one
  after the other, each as costly as such a review can be: a Pod with ~900 required node
  affinity terms no node matches (63 KB), a Pod with ~750 containers, a Deployment with ~750
  containers (each with new names and label keys, so nothing remembered helps);
- probe-starvation: three connections sending costly reviews over the inline limit (~1,500
  failing affinity terms, 105 KB), which threads evaluate in the evaluation slots;
- unread-pipelining: 20 connections (10 on /metrics, 10 on /mutate with 40-container pods)
  pipelining requests and reading nothing, from a small receive window; reopened when closed;
- dry-run-documents: two connections posting /dry-run bodies of 10,000 tiny documents, 400
  documents and 100 documents in turn;
- shed-latch: the inline-stall and probe-starvation clients for ``seconds``, then nothing: the
  legitimate clients are measured after the attack, with ``?timeout=2s``.
Closed connections are reopened (at most 100 a second), as an attacker would.
Meanwhile two legitimate clients each send the realistic 4 KB Pod review to /validate every
0.2 s (``?timeout=5s``): one on a kept-alive connection, one on a new connection per review; and
a prober GETs /healthz on a new connection every 0.1 s, as the kubelet does, on the probe port
(``server.probe_port``, as the deploy manifests set it; a second prober does the same on the
admission port over TLS, for comparison). Prints, per attack,
answered (200) / sent and p50/p99/max latency of the reviews, /healthz p99 and max, whether the
worker process is the one that served before the attack, and the server's peak RSS against its
RSS when idle (after start-up). Targets: >= 99 % answered with p99 < 1 s, /healthz p99 < 100 ms,
the same worker, peak RSS <= 1.5 x idle, under every attack.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import itertools
import json
import multiprocessing
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.admission import api_server_json, realistic_review_body, review_for  # noqa: E402
from bench.overload import PeakRss  # noqa: E402
from certs.issue import ensure_serving_certs  # noqa: E402
from tests.support.processes import answer_status, children, free_port, host_speed, https_server, rss_mib  # noqa: E402

HOST = "127.0.0.1"
ATTACKS = ("none", "slow-headers", "slow-body", "slow-handshake", "idle-tls", "nested-yaml", "inline-stall",
           "probe-starvation", "unread-pipelining", "dry-run-documents", "shed-latch")
COUNTS = {"slow-headers": 200, "slow-body": 200, "slow-handshake": 200, "idle-tls": 1000}
REOPEN_PER_SECOND = 100
# overload.inline_max_bytes counts the whole request: the body leaves room for its head.
INLINE_MAX = 64 * 1024 - 256


def nested_yaml(size: int = 40 * 1024) -> bytes:
    depth = (size - 4) // 2
    return b"x: " + b"[" * depth + b"]" * depth + b"\n"


def snapshot(nodes: int, pods: int) -> dict:
    """``nodes`` nodes of 8 x 16 GiB cards (half core_mem), ``pods`` 2 GiB pods placed on their cards."""
    items: list[dict] = []
    per_node = max(1, pods // max(nodes, 1))
    for n in range(nodes):
        name = f"gpu-{n:05d}"
        mode = "core_mem" if n % 2 else "cgpu"
        items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "ack.node.gpu.schedule": mode, "aliyun.accelerator/nvidia_name": "Tesla-V100-SXM2-16GB",
            "kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": "ecs.gn6v-c8g1.16xlarge",
            "topology.kubernetes.io/zone": f"cn-beijing-{'abcd'[n % 4]}", "gpushare.io/cpu-manager-policy": "none"}},
            "spec": {"providerID": f"cn-beijing.i-{n:08d}"},
            "status": {"addresses": [{"type": "InternalIP", "address": f"10.{n // 250}.{n % 250}.1"}],
                       "allocatable": {"aliyun.com/gpu-count": "8", "aliyun.com/gpu-mem": "128",
                                       **({"aliyun.com/gpu-core.percentage": "800"} if mode == "core_mem" else {})}}})
        for p in range(per_node if n * per_node < pods else 0):
            limits = {"aliyun.com/gpu-mem": "2"}
            if mode == "core_mem":
                limits["aliyun.com/gpu-core.percentage"] = "10"
            items.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{name}-p{p}", "namespace": f"team-{p % 8}",
                "annotations": {"scheduler.framework.gpushare.allocation": json.dumps({"0": {str(p % 8): 2}})}},
                "spec": {"nodeName": name, "schedulerName": "ack-co-scheduler",
                         "containers": [{"name": "c", "image": "cuda", "resources": {"limits": limits}}]},
                "status": {"phase": "Running"}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


# -- the costly bodies an attacker sends (every one a legal object the API server would send)

_serial = itertools.count()


def _pod(containers: list[dict], spec: dict | None = None) -> dict:
    n = next(_serial)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"costly-{n}", "namespace": "default"},
            "spec": {**(spec or {}), "containers": containers}}


def _gpu_container(name: str) -> dict:
    return {"name": name, "image": "x", "resources": {"limits": {"aliyun.com/gpu-mem": 1}}}


def _largest(make: Callable[[int], bytes], limit: int) -> bytes:
    """``make(n)`` for the largest n whose body fits in ``limit`` bytes."""
    low, high = 0, 1
    while len(make(high)) <= limit:
        low, high = high, high * 2
    best = make(low)
    while high - low > 1:
        middle = (low + high) // 2
        body = make(middle)
        if len(body) <= limit:
            low, best = middle, body
        else:
            high = middle
    return best


def failing_terms_review(limit: int) -> bytes:
    """A Pod whose required node affinity has as many terms as fit in ``limit`` bytes, each on a
    label key no node has (new keys every time)."""
    n = next(_serial)

    def make(count: int) -> bytes:
        terms = [{"matchExpressions": [{"key": f"example.com/absent-{n}-{i}", "operator": "Exists"}]}
                 for i in range(count)]
        return api_server_json(review_for(_pod([_gpu_container("cuda")], {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})))

    return _largest(make, limit)


def many_containers_review(limit: int, kind: str = "Pod") -> bytes:
    """A Pod (or a Deployment's template) with as many 1 GiB containers as fit in ``limit`` bytes."""
    n = next(_serial)

    def make(count: int) -> bytes:
        containers = [_gpu_container(f"c{n}-{i}") for i in range(count)]
        if kind == "Pod":
            return api_server_json(review_for(_pod(containers)))
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": f"d{n}", "namespace": "default"},
                      "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}}, "template": {
                          "metadata": {"labels": {"app": "d"}}, "spec": {"containers": containers}}}}
        return api_server_json(review_for(deployment, group="apps", resource="deployments"))

    return _largest(make, limit)


INLINE_STALL = (lambda: failing_terms_review(INLINE_MAX), lambda: many_containers_review(INLINE_MAX),
                lambda: many_containers_review(INLINE_MAX, "Deployment"))


def post(path: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _tls(port: int, ca: str, rcvbuf: int | None = None) -> ssl.SSLSocket:
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    raw.settimeout(60)
    raw.connect((HOST, port))
    return ssl.create_default_context(cafile=ca).wrap_socket(raw, server_hostname="localhost")


def _one_by_one(port: int, ca: str, stop: float, bodies: Iterator[bytes], opened: list[int],
                path: str = "/validate?timeout=30s", content_type: str = "application/json") -> None:
    """Send a costly body, read its answer, send the next, until ``stop``; reconnect when closed."""
    sock = None
    while time.monotonic() < stop:
        try:
            if sock is None:
                sock = _tls(port, ca)
                opened[0] += 1
            sock.sendall(post(path, next(bodies), content_type))
            answer_status(sock)
        except (OSError, ConnectionError):
            if sock is not None:
                sock.close()
            sock = None


def _unread(port: int, ca: str, stop: float, request: bytes, opened: list[int]) -> None:
    """Pipeline ``request`` as long as the kernel takes it and read nothing; reopen when the
    server closes the connection (a send then fails)."""
    while time.monotonic() < stop:
        try:
            sock = _tls(port, ca, rcvbuf=4096)
        except OSError:
            continue
        opened[0] += 1
        sock.setblocking(False)
        try:
            while time.monotonic() < stop:
                try:
                    sock.send(request)
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                    threading.Event().wait(0.05)  # the sockets are full: the attacker's own pace
        except OSError:
            pass  # closed by the server: open another
        finally:
            sock.close()


def _dry_run_bodies() -> Iterator[bytes]:
    doc = b"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x, " \
          b"resources: {limits: {aliyun.com/gpu-mem: 1}}}]}\n"
    return itertools.cycle([b"---\n".join([doc] * count) for count in (10_000, 400, 100)])


VARIANTS = 24  # distinct bodies of each costly shape, with their own names and keys (more than the
# 16 selector groupings the server keeps), made before the attack: making them costs the attacker
# more CPU than the server spends on them, and the host has two cores for both.


def costly_bodies(kind: str) -> dict[str, list[bytes]]:
    bodies: dict[str, list[bytes]] = {}
    if kind in ("inline-stall", "shed-latch"):
        bodies["inline"] = [make() for _ in range(VARIANTS) for make in INLINE_STALL]
    if kind in ("probe-starvation", "shed-latch"):
        bodies["large"] = [failing_terms_review(105_000) for _ in range(VARIANTS)]
    return bodies


def _threads_attack(kind: str, port: int, ca: str, seconds: float, bodies: dict[str, list[bytes]]) -> int:
    stop = time.monotonic() + seconds
    opened = [0]
    targets: list[tuple] = []
    if "inline" in bodies:
        targets += [(_one_by_one, (port, ca, stop, itertools.cycle(bodies["inline"][i::2]), opened))
                    for i in range(2)]
    if "large" in bodies:
        targets += [(_one_by_one, (port, ca, stop, itertools.cycle(bodies["large"][i::3]), opened))
                    for i in range(3)]
    if kind == "unread-pipelining":
        metrics = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"
        pod = json.loads((ROOT / "tests" / "data" / "pod-realistic.json").read_text())
        pod["spec"]["containers"] = [dict(pod["spec"]["containers"][0], name=f"cuda-{i}") for i in range(40)]
        mutate = post("/mutate", api_server_json(review_for(pod)))
        targets += [(_unread, (port, ca, stop, request, opened)) for request in [metrics] * 10 + [mutate] * 10]
    if kind == "dry-run-documents":
        targets += [(_one_by_one, (port, ca, stop, _dry_run_bodies(), opened, "/dry-run", "application/yaml"))
                    for _ in range(2)]
    threads = [threading.Thread(target=fn, args=args, daemon=True) for fn, args in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 120)
    return opened[0]


class _Pacer:
    """At most REOPEN_PER_SECOND connections opened per second across all slots."""

    def __init__(self) -> None:
        self.next = time.monotonic()

    async def turn(self) -> None:
        now = time.monotonic()
        self.next = max(self.next, now) + 1 / REOPEN_PER_SECOND
        await asyncio.sleep(self.next - now)  # the attack's own rate limit


async def _hold(kind: str, port: int, ca: str, stop: float, opened: list[int], pacer: _Pacer) -> None:
    """One hostile connection slot: open, misbehave until closed, reopen (paced)."""
    context = ssl.create_default_context(cafile=ca)
    while time.monotonic() < stop:
        await pacer.turn()
        writer = None
        try:
            if kind == "slow-handshake":
                reader, writer = await asyncio.open_connection(HOST, port)
                drip = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(200)
            else:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(HOST, port, ssl=context, server_hostname="localhost"), 10)
                if kind == "slow-headers":
                    drip = b"POST /validate HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 4000
                elif kind == "slow-body":
                    writer.write(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 4096\r\n\r\n")
                    drip = b"{" + b" " * 4000
                else:  # idle-tls
                    drip = b""
            opened[0] += 1
            for i in range(10_000):
                if time.monotonic() >= stop:
                    break
                if drip and i < len(drip):
                    writer.write(drip[i:i + 1])
                    await writer.drain()
                try:  # a byte a second; a closed connection ends the wait early
                    if await asyncio.wait_for(reader.read(4096), 1.0) == b"":
                        break
                except TimeoutError:
                    pass
        except (OSError, ssl.SSLError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            if writer is not None:
                writer.close()


async def _attack(kind: str, port: int, ca: str, seconds: float) -> int:
    stop = time.monotonic() + seconds
    opened = [0]
    if kind == "nested-yaml":
        body = nested_yaml()
        head = (f"POST /dry-run HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/yaml\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        context = ssl.create_default_context(cafile=ca)

        async def one() -> None:
            try:
                reader, writer = await asyncio.open_connection(HOST, port, ssl=context, server_hostname="localhost")
                writer.write(head + body)
                await asyncio.wait_for(reader.read(), 30)
                writer.close()
            except (OSError, ssl.SSLError, TimeoutError):
                pass

        tasks = []
        while time.monotonic() < stop:
            tasks += [asyncio.create_task(one()), asyncio.create_task(one())]
            opened[0] += 2
            await asyncio.sleep(1.0)  # the attack's own rate: two bodies a second
        await asyncio.gather(*tasks)
        return opened[0]
    pacer = _Pacer()
    await asyncio.gather(*(_hold(kind, port, ca, stop, opened, pacer) for _ in range(COUNTS[kind])))
    return opened[0]


def _attacker(kind: str, port: int, ca: str, seconds: float, out: multiprocessing.Queue,
              bodies: dict[str, list[bytes]]) -> None:
    if kind in COUNTS or kind == "nested-yaml":
        out.put(asyncio.run(_attack(kind, port, ca, seconds)))
    else:
        out.put(_threads_attack(kind, port, ca, seconds, bodies))


class Legit:
    """A legitimate client sending one review every 0.2 s, on a kept-alive or a new connection each time."""

    def __init__(self, port: int, ca: str, body: bytes, kept_alive: bool, seconds: float, path: str) -> None:
        self.port, self.body, self.kept_alive, self.seconds, self.path = port, body, kept_alive, seconds, path
        self.context = ssl.create_default_context(cafile=ca)
        self.latencies: list[float] = []
        self.sent = 0
        self.failures: dict[str, int] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = None
        start = time.monotonic()
        i = 0
        while True:
            due = start + i * 0.2
            if due >= start + self.seconds:
                break
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the client's own schedule
            i += 1
            self.sent += 1
            began = time.monotonic()
            try:
                if conn is None or not self.kept_alive:
                    conn = http.client.HTTPSConnection(HOST, self.port, context=self.context, timeout=10)
                conn.request("POST", self.path, self.body, {"Content-Type": "application/json"})
                reply = conn.getresponse()
                reply.read()
                if reply.status == 200:
                    self.latencies.append(time.monotonic() - began)
                else:
                    self.failures[str(reply.status)] = self.failures.get(str(reply.status), 0) + 1
                if not self.kept_alive or reply.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                self.failures[type(exc).__name__] = self.failures.get(type(exc).__name__, 0) + 1
                if conn is not None:
                    conn.close()
                conn = None


class Prober:
    """GET /healthz on a new connection every 0.1 s, as the kubelet probes (no keep-alive): on the
    probe port (plain HTTP, as the deploy's probes), or with ``ca`` on the admission port (TLS)."""

    def __init__(self, port: int, ca: str | None, seconds: float) -> None:
        self.port, self.seconds = port, seconds
        self.context = ssl.create_default_context(cafile=ca) if ca is not None else None
        self.latencies: list[float] = []
        self.failed = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self) -> http.client.HTTPConnection:
        if self.context is None:
            return http.client.HTTPConnection(HOST, self.port, timeout=10)
        return http.client.HTTPSConnection(HOST, self.port, context=self.context, timeout=10)

    def _run(self) -> None:
        start = time.monotonic()
        for i in itertools.count():
            due = start + i * 0.1
            if due >= start + self.seconds:
                return
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the prober's own schedule
            began = time.monotonic()
            try:
                conn = self._connect()
                conn.request("GET", "/healthz")
                reply = conn.getresponse()
                reply.read()
                conn.close()
                if reply.status == 200:
                    self.latencies.append(time.monotonic() - began)
                    continue
            except (OSError, http.client.HTTPException):
                pass
            self.failed += 1


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=40000)
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument("--pin", action="store_true", help="server on CPU 0, clients and attackers on CPU 1")
    parser.add_argument("--log", type=Path, help="keep the server's log here")
    args = parser.parse_args()
    body = realistic_review_body()
    gpushare = Path(sys.executable).parent / "gpushare"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp, "certs")
        ensure_serving_certs(certs, ["localhost", "127.0.0.1"])
        ca = certs / "ca.crt"
        cluster = Path(tmp, "cluster.json")
        cluster.write_text(json.dumps(snapshot(args.nodes, args.pods)))
        port, probe_port = free_port(), free_port()
        command = [*(["taskset", "-c", "0"] if args.pin else []), str(gpushare), "serve", "--host", HOST,
                   "--port", str(port), "--cert-dir", str(certs), "--snapshot", str(cluster)]
        if args.pin:
            import os

            os.sched_setaffinity(0, {1})
        # The kubelet's probes on the probe port, as the deploy manifests set it (server.probe_port).
        with https_server(command, ca, port, args.log or Path(tmp, "server.log"), timeout=600,
                          env={"GPUSHARE_SERVER__PROBE_PORT": str(probe_port)}) as server:
            warm_up = Legit(port, str(ca), body, True, 1.0, "/validate?timeout=30s")
            warm_up.thread.start()  # a first review, as any server sees before it is measured
            warm_up.thread.join()
            worker = children(server.pid)
            idle = rss_mib(server.pid)
            print(f"{args.nodes} nodes, {args.pods} pods; idle RSS {idle:.0f} MiB; worker pid {worker}; "
                  f"host: {host_speed():.0f} ns per empty loop (about 15 when idle)", flush=True)
            print("| attack | legitimate answered | p50 | p99 | max | /healthz p99 | /healthz max | same worker "
                  "| peak RSS (x idle) | hostile connections | admission port's /healthz p99, max |\n"
                  "|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
            for kind in args.attacks.split(","):
                out: multiprocessing.Queue = multiprocessing.Queue()
                attacker = None
                build_up, opened = 0.0, 0
                path = "/validate?timeout=5s"
                bodies = costly_bodies(kind)
                with PeakRss(server.pid) as rss:
                    if kind != "none":
                        attacker = multiprocessing.Process(target=_attacker, args=(kind, port, str(ca), args.seconds,
                                                                                   out, bodies))
                        attacker.start()
                        build_up = min(3.0, args.seconds / 10)
                        time.sleep(build_up)  # let the attack build up before measuring
                    if kind == "shed-latch":  # measured after the attack, with a short deadline
                        opened = out.get(timeout=args.seconds + 180)
                        attacker.join()  # type: ignore[union-attr]
                        attacker, build_up, path = None, 0.0, "/validate?timeout=2s"
                    measured = args.seconds - build_up
                    clients = [Legit(port, str(ca), body, kept, measured, path) for kept in (True, False)]
                    prober, on_admission = Prober(probe_port, None, measured), Prober(port, str(ca), measured)
                    for client in clients:
                        client.thread.start()
                    prober.thread.start()
                    on_admission.thread.start()
                    for client in clients:
                        client.thread.join()
                    prober.thread.join()
                    on_admission.thread.join()
                    if attacker is not None:
                        opened = out.get(timeout=args.seconds + 180)
                        attacker.join()
                lat = [x for c in clients for x in c.latencies]
                sent = sum(c.sent for c in clients)
                failures: dict[str, int] = {}
                for c in clients:
                    for k, v in c.failures.items():
                        failures[k] = failures.get(k, 0) + v
                same = children(server.pid) == worker
                probes = prober.latencies
                row = (f"| {kind} | {len(lat)}/{sent} ({100 * len(lat) / max(sent, 1):.1f} %) | "
                       f"{_pct(lat, 0.5) * 1000:.0f} ms | {_pct(lat, 0.99) * 1000:.0f} ms | "
                       f"{max(lat, default=float('nan')) * 1000:.0f} ms | {_pct(probes, 0.99) * 1000:.0f} ms | "
                       f"{max(probes, default=float('nan')) * 1000:.0f} ms | {'yes' if same else 'NO'} | "
                       f"{rss.peak:.0f} MiB ({rss.peak / idle:.2f}) | {opened} | "
                       f"{_pct(on_admission.latencies, 0.99) * 1000:.0f}, "
                       f"{max(on_admission.latencies, default=float('nan')) * 1000:.0f} ms |"
                       + (f" failures: {failures}" if failures else "")
                       + (f" probes failed: {prober.failed}" if prober.failed else ""))
                met = (len(lat) / max(sent, 1) >= 0.99 and _pct(lat, 0.99) < 1.0 and _pct(probes, 0.99) < 0.1
                       and not prober.failed and same and rss.peak <= 1.5 * idle)
                rows.append(met)
                print(row, flush=True)
            alive = server.poll() is None
    print(f"\nserver still running at the end: {alive}; host: {host_speed():.0f} ns per empty loop")
    print("targets (>= 99 % answered, p99 < 1 s, /healthz p99 < 100 ms, same worker, peak RSS <= 1.5 x idle) "
          f"under every attack: {'met' if all(rows) else 'NOT met'}")


if __name__ == "__main__":
    main()
