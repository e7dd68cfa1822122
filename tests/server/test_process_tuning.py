"""The serving worker's garbage-collector tuning: full collections read only what came since the
last one, and cyclic garbage is still collected. Run in a child interpreter: the tuning is
process-wide and must not change how this test process collects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import gc, weakref
from webhook.server.process_tuning import keep_full_collections_short
keep_full_collections_short()
keep_full_collections_short()  # idempotent
assert gc.callbacks.count(gc.callbacks[-1]) == 1

class Node:
    pass

kept = [Node() for _ in range(50_000)]  # long-lived, as a watch's nodes and pods
gc.collect()
assert len(gc.get_objects(2)) == 0, "survivors of a full collection are frozen"
frozen = gc.get_freeze_count()
assert frozen >= 50_000, frozen

a, b = Node(), Node()
a.other, b.other = b, a  # a cycle: only the collector frees it
gone = weakref.ref(a)
del a, b
gc.collect()
assert gone() is None, "cyclic garbage is still collected"

del kept  # reference counting frees frozen objects
assert gc.get_freeze_count() < frozen - 40_000, gc.get_freeze_count()
print("ok")
"""


def test_full_collections_freeze_what_survives_and_still_free_cycles() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
