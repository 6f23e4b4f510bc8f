"""Blob Storage v2 reader with the checks of coremltools' ``StorageReader`` plus bounds checks.

Apple's reader validates the header version, each metadata sentinel and the requested data type;
everything else (count, overlaps, trailing bytes) is only looked at by :meth:`BlobReader.check`.
Every error names the file offset it is about.
"""

from __future__ import annotations

import itertools
import os
from types import TracebackType

import numpy as np

from .dtype_codes import STORAGE_NP_DTYPE, SUBBYTE_BITS, BlobDType, is_subbyte, unpack_subbyte
from .format import (
    ALIGNMENT,
    HEADER,
    METADATA,
    SENTINEL,
    VERSION,
    BlobEntry,
    BlobFormatError,
    round_up,
)

_VALID_CODES = frozenset(int(d) for d in BlobDType)


class BlobReader:
    """Read-only view of a weight file: a path (memory-mapped) or bytes already in memory."""

    def __init__(self, source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> None:
        if isinstance(source, bytes | bytearray | memoryview):
            self._buf = np.frombuffer(memoryview(source).cast("B"), dtype=np.uint8)
        else:
            path = os.fspath(source)
            # mmap of an empty file fails; an empty buffer gives the clearer "truncated" error below.
            empty = os.path.getsize(path) == 0
            self._buf = (
                np.zeros(0, np.uint8) if empty else np.memmap(path, dtype=np.uint8, mode="r")
            )
        self.size = len(self._buf)
        if self.size < ALIGNMENT:
            raise BlobFormatError(
                f"truncated file: {self.size} bytes at offset 0, the storage header needs 64"
            )
        count, version = HEADER.unpack_from(self._buf.data, 0)
        if version != VERSION:
            raise BlobFormatError(
                f"bad header version {version} at offset 4: expected file format version 2"
            )
        self.count: int = count

    def __enter__(self) -> BlobReader:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Drop the mapping; arrays already returned by read() keep it alive until released."""
        self._buf = np.zeros(0, np.uint8)

    def entry(self, metadata_offset: int) -> BlobEntry:
        off = int(metadata_offset)
        if off < 0 or off + ALIGNMENT > self.size:
            raise BlobFormatError(
                f"truncated file: blob_metadata at offset {off} needs bytes [{off}, {off + 64}), "
                f"file is {self.size} bytes"
            )
        sentinel, code, size, data_offset, padding = METADATA.unpack_from(self._buf.data, off)
        if sentinel != SENTINEL:
            raise BlobFormatError(
                f"Invalid sentinel in blob_metadata at offset {off}: 0x{sentinel:08x}, "
                f"expected 0x{SENTINEL:08x}"
            )
        if code not in _VALID_CODES:
            raise BlobFormatError(
                f"unknown blob data type code {code} in blob_metadata at offset {off}"
            )
        if data_offset + size > self.size:
            raise BlobFormatError(
                f"index out of bounds: blob_metadata at offset {off} declares data "
                f"[{data_offset}, {data_offset + size}) but the file is {self.size} bytes "
                "(truncated file or corrupt size/offset)"
            )
        return BlobEntry(off, BlobDType(code), size, data_offset, padding)

    def entries(self) -> list[BlobEntry]:
        """Walk like Apple's ``GetAllOffsets``: ``count`` entries from 64, each next one at
        round_up(data offset + size, 64)."""
        out: list[BlobEntry] = []
        off = ALIGNMENT
        for i in range(self.count):
            if off + ALIGNMENT > self.size:
                raise BlobFormatError(
                    f"header count is {self.count} but the file ends after {i} entries "
                    f"(next blob_metadata at offset {off}, file is {self.size} bytes)"
                )
            e = self.entry(off)
            out.append(e)
            nxt = round_up(e.data_end)
            # A data offset pointing backwards would make the walk revisit entries. (For the last
            # entry nothing is revisited; check() reports the overlap instead.)
            if nxt <= off and i + 1 < self.count:
                raise BlobFormatError(
                    f"blob_metadata at offset {off} points backwards to {e.data_offset}"
                )
            off = nxt
        return out

    def _typed(self, metadata_offset: int, dtype: BlobDType | None) -> BlobEntry:
        e = self.entry(metadata_offset)
        if dtype is not None and BlobDType(dtype) != e.dtype:
            raise BlobFormatError(
                f"Metadata data type does not match requested type at offset {e.metadata_offset}: "
                f"stored {e.dtype.name}, requested {BlobDType(dtype).name}"
            )
        return e

    def read(
        self,
        metadata_offset: int,
        dtype: BlobDType | None = None,
        shape: tuple[int, ...] | None = None,
    ) -> np.ndarray:
        """Zero-copy view of one payload. FP16 -> float16, BF16/FP8 -> raw unsigned bits,
        sub-byte types -> the packed bytes as uint8 (see :meth:`read_unpacked`)."""
        e = self._typed(metadata_offset, dtype)
        np_dt = STORAGE_NP_DTYPE[e.dtype]
        if e.size_in_bytes % np_dt.itemsize:
            raise BlobFormatError(
                f"blob at offset {e.metadata_offset}: {e.size_in_bytes} bytes is not a whole "
                f"number of {e.dtype.name} elements"
            )
        arr = np.frombuffer(
            self._buf, dtype=np_dt, count=e.size_in_bytes // np_dt.itemsize, offset=e.data_offset
        )
        return arr if shape is None else self._reshape(arr, shape, e)

    def read_unpacked(
        self,
        metadata_offset: int,
        dtype: BlobDType | None = None,
        shape: tuple[int, ...] | None = None,
    ) -> np.ndarray:
        """Sub-byte payload as one uint8 (int8 for INT4) per value; the element count comes from
        size * 8 - padding_size_in_bits, as in coremltools."""
        e = self._typed(metadata_offset, dtype)
        if not is_subbyte(e.dtype):
            raise BlobFormatError(
                f"blob at offset {e.metadata_offset} is {e.dtype.name}, not sub-byte"
            )
        n = self._subbyte_count(e)
        arr = unpack_subbyte(self.read(e.metadata_offset), e.dtype, n)
        return arr if shape is None else self._reshape(arr, shape, e)

    def read_values(
        self, metadata_offset: int, dtype: BlobDType, shape: tuple[int, ...] | None = None
    ) -> np.ndarray:
        """One value per element whatever the type: sub-byte payloads unpacked
        (:meth:`read_unpacked`), every other type the zero-copy view of :meth:`read`."""
        if is_subbyte(BlobDType(dtype)):
            return self.read_unpacked(metadata_offset, dtype, shape)
        return self.read(metadata_offset, dtype, shape)

    @staticmethod
    def _subbyte_count(e: BlobEntry) -> int:
        bits = e.size_in_bytes * 8 - e.padding_bits
        width = SUBBYTE_BITS[e.dtype]
        if not 0 <= e.padding_bits < 8 or bits % width:
            raise BlobFormatError(
                f"blob at offset {e.metadata_offset}: padding_size_in_bits {e.padding_bits} does not "
                f"fit {e.size_in_bytes} bytes of {e.dtype.name}"
            )
        return bits // width

    @staticmethod
    def _reshape(arr: np.ndarray, shape: tuple[int, ...], e: BlobEntry) -> np.ndarray:
        shape = tuple(int(d) for d in shape)
        if int(np.prod(shape, dtype=np.int64)) != arr.size:
            raise BlobFormatError(
                f"blob at offset {e.metadata_offset} holds {arr.size} elements, shape {shape} needs "
                f"{int(np.prod(shape, dtype=np.int64))}"
            )
        return arr.reshape(shape)

    def check(self) -> list[BlobEntry]:
        """Validate the whole file; return its entries. Stricter than Apple's reader."""
        entries = self.entries()
        spans: list[tuple[int, int, int]] = []  # (start, end, metadata offset)
        for e in entries:
            if is_subbyte(e.dtype):
                self._subbyte_count(e)
            elif e.padding_bits:
                raise BlobFormatError(
                    f"blob at offset {e.metadata_offset}: padding_size_in_bits {e.padding_bits} "
                    f"on byte-sized type {e.dtype.name}"
                )
            elif e.size_in_bytes % STORAGE_NP_DTYPE[e.dtype].itemsize:
                self.read(e.metadata_offset)  # raises the element-size error
            spans.append((e.metadata_offset, e.metadata_offset + ALIGNMENT, e.metadata_offset))
            if e.size_in_bytes:
                spans.append((e.data_offset, e.data_end, e.metadata_offset))
        spans.sort()
        for (s0, e0, m0), (s1, _, m1) in itertools.pairwise(spans):
            if s1 < e0:
                raise BlobFormatError(
                    f"overlap: bytes [{s0}, {e0}) of the entry at offset {m0} overlap the entry at "
                    f"offset {m1} from {s1}"
                )
        self._check_tail(entries[-1].data_end if entries else ALIGNMENT)
        return entries

    def _check_tail(self, end: int) -> None:
        nxt = round_up(end)
        if (
            nxt + ALIGNMENT <= self.size
            and METADATA.unpack_from(self._buf.data, nxt)[0] == SENTINEL
        ):
            raise BlobFormatError(
                f"header count is {self.count} but another blob_metadata follows at offset {nxt}"
            )
        tail = self._buf[end:]
        # Up to 63 zero bytes of alignment padding after the last payload are tolerated (some
        # writers pad the tail; Apple's does not); anything else is unexplained data.
        if len(tail) >= ALIGNMENT or tail.any():
            raise BlobFormatError(f"{len(tail)} unexpected trailing bytes at offset {end}")
