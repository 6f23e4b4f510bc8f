"""Blob Storage v2 writer: plan every offset first, stream the bytes afterwards.

Planning first lets the MIL text / Model protobuf (which embed ``BLOBFILE(offset=...)``) be built
before the weight file exists, and the file can then be streamed into any destination, including a
non-seekable zip entry. Arrays are referenced, not copied: do not mutate them between ``add`` and
``write``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from app.core.files import Sink, atomic_file

from .dtype_codes import (
    STORAGE_NP_DTYPE,
    SUBBYTE_BITS,
    BlobDType,
    blob_dtype_for,
    is_subbyte,
    pack_subbyte,
    packed_size,
    source_is_compatible,
)
from .format import ALIGNMENT, BlobEntry, pack_header, pack_metadata, round_up

DEFAULT_CHUNK_BYTES = 8 << 20
# Dedup candidates almost always differ in their first bytes; compare a small prefix first so a
# model with many same-shape weights costs a few KiB per pair, not a full pass. The same prefix,
# hashed, is part of each entry's key: a weight is compared only with those that begin as it
# does (a model's dozens of same-shape weights had cost every pair a prefix comparison).
_FIRST_COMPARE_BYTES = 4096
_ZEROS = bytes(ALIGNMENT)


@dataclass(frozen=True)
class _ArraySource:
    array: np.ndarray
    store: np.dtype  # little-endian storage dtype; conversion happens chunk by chunk

    @property
    def width(self) -> int:
        # Bytes per element of the larger of source and stored form: bounds every temporary.
        return max(self.array.dtype.itemsize, self.store.itemsize)

    def chunks(
        self, chunk_bytes: int, first_bytes: int | None = None, width: int | None = None
    ) -> Iterator[memoryview]:
        a = self.array
        n = a.size
        width = width or self.width
        per = max(1, chunk_bytes // width)
        step = per if first_bytes is None else max(1, min(per, first_bytes // width))
        # C-contiguous: slicing the flat view costs nothing. Otherwise (a transposed weight, a
        # view) one chunk is copied in C order instead of materialising the whole array.
        flat = a.reshape(-1) if a.flags.c_contiguous else None
        start = 0
        while start < n:
            stop = min(n, start + step)
            part = flat[start:stop] if flat is not None else _c_order(a, start, stop, per)
            # Overflow to inf is the intended fp16 semantics, not an error worth a warning.
            with np.errstate(over="ignore", invalid="ignore"):
                out = part.astype(self.store, copy=False)
            yield out.view(np.uint8).data
            start, step = stop, per

    def same_memory(self, other: _ArraySource) -> bool:
        a, b = self.array, other.array
        return (
            a is b
            or (
                a.dtype == b.dtype
                and a.shape == b.shape
                and a.strides == b.strides
                and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            )
        ) and self.store == other.store


def _c_order(a: np.ndarray, start: int, stop: int, per: int) -> np.ndarray:
    """Elements [start, stop) of `a` in C order, contiguous: copied from the rows of its leading
    axis that hold them in one strided copy (a.flat[...] copies element by element, several
    times slower), or through a.flat when a row is longer than a chunk."""
    row = a[0].size if a.ndim >= 2 and a.shape[0] else 0
    if a.ndim == 1:
        return np.ascontiguousarray(a[start:stop])
    if row == 0 or row > per:
        return a.flat[start:stop]
    first, last = start // row, -(-stop // row)
    block = np.ascontiguousarray(a[first:last]).reshape(-1)
    return block[start - first * row : stop - first * row]


@dataclass(frozen=True)
class _RawSource:
    data: memoryview

    width = 1

    def chunks(
        self, chunk_bytes: int, first_bytes: int | None = None, width: int | None = None
    ) -> Iterator[memoryview]:
        step = chunk_bytes if first_bytes is None else min(chunk_bytes, first_bytes)
        for start in range(0, len(self.data), step):
            yield self.data[start : start + step]
            step = chunk_bytes


@dataclass(frozen=True)
class _SubbyteSource:
    """Sub-byte values (one integer per element) packed as they are read: a program's packed
    weights are never all held at once beside its unpacked ones."""

    values: np.ndarray  # flat
    dtype: BlobDType
    # The first chunk of a comparison (by its size), packed once: a program's same-shape weights
    # are each compared with every earlier one, and packing that prefix again for every pair was
    # most of the packing a grouped 4-bit kit did (BENCHMARKS.md, "Quantized model kits").
    _first: dict[int, tuple[bytes, bytes, int]] = field(
        default_factory=dict, compare=False, repr=False
    )

    width = 1

    def _fill(self, held: bytearray, start: int, step: int) -> int:
        """Pack values from `start` on into `held` until it holds `step` bytes or the values
        run out; where the next unpacked value is."""
        bits, n = SUBBYTE_BITS[self.dtype], self.values.size
        while len(held) < step and start < n:
            # a multiple of 8 values packs into whole bytes: pieces join without a seam
            count = max(8, (step - len(held)) * 8 // bits // 8 * 8)
            held += pack_subbyte(self.values[start : start + count], self.dtype)
            start += count
        return start

    def chunks(
        self, chunk_bytes: int, first_bytes: int | None = None, width: int | None = None
    ) -> Iterator[memoryview]:
        """The packed bytes in the chunks a `_RawSource` of them gives (comparisons between the
        two go chunk by chunk), each packed when it is asked for: a comparison that stops at
        the first chunk packs little more than that chunk, and only the first time."""
        n = self.values.size
        if n == 0:
            return
        step = chunk_bytes if first_bytes is None else min(chunk_bytes, first_bytes)
        cached = self._first.get(step) if first_bytes is not None else None
        if cached is None:
            held = bytearray()
            start = self._fill(held, 0, step)
            first = bytes(held[:step])
            del held[:step]
            if first_bytes is not None:
                self._first[step] = (first, bytes(held), start)
        else:
            first, rest, start = cached
            held = bytearray(rest)
        yield memoryview(first)
        while start < n or held:
            start = self._fill(held, start, chunk_bytes)
            yield memoryview(bytes(held[:chunk_bytes]))
            del held[:chunk_bytes]


_Source = _ArraySource | _RawSource | _SubbyteSource


def _equal_contents(x: _Source, y: _Source, chunk_bytes: int) -> bool:
    if isinstance(x, _ArraySource) and isinstance(y, _ArraySource) and x.same_memory(y):
        return True
    # Same stored dtype and size, hence the same element count; a common width gives both sides
    # the same chunk boundaries (a float32 source converted to fp16 vs a float16 source).
    width = max(x.width, y.width)
    for cx, cy in zip(
        x.chunks(chunk_bytes, _FIRST_COMPARE_BYTES, width),
        y.chunks(chunk_bytes, _FIRST_COMPARE_BYTES, width),
        strict=True,
    ):
        # array_equal on uint8 views: memcmp-like speed, one bool temp bounded by chunk_bytes.
        if not np.array_equal(np.frombuffer(cx, np.uint8), np.frombuffer(cy, np.uint8)):
            return False
    return True


def _opening(source: _Source, chunk_bytes: int) -> int:
    """A hash of the source's first _FIRST_COMPARE_BYTES stored bytes (all of them when fewer),
    whatever its chunking: sources with equal contents have equal openings."""
    item = source.store.itemsize if isinstance(source, _ArraySource) else 1
    first = max(1, _FIRST_COMPARE_BYTES // item) * source.width
    held = bytearray()
    for chunk in source.chunks(chunk_bytes, first, source.width):
        held += chunk
        if len(held) >= _FIRST_COMPARE_BYTES:
            break
    return hash(bytes(held[:_FIRST_COMPARE_BYTES]))


def _write_all(f: Sink, buf: bytes | memoryview) -> int:
    mv = memoryview(buf).cast("B")
    total = len(mv)
    while mv:
        n = f.write(mv)
        # Buffered and zip streams write everything; raw files may write less and report it.
        if n is None or n >= len(mv):
            break
        mv = mv[n:]
    return total


class BlobWriter:
    """Plans a weight file first, writes it afterwards (see module docstring)."""

    def __init__(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        if chunk_bytes < 16:
            raise ValueError("chunk_bytes must be at least 16")
        self._chunk_bytes = chunk_bytes
        self._entries: list[BlobEntry] = []
        self._sources: list[_Source] = []
        self._by_key: dict[tuple[BlobDType, int, int, int], list[int]] = {}
        self._end = ALIGNMENT  # end of the header

    def add(self, array: np.ndarray, dtype: BlobDType | None = None) -> int:
        """Register one tensor; return its metadata offset (the BLOBFILE / BlobFileValue offset)."""
        a = np.asarray(array)
        dt = blob_dtype_for(a.dtype) if dtype is None else BlobDType(dtype)
        if is_subbyte(dt):
            raise TypeError(f"{dt.name} is a sub-byte type: pack it and use add_packed()")
        if not source_is_compatible(a.dtype, dt):
            raise TypeError(f"cannot store a {a.dtype} array as {dt.name}")
        store = STORAGE_NP_DTYPE[dt]
        return self._plan(dt, a.size * store.itemsize, 0, _ArraySource(a, store))

    def add_packed(self, data: bytes, dtype: BlobDType, n_elements: int) -> int:
        """Register already packed sub-byte data (INT4, UINT1..UINT6) holding ``n_elements`` values."""
        dt = BlobDType(dtype)
        if not is_subbyte(dt):
            raise TypeError(f"add_packed() is for sub-byte types, not {dt.name}: use add()")
        if n_elements < 0:
            raise ValueError("n_elements must be >= 0")
        size, padding = packed_size(dt, n_elements)
        mv = memoryview(data).cast("B")
        if len(mv) != size:
            raise ValueError(f"{n_elements} {dt.name} values pack into {size} bytes, got {len(mv)}")
        return self._plan(dt, size, padding, _RawSource(mv.toreadonly()))

    def add_subbyte(self, values: np.ndarray, dtype: BlobDType) -> int:
        """Register sub-byte values, one integer per element, packed (LSB first, as
        `pack_subbyte`) only as they are written or compared."""
        dt = BlobDType(dtype)
        if not is_subbyte(dt):
            raise TypeError(f"add_subbyte() is for sub-byte types, not {dt.name}: use add()")
        flat = np.ascontiguousarray(values).reshape(-1)
        size, padding = packed_size(dt, flat.size)
        return self._plan(dt, size, padding, _SubbyteSource(flat, dt))

    def _plan(self, dtype: BlobDType, size: int, padding: int, source: _Source) -> int:
        key = (dtype, size, padding, _opening(source, self._chunk_bytes))
        candidates = self._by_key.setdefault(key, [])
        for idx in candidates:
            if _equal_contents(self._sources[idx], source, self._chunk_bytes):
                return self._entries[idx].metadata_offset
        meta = round_up(self._end)
        entry = BlobEntry(meta, dtype, size, meta + ALIGNMENT, padding)
        candidates.append(len(self._entries))
        self._entries.append(entry)
        self._sources.append(source)
        self._end = entry.data_end
        return meta

    @property
    def nbytes(self) -> int:
        """Size of the file ``write()`` produces (no padding after the last payload)."""
        return self._end

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[BlobEntry]:
        """The planned entries, in file order."""
        return list(self._entries)

    def write(self, f: Sink) -> int:
        """Stream the file to a writable binary object without seeking; return bytes written."""
        pos = _write_all(f, pack_header(len(self._entries)))
        for entry, source in zip(self._entries, self._sources, strict=True):
            gap = entry.metadata_offset - pos
            pos += _write_all(f, _ZEROS[:gap]) if gap else 0
            pos += _write_all(
                f,
                pack_metadata(
                    entry.dtype, entry.size_in_bytes, entry.data_offset, entry.padding_bits
                ),
            )
            for chunk in source.chunks(self._chunk_bytes):
                pos += _write_all(f, chunk)
            if pos != entry.data_end:  # only possible if an array was resized/replaced after add()
                raise RuntimeError(
                    f"entry at {entry.metadata_offset} wrote up to {pos}, planned {entry.data_end}"
                )
        return pos

    def write_to_path(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        """Write atomically (a temp file beside `path`, then a rename): on any error the temp
        file is removed and an existing file at ``path`` is left untouched."""
        with atomic_file(path) as f:
            self.write(f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
