"""`gpushare serve` against an API server that cannot be reached: one line per resource per back-off,
in plain words, and nothing from the HTTP library (urllib3 retries each request three times by
default, logging a WARNING with its retry object each time; the reflectors retry on their own).

The back-off is shortened through settings (0.05 s doubling to 0.5 s instead of 0.5 s to 30 s), so
that 6 s hold as many back-offs as several minutes at the defaults; what is proven does not depend
on the figures: each line announces the back-off it starts, and the next line of that resource
comes only after it has passed."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections import defaultdict
from datetime import datetime
from itertools import pairwise

import pytest

from tests.support.helpers import gpushare_server
from webhook.state.live import WATCHED_CUSTOM_QUOTAS

pytestmark = pytest.mark.processes

WINDOW_SECONDS = 6.0
# Every list/watch `serve` keeps: the cluster's own and the GPU quota kinds (docs/quotas.md).
RESOURCES = ("nodes", "pods", "namespaces", "resourcequotas", *(plural for *_, plural in WATCHED_CUSTOM_QUOTAS))


def test_an_unreachable_api_server_is_one_plain_line_per_resource_per_back_off(tmp_path):
    # A loopback port bound and never listened on: every connection is refused, and no other
    # process can take the port while the test runs.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    env = {"GPUSHARE_STATE__BACKOFF_INITIAL_SECONDS": "0.05", "GPUSHARE_STATE__BACKOFF_MAX_SECONDS": "0.5"}
    try:
        with gpushare_server(tmp_path, "--kubeconfig", str(kubeconfig), env=env) as server:
            try:  # the server keeps serving through the outage: the window passes without it exiting
                server.process.wait(timeout=WINDOW_SECONDS)
                raise AssertionError("gpushare serve exited while the API server was unreachable")
            except subprocess.TimeoutExpired:
                pass
            log = server.log_path.read_text()
    finally:
        closed.close()

    assert not re.search(r"urllib3|Retry\(|MaxRetryError|ConnectionPool|NewConnectionError|\[Errno", log), log
    line = re.compile(rf"^({'|'.join(RESOURCES)}): cannot reach the API server https://127\.0\.0\.1:{port}: "
                      r"connection refused; retrying in (\d+\.\d)s$")
    seen: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    for text in log.splitlines():
        if not text.startswith("{"):
            continue  # the one "serving on" line for people
        record = json.loads(text)
        if record["logger"] == "gpushare.serve":
            continue  # what it serves and where the state comes from, once at start
        assert record["logger"] == "gpushare.state", record
        match = line.match(record["message"])
        assert match, record["message"]
        seen[match.group(1)].append((datetime.fromisoformat(record["time"]), float(match.group(2))))
    assert set(seen) == set(RESOURCES)
    for resource, lines in seen.items():
        assert len(lines) >= 4, (resource, lines)  # the window held several back-offs
        for (at, announced), (next_at, _) in pairwise(lines):
            # The next line of this resource comes after the back-off the previous one announced
            # (shown rounded to 0.1 s): one line per back-off, never more.
            assert (next_at - at).total_seconds() >= announced - 0.06, (resource, lines)
