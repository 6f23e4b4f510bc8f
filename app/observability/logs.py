"""Structured JSON logs: one object per line, with the request id when there is one."""

from __future__ import annotations

import atexit
import json
import logging
import queue
import sys
import time
from logging.handlers import QueueHandler, QueueListener
from typing import Any

# Attributes every LogRecord has; anything else passed via `extra=` is a structured field.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, separators=(",", ":"))


_listener: QueueListener | None = None


def configure(level: str) -> None:
    """Route the service's loggers (and uvicorn's error log) through the JSON formatter.

    Lines are formatted on the calling thread and written by a listener thread: a write to a
    log file can block for tens of milliseconds while the disk flushes, and the event loop must
    not wait for that. uvicorn's own access log is switched off: the access middleware writes a
    richer one.
    """
    global _listener
    if _listener is not None:
        _listener.stop()
    writer = logging.StreamHandler(sys.stderr)
    writer.setFormatter(logging.Formatter("%(message)s"))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    _listener = QueueListener(records, writer)
    _listener.start()
    atexit.register(_listener.stop)
    handler = QueueHandler(records)
    handler.setFormatter(JSONFormatter())
    _route(handler, level)
    logging.getLogger("uvicorn.access").disabled = True


def _route(handler: logging.Handler, level: str | None = None) -> None:
    for name in ("ane", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.propagate = False
        if level is not None:
            logger.setLevel(level.upper())


def drain() -> None:
    """At shutdown: write what is queued and log directly from now on. A SIGTERM ends the
    process without running atexit hooks, so the listener must not be the only writer then."""
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None
    direct = logging.StreamHandler(sys.stderr)
    direct.setFormatter(JSONFormatter())
    _route(direct)
