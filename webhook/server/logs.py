"""Logging set-up: one JSON object per line on stderr (python-json-logger), or key=value text.

The same formatter serves our loggers (``gpushare.*``) and gunicorn's error log, so a log
collector sees one format. Request lines are built in ``webhook.routes.observe``.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
import threading
import time
from typing import Any, TextIO

import msgspec
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
    """One line per admission review, in the configured format, built and written off the hot path.

    ``write`` is called by the telemetry thread (webhook.server.telemetry), never by a request thread;
    ``emit`` runs after each telemetry flush and writes the lines that flush produced in one
    call, under the stream handler's own lock so they never interleave with other log output.
    Lines have the same fields, order and format as the formatter would give them.
    """

    LOGGER = "gpushare.admission"

    def __init__(self, settings: LogSettings) -> None:
        self._logger = logging.getLogger(self.LOGGER)
        self._json = settings.format == "json"
        self._text = TextFormatter()
        self._lines: list[str] = []

    def enabled(self) -> bool:
        return self._logger.isEnabledFor(logging.INFO)

    @staticmethod
    def _target() -> tuple[TextIO, threading.RLock | None]:
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler):
                return handler.stream, handler.lock
        return sys.stderr, _FALLBACK_LOCK

    def line(self, fields: dict[str, Any], when: float | None = None) -> str:
        """The line for ``fields``, stamped with ``when`` (Unix time; default now)."""
        if self._json:
            stamp = dt.datetime.fromtimestamp(time.time() if when is None else when, dt.UTC).isoformat()
            line = {"level": "INFO", "logger": self.LOGGER, **fields, "time": stamp}
            return _LINE_ENCODER.encode(line).decode()
        record = logging.makeLogRecord({"name": self.LOGGER, "levelno": logging.INFO, "levelname": "INFO",
                                        "msg": fields, "args": ()})
        if when is not None:
            record.created, record.msecs = when, (when % 1) * 1000
        return self._text.format(record)

    def write(self, fields: dict[str, Any], when: float | None = None) -> None:
        """Buffer one line; ``emit`` writes it."""
        self._lines.append(self.line(fields, when))

    def emit(self) -> None:
        """Write the buffered lines in one call."""
        if not self._lines:
            return
        lines, self._lines = self._lines, []
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


_FALLBACK_LOCK = threading.RLock()
# A request line per review: msgspec encodes one in a seventh of json.dumps' time.
_LINE_ENCODER = msgspec.json.Encoder(enc_hook=str)
