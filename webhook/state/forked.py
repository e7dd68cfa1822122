"""Run work in a forked child of the serving process, so that it never holds the worker's
interpreter lock: the periodic audit (``audit_loop``) runs this way.

Why a fork: the child starts with the process's memory as it is at that instant (the live state
included, shared copy-on-write, nothing serialised) and runs under its own interpreter lock, on
whatever core the kernel gives it. Request threads of the worker never wait behind it.

Only the forking thread exists in the child, so the child must not need anything another thread
of the worker may have held at the fork. What this module does about that:

- the caller names the locks the child's work takes (the state's) and ``start`` forks while
  holding them, so no writer is half-way through a change in the child's copy;
- the child never writes to the inherited stdout/stderr (their buffer locks may be held): it
  replaces them with /dev/null, turns logging and warnings off, and says everything through its
  pipe; the parent logs;
- the child closes every inherited file descriptor but its pipes: the worker's client
  connections and listening sockets must not stay open in it (a connection the worker closes
  would otherwise stay open until the child ends);
- it restores the default signal handlers (the worker's act on the worker's state), disables
  the cyclic garbage collector (a collection would touch, and so copy, every page of the state),
  lowers its priority (where it shares a core with the worker, requests go first), asks the
  kernel to kill it if the thread that forked it ends (``PR_SET_PDEATHSIG``), and always ends
  with ``os._exit``: no exit handler of the worker (releasing the Lease...) runs in it;
- the parent gives every exchange a deadline and kills a child that misses it, so a child that
  does hang on something inherited costs one run, never the worker.

Messages are JSON objects, one per line, over two pipes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import resource
import select
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h
CHILD_NICE = 10
_SIGNALS = ("SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGWINCH", "SIGCHLD", "SIGABRT",
            "SIGTTIN", "SIGTTOU", "SIGPIPE")


class ChildFailed(RuntimeError):
    """The child ended, or missed a deadline, without the answer expected."""


@dataclass(frozen=True)
class ChildExit:
    status: int  # the exit status, or -N when killed by signal N
    cpu_seconds: float  # user + system time the child used
    peak_rss_mib: float  # its peak resident memory (pages shared with the worker included)


class Channel:
    """One end of the conversation: JSON lines in, JSON lines out."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._read, self._write = read_fd, write_fd
        self._buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        while data:
            data = data[os.write(self._write, data):]

    def receive(self, deadline: float | None = None) -> dict[str, Any] | None:
        """The next message; None when the other end closed. Raises TimeoutError past ``deadline``
        (a ``time.monotonic()`` value; None waits as long as it takes)."""
        while b"\n" not in self._buffer:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([self._read], [], [], remaining)[0]:
                    raise TimeoutError
            chunk = os.read(self._read, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ChildFailed(f"unexpected message {line[:80]!r}")
        return message

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)


class Child:
    """The parent's handle on a running child."""

    def __init__(self, pid: int, channel: Channel) -> None:
        self.pid, self.channel = pid, channel
        self._exit: ChildExit | None = None

    def receive(self, deadline: float) -> dict[str, Any]:
        try:
            message = self.channel.receive(deadline)
        except TimeoutError:
            self.kill()
            raise ChildFailed("did not answer in time; stopped") from None
        except ValueError as exc:  # not JSON: nothing it says can be trusted
            self.kill()
            raise ChildFailed(f"said something unreadable: {exc}") from None
        if message is None:
            ended = self.wait(deadline)
            raise ChildFailed(f"ended without an answer (exit status {ended.status})")
        return message

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.channel.send(message)
        except OSError as exc:  # it ended meanwhile
            raise ChildFailed(f"ended early ({exc.strerror})") from None

    def wait(self, deadline: float) -> ChildExit:
        """Reap the child (killed at ``deadline`` if still running) and return what it used."""
        if self._exit is not None:
            return self._exit
        if not _exits_by(self.pid, deadline):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        try:
            _, status, usage = os.wait4(self.pid, 0)
        except ChildProcessError:  # reaped by someone else (a SIGCHLD handler): nothing to measure
            self._exit = ChildExit(0, 0.0, 0.0)
        else:
            code = os.waitstatus_to_exitcode(status)
            self._exit = ChildExit(code, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
        self.channel.close()
        return self._exit

    def kill(self) -> ChildExit:
        if self._exit is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        return self.wait(time.monotonic() + 60)


def start(work: Callable[[Channel], None], held: Iterable[AbstractContextManager[Any]] = ()) -> Child:
    """Fork; the child runs ``work(channel)`` then exits (status 0, or 1 when ``work`` raised:
    the error is sent as ``{"error": ...}`` first). Forks while holding ``held``."""
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    parent = os.getpid()
    with contextlib.ExitStack() as stack, warnings.catch_warnings():
        for lock in held:
            stack.enter_context(lock)
        # Python 3.12 warns that forking a threaded process may deadlock the child; the measures
        # above are the answer to that, and the parent's deadlines the answer to what remains.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child
        status = 1
        try:
            channel = Channel(to_child_r, to_parent_w)
            _become_child(parent, keep=(to_child_r, to_parent_w))
            try:
                work(channel)
                status = 0
            except BaseException as exc:
                channel.send({"error": _one_line(exc)})
        finally:
            os._exit(status)
    os.close(to_child_r)
    os.close(to_parent_w)
    return Child(pid, Channel(to_parent_r, to_child_w))


def _become_child(parent: int, keep: tuple[int, ...]) -> None:
    for name in _SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            with contextlib.suppress(OSError, ValueError):
                signal.signal(number, signal.SIG_DFL)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the parent's deadlines still stop it
    if os.getppid() != parent:  # the parent ended before the request above took effect
        os._exit(1)
    _close_inherited(keep)
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives until os._exit
    sys.stdout = sys.stderr = devnull
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    gc.disable()
    with contextlib.suppress(OSError):
        os.nice(CHILD_NICE)


def _exits_by(pid: int, deadline: float) -> bool:
    """Whether the child has exited (not yet reaped) by ``deadline``."""
    try:
        handle = os.pidfd_open(pid)  # Linux >= 5.3: readable once the process has exited
    except (AttributeError, OSError):
        handle = None
    if handle is not None:
        try:
            return bool(select.select([handle], [], [], max(0.0, deadline - time.monotonic()))[0])
        finally:
            os.close(handle)
    while time.monotonic() < deadline:  # elsewhere: look at it, without reaping it
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        time.sleep(0.01)  # pacing the look, within the deadline
    return False


def _close_inherited(keep: tuple[int, ...]) -> None:
    try:
        fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    except OSError:  # no /proc: everything up to the limit
        fds = list(range(3, min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 65536)))
    for fd in fds:
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
