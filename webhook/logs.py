"""Logging set-up: one JSON object per line on stderr (python-json-logger), or key=value text.

The same formatter serves our loggers (``gpushare.*``) and gunicorn's error log, so a log
collector sees one format. Request lines are built in ``webhook.observe``.
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import logging
import os
import queue
import sys
import threading
from typing import Any, TextIO

from pythonjsonlogger.json import JsonFormatter

from policies.settings import LogSettings

JSON_FIELDS = "%(levelname)s %(name)s %(message)s"
RENAMED = {"levelname": "level", "name": "logger"}
# LogRecord attributes that are not caller-supplied fields, for the text format.
_RECORD_KEYS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class TextFormatter(logging.Formatter):
    """``time level logger message key=value ...``: the JSON line's fields, for a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in vars(record).items() if k not in _RECORD_KEYS}
        if isinstance(record.msg, dict):  # a request line: the dict holds the message and its fields
            fields = {k: v for k, v in record.msg.items() if k != "message"} | fields
            record = logging.makeLogRecord({**vars(record), "msg": record.msg.get("message", ""), "args": ()})
        return super().format(record) + "".join(f" {k}={v}" for k, v in fields.items())


def json_formatter() -> logging.Formatter:
    return JsonFormatter(JSON_FIELDS, rename_fields=RENAMED, timestamp="time", json_ensure_ascii=True)


def formatter_for(settings: LogSettings) -> logging.Formatter:
    return json_formatter() if settings.format == "json" else TextFormatter()


def configure_logging(settings: LogSettings) -> None:
    """Route the root logger to stderr in the configured format and level."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter_for(settings))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.level.upper())


def gunicorn_logconfig(settings: LogSettings) -> dict[str, Any]:
    """gunicorn's ``logconfig_dict``: its error log in our format, its access log off (we log requests)."""
    formatter: dict[str, Any] = (
        {"()": JsonFormatter, "fmt": JSON_FIELDS, "rename_fields": RENAMED, "timestamp": "time"}
        if settings.format == "json" else {"()": TextFormatter})
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"gpushare": formatter},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "gpushare",
                                "stream": "ext://sys.stderr"}},
        "root": {"level": settings.level.upper(), "handlers": ["stderr"]},
        "loggers": {
            # gunicorn's own chatter (worker boots) only at debug; its warnings and errors always.
            "gunicorn.error": {"level": "DEBUG" if settings.level == "debug" else "WARNING",
                               "handlers": ["stderr"], "propagate": False},
            "gunicorn.access": {"level": "CRITICAL", "handlers": [], "propagate": False},
        },
    }


class RequestLog:
    """One line per admission review, in the configured format, written by one background thread.

    A request line is on the hot path. Through ``logging`` it cost a LogRecord, a formatter and
    a write syscall under the handler's lock on every request thread; with 16 threads the lock
    and the syscall made them queue behind each other (measured: 170 µs of server CPU per
    request). Here the request thread only encodes the line and puts it on a queue; a writer
    thread writes whatever has queued up in one call, under the handler's own lock so lines
    never interleave with other log output. Lines have the same fields, order and format as the
    formatter would give them. Queued lines are written out at exit.
    """

    LOGGER = "gpushare.admission"
    _BATCH = 512

    def __init__(self, settings: LogSettings) -> None:
        self._logger = logging.getLogger(self.LOGGER)
        self._json = settings.format == "json"
        self._text = TextFormatter()
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_pid = 0
        self._start_lock = threading.Lock()

    def enabled(self) -> bool:
        return self._logger.isEnabledFor(logging.INFO)

    @staticmethod
    def _target() -> tuple[TextIO, threading.RLock | None]:
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler):
                return handler.stream, handler.lock
        return sys.stderr, _FALLBACK_LOCK

    def line(self, fields: dict[str, Any]) -> str:
        if self._json:
            now = dt.datetime.now(dt.UTC).isoformat()
            return json.dumps({"level": "INFO", "logger": self.LOGGER, **fields, "time": now}, default=str)
        record = logging.makeLogRecord({"name": self.LOGGER, "levelno": logging.INFO, "levelname": "INFO",
                                        "msg": fields, "args": ()})
        return self._text.format(record)

    def write(self, fields: dict[str, Any]) -> None:
        self._ensure_writer()
        self._queue.put(self.line(fields))

    def _ensure_writer(self) -> None:
        # Started lazily and again after a fork: threads do not survive into a gunicorn worker.
        if self._writer is not None and self._writer_pid == os.getpid():
            return
        with self._start_lock:
            if self._writer is None or self._writer_pid != os.getpid():
                self._writer_pid = os.getpid()
                self._writer = threading.Thread(target=self._drain_forever, name="request-log", daemon=True)
                self._writer.start()
                atexit.register(self.close)

    def _drain_forever(self) -> None:
        while True:
            first = self._queue.get()
            lines = [first]
            while len(lines) < self._BATCH:
                try:
                    lines.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            done = None in lines
            self._emit([line for line in lines if line is not None])
            if done:
                return

    def _emit(self, lines: list[str]) -> None:
        if not lines:
            return
        stream, lock = self._target()
        text = "\n".join(lines) + "\n"
        try:
            if lock is None:
                stream.write(text)
                stream.flush()
                return
            with lock:
                stream.write(text)
                stream.flush()
        except (OSError, ValueError):  # the stream is gone (closed at exit): nothing left to tell
            return

    def close(self, timeout: float = 2.0) -> None:
        """Write out what is queued and stop the writer."""
        writer = self._writer
        if writer is None or not writer.is_alive() or self._writer_pid != os.getpid():
            return
        self._queue.put(None)
        writer.join(timeout)


_FALLBACK_LOCK = threading.RLock()
