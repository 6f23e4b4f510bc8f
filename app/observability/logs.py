"""Structured JSON logs: one object per line, with the request id when there is one."""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from typing import Any, TextIO

import orjson

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
        return orjson.dumps(doc, default=str).decode()


class BatchWriter(logging.Handler):
    """Formats on the logging thread; a writer thread writes what has gathered every
    `interval` seconds (sooner past `max_lines`), in one write.

    The event loop must never wait on a log file (a write can block for tens of milliseconds
    while the disk flushes). Handing every line to a writer thread on its own made the two
    threads trade the GIL on every request: that cost a third of the cache-hit rate and put
    60-80 ms stalls into its p99. Batches make that a handful of trades a second.
    """

    def __init__(self, stream: TextIO, interval: float = 0.05, max_lines: int = 1024):
        super().__init__()
        self.stream, self.interval, self.max_lines = stream, interval, max_lines
        self._lines: list[str] = []
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="ane-log-writer", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:  # called under self.lock
        try:
            self._lines.append(self.format(record))
        except Exception:
            self.handleError(record)
            return
        if len(self._lines) >= self.max_lines:
            self._wake.set()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.interval)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        # made by Handler.__init__ (createLock); typeshed allows None for a subclass that skips it
        with self.lock:  # type: ignore[union-attr]
            lines, self._lines = self._lines, []
        if lines:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=1)
        self.flush()
        super().close()


_writer: BatchWriter | None = None


def configure(level: str) -> None:
    """Route the service's loggers (and uvicorn's error log) through the JSON formatter, written
    in batches (`BatchWriter`). uvicorn's own access log is switched off: the access middleware
    writes a richer one."""
    global _writer
    if _writer is not None:
        _writer.close()
    _writer = BatchWriter(sys.stderr)
    _writer.setFormatter(JSONFormatter())
    atexit.register(_writer.close)
    _route(_writer, level)
    logging.getLogger("uvicorn.access").disabled = True


def _route(handler: logging.Handler, level: str | None = None) -> None:
    for name in ("ane", "arq", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.propagate = False
        if level is not None:
            logger.setLevel(level.upper())


def drain() -> None:
    """At shutdown: write what is gathered and log directly from now on. A SIGTERM ends the
    process without running atexit hooks, so the writer thread must not be the only writer."""
    global _writer
    if _writer is not None:
        _writer.close()
        _writer = None
    direct = logging.StreamHandler(sys.stderr)
    direct.setFormatter(JSONFormatter())
    _route(direct)
