"""The JSON log writer: lines are formatted where they are logged and written in batches."""

import io
import json
import logging
import time

from app.observability.logs import BatchWriter, JSONFormatter


def _logger(handler: logging.Handler) -> logging.Logger:
    log = logging.getLogger(f"ane.test.{id(handler)}")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)
    return log


def test_lines_arrive_in_order_as_json_within_the_interval():
    stream = io.StringIO()
    writer = BatchWriter(stream, interval=0.02)
    writer.setFormatter(JSONFormatter())
    log = _logger(writer)
    try:
        for i in range(300):
            log.info("request", extra={"n": i, "route": "/v1/ops"})
        deadline = time.monotonic() + 5
        while stream.getvalue().count("\n") < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert [d["n"] for d in lines] == list(range(300))
        assert lines[0]["msg"] == "request" and lines[0]["route"] == "/v1/ops"
        assert lines[0]["level"] == "info" and lines[0]["ts"].endswith("Z")
    finally:
        writer.close()


def test_close_writes_what_is_still_gathered():
    stream = io.StringIO()
    writer = BatchWriter(stream, interval=60)  # the writer thread would not wake by itself
    writer.setFormatter(JSONFormatter())
    _logger(writer).info("last words", extra={"job": "j1"})
    assert stream.getvalue() == ""
    writer.close()
    assert json.loads(stream.getvalue())["job"] == "j1"
