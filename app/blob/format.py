"""Byte layout of Blob Storage v2 (coremltools ``MILBlob/Blob/StorageFormat.hpp``).

File = 64-byte header, then entries. Each entry starts on a 64-byte boundary with a 64-byte
metadata block that is immediately followed by its payload. Nothing follows the last payload.
All integers are little-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .dtype_codes import BlobDType

ALIGNMENT = 64
VERSION = 2
SENTINEL = 0xDEADBEEF

# storage_header: u32 count, u32 version, 7 x u64 reserved (zero).
HEADER = struct.Struct("<II56x")
# blob_metadata: u32 sentinel, u32 mil_dtype, u64 sizeInBytes, u64 data offset (absolute),
# u64 padding_size_in_bits, 4 x u64 reserved. Reserved bytes are written as zeros; readers ignore
# them (Apple's own fixtures put non-zero values there).
METADATA = struct.Struct("<IIQQQ32x")
assert HEADER.size == ALIGNMENT and METADATA.size == ALIGNMENT


class BlobFormatError(ValueError):
    """A weight file (or a request against it) that does not follow Blob Storage v2."""


@dataclass(frozen=True)
class BlobEntry:
    metadata_offset: int
    dtype: BlobDType
    size_in_bytes: int
    data_offset: int
    padding_bits: int

    @property
    def data_end(self) -> int:
        return self.data_offset + self.size_in_bytes


def round_up(n: int, alignment: int = ALIGNMENT) -> int:
    return -(-n // alignment) * alignment


def pack_header(count: int) -> bytes:
    return HEADER.pack(count, VERSION)


def pack_metadata(
    dtype: BlobDType, size_in_bytes: int, data_offset: int, padding_bits: int
) -> bytes:
    return METADATA.pack(SENTINEL, int(dtype), size_in_bytes, data_offset, padding_bits)
