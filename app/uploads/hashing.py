"""Hashes an upload's tensor bytes while they arrive, on a thread beside the event loop.

The digest covers only the tensor's bytes (after a .npy header, or one tensor's range of a
safetensors file), so the first bytes are kept until the format and the range are known. Bytes
are handed to a one-thread executor in batches; sha256 releases the GIL, so hashing overlaps
with receiving instead of costing a second pass over the file afterwards. If the range cannot
be worked out from the stream, `result()` is None and the caller hashes the file as before.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal

from app.core.digest import spelled
from app.errors import RequestError
from app.tensors.headers import parse_header

_BATCH = 1 << 20
_MAX_PREFIX = 1 << 20  # give up on headers larger than this


def tensor_range(
    prefix: bytes, tensor_name: str | None
) -> tuple[int, int | None] | Literal[False] | None:
    """(start, end or None for "to the end of the file") of the tensor bytes; None if more bytes
    are needed to tell; False if the stream cannot say (the caller falls back)."""
    try:
        # Raw bytes: their dtype and shape do not matter for the range, which is the whole file.
        header = parse_header(prefix, "", tensor_name=tensor_name, raw_dtype="u1", raw_shape=(1,))
    except RequestError:
        return False
    if header is None:
        return None
    if header.source == "safetensors":
        return header.offset, header.offset + header.nbytes
    return header.offset, None


def _update(h, chunks: list) -> None:
    for chunk in chunks:
        h.update(chunk)


class StreamHasher:
    def __init__(self, tensor_name: str | None = None):
        self.tensor_name = tensor_name
        self._prefix = bytearray()
        self._range: tuple[int, int | None] | None = None
        self._failed = False
        self._pos = 0  # file offset of the next byte fed
        self._hashed = 0
        self._batch: list[bytes | memoryview] = []
        self._batch_bytes = 0
        self._hash = hashlib.sha256()
        self._executor: ThreadPoolExecutor | None = None
        self._last: Future | None = None

    def feed(self, chunk: bytes | memoryview) -> None:
        """`chunk` must not change afterwards (bytes, or a view of bytes)."""
        if self._failed:
            return
        start_pos = self._pos
        self._pos += len(chunk)
        if self._range is None:
            self._prefix += chunk
            found = tensor_range(bytes(self._prefix[: _MAX_PREFIX + 8]), self.tensor_name)
            if found is False or (found is None and len(self._prefix) > _MAX_PREFIX):
                self._fail()
                return
            if found is None:
                return
            self._range = found
            chunk, start_pos = bytes(self._prefix), 0
            self._prefix = bytearray()
        begin, end = self._range
        lo = max(begin - start_pos, 0)
        hi = len(chunk) if end is None else min(end - start_pos, len(chunk))
        if hi > lo:
            # Keep references, not copies: the hashing thread reads the chunks as they are.
            self._batch.append(chunk if (lo, hi) == (0, len(chunk)) else memoryview(chunk)[lo:hi])
            self._batch_bytes += hi - lo
            if self._batch_bytes >= _BATCH:
                self._submit()

    def _submit(self) -> None:
        batch, self._batch = self._batch, []
        self._hashed += self._batch_bytes
        self._batch_bytes = 0
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="ane-hash")
        self._last = self._executor.submit(_update, self._hash, batch)

    def _fail(self) -> None:
        self._failed = True
        self._prefix = bytearray()
        self.close()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def result(self) -> tuple[int, int, str] | None:
        """(offset, length, "sha256:<hex>") of what was hashed, once the stream has ended.
        Blocking (waits for the hashing thread): call it off the event loop."""
        if self._failed or self._range is None:
            return None
        if self._batch:
            self._submit()
        if self._last is not None:
            self._last.result()
        self.close()
        return self._range[0], self._hashed, spelled(self._hash.hexdigest())
