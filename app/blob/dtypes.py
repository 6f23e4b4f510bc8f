"""Blob Storage v2 data type codes and their numpy counterparts.

The codes are the ``BlobDataType`` values of coremltools' MILBlob (``BlobDataType.hpp``). They are
not the MIL.proto ``DataType`` enum (FLOAT16=10, ...), which is a different numbering.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import numpy as np


class BlobDType(IntEnum):
    FP16 = 1
    FP32 = 2
    UINT8 = 3
    INT8 = 4
    BF16 = 5
    INT16 = 6
    UINT16 = 7
    INT4 = 8
    UINT1 = 9
    UINT2 = 10
    UINT4 = 11
    UINT3 = 12
    UINT6 = 13
    INT32 = 14
    UINT32 = 15
    FP8E4M3FN = 16
    FP8E5M2 = 17


# Bits per element for the packed (sub-byte) types.
SUBBYTE_BITS: dict[BlobDType, int] = {
    BlobDType.INT4: 4,
    BlobDType.UINT1: 1,
    BlobDType.UINT2: 2,
    BlobDType.UINT3: 3,
    BlobDType.UINT4: 4,
    BlobDType.UINT6: 6,
}

# How a payload is stored, as an explicit little-endian numpy dtype. numpy has no bf16/fp8, so
# those are exposed as their raw bit patterns; sub-byte payloads are raw packed bytes.
STORAGE_NP_DTYPE: dict[BlobDType, np.dtype] = {
    BlobDType.FP16: np.dtype("<f2"),
    BlobDType.FP32: np.dtype("<f4"),
    BlobDType.UINT8: np.dtype("u1"),
    BlobDType.INT8: np.dtype("i1"),
    BlobDType.BF16: np.dtype("<u2"),
    BlobDType.INT16: np.dtype("<i2"),
    BlobDType.UINT16: np.dtype("<u2"),
    BlobDType.INT32: np.dtype("<i4"),
    BlobDType.UINT32: np.dtype("<u4"),
    BlobDType.FP8E4M3FN: np.dtype("u1"),
    BlobDType.FP8E5M2: np.dtype("u1"),
    **{dt: np.dtype("u1") for dt in SUBBYTE_BITS},
}

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
    bits = SUBBYTE_BITS[dtype]
    v = np.asarray(values).reshape(-1)
    lo, hi = (-8, 7) if dtype == BlobDType.INT4 else (0, (1 << bits) - 1)
    if v.size and (int(v.min()) < lo or int(v.max()) > hi):
        raise ValueError(f"values out of range [{lo}, {hi}] for {dtype.name}")
    if v.dtype.kind not in "iu" or v.dtype.itemsize != 1:
        v = v.astype(np.int16)
    u = (v & ((1 << bits) - 1)).astype(np.uint8)
    if 8 % bits:  # 3 or 6 bits straddle bytes: through a bit stream
        expanded = np.unpackbits(u[:, None], axis=1, bitorder="little")[:, :bits]
        return np.packbits(expanded.reshape(-1), bitorder="little").tobytes()
    if bits == 1:
        return np.packbits(u, bitorder="little").tobytes()
    per_byte = 8 // bits  # 2 or 4 values a byte, the first in the low bits
    u = np.concatenate([u, np.zeros(-u.size % per_byte, np.uint8)]).reshape(-1, per_byte)
    packed = u[:, 0].copy()
    for i in range(1, per_byte):
        packed |= u[:, i] << (i * bits)
    return packed.tobytes()


def unpack_subbyte(data: bytes | np.ndarray, dtype: BlobDType, n_elements: int) -> np.ndarray:
    """Inverse of :func:`pack_subbyte`: uint8 values (int8 for INT4)."""
    bits = SUBBYTE_BITS[dtype]
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else np.asarray(data)
    stream = np.unpackbits(raw.view(np.uint8), bitorder="little")[: n_elements * bits]
    if stream.size != n_elements * bits:
        raise ValueError(f"{len(raw)} bytes hold fewer than {n_elements} {dtype.name} values")
    out = np.packbits(stream.reshape(n_elements, bits), axis=1, bitorder="little").reshape(-1)
    if dtype == BlobDType.INT4:
        signed = out.astype(np.int8)
        signed[signed >= 8] -= 16
        return signed
    return out
