"""Blob Storage v2 data type codes and their numpy counterparts, derived from the one dtype table.

The codes are the ``BlobDataType`` values of coremltools' MILBlob (``BlobDataType.hpp``), kept in
`app.language.dtypes` beside the other facts of each dtype. They are not the MIL.proto
``DataType`` enum (FLOAT16=10, ...), which is a different numbering.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import numpy as np

from app.language.dtypes import DType
from app.language.packing import pack_bits, unpack_bits


class BlobDType(IntEnum):
    """The codes, named as the MIL dtypes they store (BlobDType.FP16 == 1, ...), in code order.
    The members are spelled out so the type checker knows them; the codes are the table's."""

    FP16 = DType.FP16.blob_code
    FP32 = DType.FP32.blob_code
    UINT8 = DType.UINT8.blob_code
    INT8 = DType.INT8.blob_code
    BF16 = DType.BF16.blob_code
    INT16 = DType.INT16.blob_code
    UINT16 = DType.UINT16.blob_code
    INT4 = DType.INT4.blob_code
    UINT1 = DType.UINT1.blob_code
    UINT2 = DType.UINT2.blob_code
    UINT4 = DType.UINT4.blob_code
    UINT3 = DType.UINT3.blob_code
    UINT6 = DType.UINT6.blob_code
    INT32 = DType.INT32.blob_code
    UINT32 = DType.UINT32.blob_code
    FP8E4M3FN = DType.FP8E4M3FN.blob_code
    FP8E5M2 = DType.FP8E5M2.blob_code


# Every dtype weight.bin stores, and no other, in code order.
assert [(m.name, m.value) for m in BlobDType] == sorted(
    ((d.name, d.blob_code) for d in DType if d.in_blob), key=lambda item: item[1]
)

# Bits per element for the packed (sub-byte) types.
SUBBYTE_BITS: dict[BlobDType, int] = {
    BlobDType(d.blob_code): d.bits for d in DType if d.in_blob and d.is_subbyte
}

# How a payload is stored, as an explicit little-endian numpy dtype. numpy has no bf16/fp8, so
# those are exposed as their raw bit patterns; sub-byte payloads are raw packed bytes.
STORAGE_NP_DTYPE: dict[BlobDType, np.dtype] = {
    BlobDType(d.blob_code): np.dtype("u1") if d.is_subbyte else d.numpy.newbyteorder("<")
    for d in DType
    if d.in_blob
}


def blob_dtype(dtype: DType) -> BlobDType:
    """The code weight.bin stores a MIL dtype under."""
    return BlobDType(dtype.blob_code)


# (numpy kind, itemsize) -> natural blob type. Keyed by kind/size so byte order does not matter.
_NATURAL: dict[tuple[str, int], BlobDType] = {
    ("f", 2): BlobDType.FP16,
    ("f", 4): BlobDType.FP32,
    ("u", 1): BlobDType.UINT8,
    ("i", 1): BlobDType.INT8,
    ("i", 2): BlobDType.INT16,
    ("u", 2): BlobDType.UINT16,
    ("i", 4): BlobDType.INT32,
    ("u", 4): BlobDType.UINT32,
}

# Types that have no numpy dtype and are accepted as raw bit patterns of this numpy dtype.
_RAW_BITS: dict[BlobDType, tuple[str, int]] = {
    BlobDType.BF16: ("u", 2),
    BlobDType.FP8E4M3FN: ("u", 1),
    BlobDType.FP8E5M2: ("u", 1),
}


def is_subbyte(dtype: BlobDType) -> bool:
    return dtype in SUBBYTE_BITS


def blob_dtype_for(np_dtype: Any) -> BlobDType:
    """Natural blob type of a numpy dtype (or of anything with a ``.dtype``)."""
    src = np_dtype.dtype if isinstance(np_dtype, np.ndarray | np.generic) else np_dtype
    dt = np.dtype(src)
    try:
        return _NATURAL[(dt.kind, dt.itemsize)]
    except KeyError:
        hint = " (pass dtype=BlobDType.FP16 or FP32 to convert)" if dt.kind == "f" else ""
        raise TypeError(f"no Blob Storage v2 data type for numpy dtype {dt}{hint}") from None


def source_is_compatible(np_dtype: np.dtype, dtype: BlobDType) -> bool:
    """Whether an array of ``np_dtype`` may be stored as ``dtype``.

    Floats may be converted to FP16/FP32 (rounding like numpy's astype); integer types must match
    exactly, because a silent int64 -> int32 narrowing would corrupt weights; BF16/FP8 take raw bits.
    """
    kind_size = (np_dtype.kind, np_dtype.itemsize)
    if dtype in (BlobDType.FP16, BlobDType.FP32):
        return np_dtype.kind == "f"
    if dtype in _RAW_BITS:
        return kind_size == _RAW_BITS[dtype]
    return _NATURAL.get(kind_size) == dtype


def packed_size(dtype: BlobDType, n_elements: int) -> tuple[int, int]:
    """(size in bytes, padding bits in the last byte) of ``n_elements`` packed sub-byte values."""
    bits = SUBBYTE_BITS[dtype] * n_elements
    rem = bits % 8
    return (bits + 7) // 8, (8 - rem) if rem else 0


def pack_subbyte(values: np.ndarray, dtype: BlobDType) -> bytes:
    """Pack integer values LSB-first, the bit order coremltools' writer uses (uint4 [1, 2] -> 0x21)."""
    mil = DType.from_blob_code(dtype)
    assert mil is not None
    return pack_bits(values, mil)


def unpack_subbyte(data: bytes | np.ndarray, dtype: BlobDType, n_elements: int) -> np.ndarray:
    """Inverse of :func:`pack_subbyte`: uint8 values (int8 for INT4)."""
    mil = DType.from_blob_code(dtype)
    assert mil is not None
    return unpack_bits(data, mil, n_elements)
