"""Process-wide settings of a serving worker, whichever kind runs the app."""

from __future__ import annotations

import ctypes
import gc
import sys
from typing import Any

from webhook.settings import OverloadSettings

_M_MMAP_THRESHOLD = -3  # glibc malloc.h


def tune_process(limits: OverloadSettings) -> None:
    """Python's thread switch interval and glibc's handling of large buffers, for serving.

    Threads evaluating hold the GIL for ``overload.switch_interval_seconds`` before another
    thread (the poller, a probe's) may take it back: shorter than Python's 5 ms keeps probes
    and handshakes quick while threads evaluate. With one thread running it changes nothing."""
    sys.setswitchinterval(limits.switch_interval_seconds)
    _return_large_buffers()
    keep_full_collections_short()


def keep_full_collections_short() -> None:
    """After each full collection of the cyclic garbage collector, move what survived it out of
    the collector's reach (``gc.freeze``), as start-up does with what it built.

    Long-lived objects keep arriving while serving: the nodes and pods a watch delivers, the
    GC001 index's groupings for a new set of label keys (a grouping by node name at 5,000 nodes is
    about 100,000 objects). A full collection reads every one of them each time: 60-100 ms in
    one piece, with the GIL held, so a review or a health probe waits that long behind it. What
    survives a full collection is reachable, so freezing it frees nothing that was garbage;
    reference counting still frees a frozen object when its last reference goes (only a cycle
    among frozen objects would stay). The next full collection then reads only what came since.
    Idempotent: installed once per process."""
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()


def _return_large_buffers() -> None:
    """Have glibc map every allocation of 1 MiB or more on its own, and give it back when freed.

    Answers of megabytes (a /metrics scrape at 5,000 nodes, a /dry-run answer) are built and
    freed all the time. glibc's default raises its mapping threshold to the largest block freed
    so far, after which such buffers come from the heap, whose free space is rarely returned: the
    worker's resident memory grew by a hundred megabytes under clients pipelining scrapes and
    stayed there. A fixed threshold (mallopt M_MMAP_THRESHOLD) keeps it flat. Not glibc: nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.mallopt(ctypes.c_int(_M_MMAP_THRESHOLD), ctypes.c_int(1024 * 1024))
    except (OSError, AttributeError):
        pass
