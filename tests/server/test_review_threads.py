"""The first AdmissionReviews a fresh worker parses may arrive on 16 threads at once.

msgspec builds a Struct type's conversion info on first use and crashed the process (SIGSEGV)
when threads raced to build it; webhook.routes.review builds it at import. Each attempt is a fresh
interpreter (the info lives for the process) that switches threads every microsecond to make
the race likely: without the warm-up most attempts died.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]

RACE = """
import sys, threading
from webhook.routes.review import parse_review
sys.setswitchinterval(1e-6)
payload = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "resource": {"resource": "pods"},
    "userInfo": {"username": "x", "groups": ["a"]}, "object": {"metadata": {"name": "p"}}}}
start = threading.Barrier(16)
def parse():
    start.wait()
    for _ in range(50):
        assert parse_review(payload).request.uid == "u"
threads = [threading.Thread(target=parse) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("ok")
"""


def test_sixteen_threads_parse_their_first_reviews_at_once_without_crashing():
    for attempt in range(10):
        done = subprocess.run([sys.executable, "-c", RACE], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout.strip()) == (0, "ok"), \
            f"attempt {attempt}: exit {done.returncode} (-11 is SIGSEGV)\n{done.stderr[-2000:]}"
