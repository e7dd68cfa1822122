"""Closing after an answer without a reset: FIN first, then what the client still sends is
read and dropped until it closes or ``LINGER_SECONDS`` pass, from the poller (never blocking).
A close with unread bytes in the socket makes the kernel send a reset, which can destroy the
answer before the client has read it."""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from collections import deque
from functools import partial
from typing import Any

from webhook.server.connection import close_quietly

LINGER_SECONDS = 2.0


class Lingering:
    """Sockets being closed, registered in the poller's selector until they are done."""

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self._selector = selector
        self._socks: deque[tuple[float, socket.socket]] = deque()

    def add(self, sock: socket.socket) -> None:
        try:
            socket.socket.shutdown(sock, socket.SHUT_WR)
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ, partial(self._drain, sock))
        except (OSError, ValueError, KeyError):
            close_quietly(sock)
            return
        self._socks.append((time.monotonic() + LINGER_SECONDS, sock))

    def _drain(self, sock: socket.socket, _fileobj: Any) -> None:
        try:
            while socket.socket.recv(sock, 65536):
                pass
        except BlockingIOError:
            return  # more may come; the poller calls again, the deadline ends it
        except OSError:
            pass
        self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(sock)
        close_quietly(sock)

    def expire(self, now: float) -> None:
        while self._socks and (self._socks[0][0] <= now or self._socks[0][1].fileno() < 0):
            self._close(self._socks.popleft()[1])

