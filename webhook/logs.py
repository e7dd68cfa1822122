"""Logging set-up: one JSON object per line on stderr (python-json-logger), or key=value text.

The same formatter serves our loggers (``gpushare.*``) and gunicorn's error log, so a log
collector sees one format. Request lines are built in ``webhook.observe``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
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
    """One line per admission review, in the configured format, written straight to the log stream.

    A request line is on the hot path: building a LogRecord and running it through a formatter
    under the handler's lock cost several times the JSON encoding and made 16 threads queue on
    that lock. Here the line is encoded first, outside any lock, and only the write is locked
    (with the handler's own lock, so lines never interleave with other log output). The line
    has the same fields, order and format as the formatter would give it.
    """

    LOGGER = "gpushare.admission"

    def __init__(self, settings: LogSettings) -> None:
        self._logger = logging.getLogger(self.LOGGER)
        self._json = settings.format == "json"
        self._text = TextFormatter()

    def enabled(self) -> bool:
        return self._logger.isEnabledFor(logging.INFO)

    def _target(self) -> tuple[TextIO, threading.RLock | None]:
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler):
                return handler.stream, handler.lock
        return sys.stderr, _FALLBACK_LOCK

    def write(self, fields: dict[str, Any]) -> None:
        if self._json:
            now = dt.datetime.now(dt.UTC).isoformat()
            line = json.dumps({"level": "INFO", "logger": self.LOGGER, **fields, "time": now}, default=str)
        else:
            record = logging.makeLogRecord({"name": self.LOGGER, "levelno": logging.INFO, "levelname": "INFO",
                                            "msg": fields, "args": ()})
            line = self._text.format(record)
        stream, lock = self._target()
        if lock is None:
            stream.write(line + "\n")
            return
        with lock:
            stream.write(line + "\n")
            stream.flush()


_FALLBACK_LOCK = threading.RLock()
