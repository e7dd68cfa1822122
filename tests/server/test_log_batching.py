"""Request lines are written in batches (one write per telemetry batch), in order with other records."""

from __future__ import annotations

import io
import json
import logging

from webhook.http.logs import GpushareJsonFormatter, LineBatchingHandler, RequestLog
from webhook.settings import LogSettings


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_request_lines_wait_for_flush_and_other_records_keep_their_order():
    stream = CountingStream()
    handler = LineBatchingHandler(stream)
    handler.setFormatter(GpushareJsonFormatter())
    logger = logging.getLogger("gpushare.admission")
    other = logging.getLogger("gpushare.test-batching")
    saved = logger.handlers[:], logger.propagate, logger.level
    logger.handlers[:], logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    other.addHandler(handler)
    other.propagate = False
    try:
        request_log = RequestLog(LogSettings())
        for uid in ("a", "b", "c"):
            request_log.write({"message": "admission", "uid": uid, "decision": "allowed"}, 1700000000.0)
        assert stream.getvalue() == ""  # kept until the batch ends
        request_log.flush()
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert [line["uid"] for line in lines] == ["a", "b", "c"]
        assert stream.writes == 1  # three lines, one write
        assert lines[0]["time"] == "2023-11-14T22:13:20+00:00" and lines[0]["logger"] == "gpushare.admission"
        request_log.write({"message": "admission", "uid": "d", "decision": "denied"}, 1700000001.0)
        other.warning("state is stale")  # never held back, and after the line logged before it
        texts = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert [t.get("uid", t["message"]) for t in texts] == ["a", "b", "c", "d", "state is stale"]
    finally:
        logger.handlers[:], logger.propagate = saved[0], saved[1]
        logger.setLevel(saved[2])
        other.removeHandler(handler)
