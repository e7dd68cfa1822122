"""Process-wide settings of a serving worker, whichever kind runs the app."""

from __future__ import annotations

import ctypes
import sys

from webhook.settings import OverloadSettings

_M_MMAP_THRESHOLD = -3  # glibc malloc.h


def tune_process(limits: OverloadSettings) -> None:
    """Python's thread switch interval and glibc's handling of large buffers, for serving.

    Threads evaluating hold the GIL for ``overload.switch_interval_seconds`` before another
    thread (the poller, a probe's) may take it back: shorter than Python's 5 ms keeps probes
    and handshakes quick while threads evaluate. With one thread running it changes nothing."""
    sys.setswitchinterval(limits.switch_interval_seconds)
    _return_large_buffers()


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
