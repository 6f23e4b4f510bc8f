"""Sub-byte values packed LSB first: the one bit packer, for weight.bin entries and for the bytes
of protobuf immediate values alike (coremltools' `pack_elements_into_bits` order: uint4 [1, 2] is
the byte 0x21; 3- and 6-bit values straddle bytes)."""

from __future__ import annotations

import numpy as np

from app.language.dtypes import DType


def pack_bits(values: np.ndarray, dtype: DType) -> bytes:
    """`values` (integers within `dtype`'s range) packed at `dtype.bits` each."""
    bits = dtype.bits
    v = np.asarray(values).reshape(-1)
    lo, hi = dtype.int_range
    # an unsigned array is never below an unsigned dtype's 0: only its maximum needs reading
    below = v.size and not (v.dtype.kind == "u" and lo == 0) and int(v.min()) < lo
    if below or (v.size and int(v.max()) > hi):
        raise ValueError(f"values out of range [{lo}, {hi}] for {dtype.value}")
    if v.dtype.kind not in "iu" or v.dtype.itemsize != 1:
        v = v.astype(np.int16)
    # uint8 values within an unsigned dtype's range are their own low bits
    own = v.dtype == np.uint8 and lo == 0
    u = v if own else (v & ((1 << bits) - 1)).astype(np.uint8)
    if 8 % bits:  # 3 or 6 bits straddle bytes: through a bit stream
        expanded = np.unpackbits(u[:, None], axis=1, bitorder="little")[:, :bits]
        return np.packbits(expanded.reshape(-1), bitorder="little").tobytes()
    if bits == 1:
        return np.packbits(u, bitorder="little").tobytes()
    per_byte = 8 // bits  # 2 or 4 values a byte, the first in the low bits
    if u.size % per_byte:
        u = np.concatenate([u, np.zeros(-u.size % per_byte, np.uint8)])
    u = np.ascontiguousarray(u)
    if bits == 4:
        # a pair (a, b) read as one little-endian uint16 is a + 256 b: OR-ed with itself shifted
        # right by 4, its low byte is a | b << 4 (a < 16), the packed byte, in three passes
        pair = u.view("<u2")
        return (pair | (pair >> 4)).astype(np.uint8).tobytes()
    u = u.reshape(-1, per_byte)
    packed = u[:, 0].copy()
    for i in range(1, per_byte):
        packed |= u[:, i] << (i * bits)
    return packed.tobytes()


def unpack_bits(data: bytes | np.ndarray, dtype: DType, count: int) -> np.ndarray:
    """The first `count` values packed in `data`: uint8, or int8 for a signed dtype."""
    bits = dtype.bits
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else np.asarray(data)
    stream = np.unpackbits(raw.view(np.uint8), bitorder="little")[: count * bits]
    if stream.size != count * bits:
        raise ValueError(f"{len(raw)} bytes hold fewer than {count} {dtype.value} values")
    out = np.packbits(stream.reshape(count, bits), axis=1, bitorder="little").reshape(-1)
    if dtype.is_signed:
        signed = out.astype(np.int8)
        signed[signed >= 1 << (bits - 1)] -= 1 << bits
        return signed
    return out
