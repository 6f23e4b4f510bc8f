"""A file writer that computes the sha256 of what passes through it, on a thread.

sha256 releases the GIL, so hashing chunk n overlaps with producing and writing chunk n+1: the
digest of a large artifact costs no pass of its own. Buffers handed to `write` are hashed later
and must not change afterwards (zip headers, weight chunks and encoded entries never do). At most
`max_lag` bytes wait to be hashed at any time, which bounds the memory they keep alive.

Small writes are gathered and passed on (to the file and the hash) in one piece, hashed on the
spot: a small artifact is dozens of zip headers and short entries, and a thread, a system call
and a hash update for each would cost more than all of its bytes.
"""

from __future__ import annotations

import hashlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO

_THREAD_MIN = 256 << 10  # smaller writes are hashed inline (unless larger ones are queued)


class DigestingWriter:
    def __init__(self, f: BinaryIO, keep_up_to: int = 0, max_lag: int = 64 << 20):
        self._f = f
        self._hash = hashlib.sha256()
        self._executor: ThreadPoolExecutor | None = None
        self._pending: deque[tuple[Future, int]] = deque()
        self._lag = 0
        self._max_lag = max_lag
        self._keep_up_to = keep_up_to
        self._kept: list[bytes] | None = [] if keep_up_to else None
        self._small = bytearray()  # small writes not yet passed on
        self.size = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        self.size += n
        if n < _THREAD_MIN:  # zip headers and small entries: gathered, passed on in one piece
            self._small += view
            if len(self._small) >= _THREAD_MIN:
                self._drain()
            return n
        self._drain()
        self._out(view)
        return n

    def _drain(self) -> None:
        if self._small:
            chunk, self._small = bytes(self._small), bytearray()
            self._out(chunk)

    def _out(self, view: bytes | memoryview) -> None:
        self._f.write(view)
        if self._kept is not None:  # a small file is also returned as bytes
            if self.size <= self._keep_up_to:
                self._kept.append(view if isinstance(view, bytes) else bytes(view))
            else:
                self._kept = None
        if len(view) < _THREAD_MIN and not self._pending:
            self._hash.update(view)
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="ane-digest")
        self._pending.append((self._executor.submit(self._hash.update, view), len(view)))
        self._lag += len(view)
        while self._lag > self._max_lag:
            self._settle_oldest()

    def _settle_oldest(self) -> None:
        future, n = self._pending.popleft()
        future.result()
        self._lag -= n

    def flush(self) -> None:
        self._drain()
        self._f.flush()

    def digest(self) -> str:
        """'sha256:<hex>' of everything written. Call once, when writing is done."""
        self._drain()
        while self._pending:
            self._settle_oldest()
        return "sha256:" + self._hash.hexdigest()

    def content(self) -> bytes | None:
        """Everything written, if it stayed within `keep_up_to` bytes."""
        return b"".join(self._kept) if self._kept is not None else None

    def __enter__(self) -> DigestingWriter:
        return self

    def __exit__(self, *exc) -> None:
        if self._executor is not None:  # after an error: drop what is queued
            self._executor.shutdown(cancel_futures=True)
