"""How a TensorValue stores the elements of each MIL data type: decoded for the printer, encoded
for the parser (which field, by the one dtype table; reading accepts any field)."""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.language.dtypes import DType
from app.language.errors import BadPackageError
from app.language.messages import MIL_pb2
from app.language.packing import pack_bits, unpack_bits

D = MIL_pb2

# Views of the one dtype table (app.language.dtypes), keyed by MIL.proto DataType number.
TEXT_NAMES: dict[int, str] = {d.proto: d.value for d in DType}
BY_TEXT: dict[str, int] = {name: code for code, name in TEXT_NAMES.items()}
FLOATS = frozenset(d.proto for d in DType if d.is_float or d.is_raw_float)
SUB_BYTE_BITS: dict[int, int] = {d.proto: d.bits for d in DType if d.is_subbyte}
# Whole-byte types kept as raw little-endian bytes: struct code per element.
_BYTE_CODES: dict[int, str] = {D.INT8: "b", D.UINT8: "B", D.UINT32: "I", D.FLOAT16: "e"}


def text_name(code: int, where: str = "") -> str:
    try:
        return TEXT_NAMES[code]
    except KeyError:
        raise BadPackageError(f"unknown MIL data type {code}", where) from None


def _fp8_e4m3fn(byte: int) -> float:
    sign = -1.0 if byte & 0x80 else 1.0
    exponent, mantissa = (byte >> 3) & 0xF, byte & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return math.nan
    if exponent == 0:
        return sign * math.ldexp(mantissa, -9)
    return sign * math.ldexp(8 + mantissa, exponent - 10)


def _fp8_e5m2(byte: int) -> float:
    return float(np.frombuffer(bytes([0, byte]), dtype="<f2")[0])


def _encode_fp8(value: float, code: int) -> int:
    """Nearest representable byte (ties to the even code): exact for values read from text."""
    decode = _fp8_e4m3fn if code == D.FLOAT8E4M3FN else _fp8_e5m2
    best, best_error = 0, math.inf
    for byte in range(256):
        candidate = decode(byte)
        if math.isnan(value) or math.isnan(candidate):
            if math.isnan(value) and math.isnan(candidate):
                return byte
            continue
        if candidate == value and math.copysign(1, candidate) == math.copysign(1, value):
            return byte
        error = abs(candidate - value)
        if error < best_error:
            best, best_error = byte, error
    return best


def _byte_count(raw: bytes, code: int) -> int:
    if code in SUB_BYTE_BITS:
        return len(raw) * 8 // SUB_BYTE_BITS[code]
    if code in _BYTE_CODES:
        return len(raw) // struct.calcsize(_BYTE_CODES[code])
    return len(raw) // 2 if code == D.BFLOAT16 else len(raw)


def decode_elements(tensor: MIL_pb2.TensorValue, code: int, count: int | None) -> list[Any]:
    """The elements of an immediate tensor of type `code` (the first `count`, or all)."""
    field = tensor.WhichOneof("value")
    if field is None:
        return []
    if field == "bytes":
        raw = tensor.bytes.values
        if count is None:
            count = _byte_count(raw, code)
        if code in SUB_BYTE_BITS:
            return unpack_bits(raw, _dtype(code), count).tolist()
        if code in _BYTE_CODES:
            fmt = _BYTE_CODES[code]
            return [
                float(v) if code == D.FLOAT16 else v
                for v in struct.unpack(f"<{count}{fmt}", raw[: count * struct.calcsize(fmt)])
            ]
        if code == D.BFLOAT16:
            return [struct.unpack("<f", b"\0\0" + raw[2 * i : 2 * i + 2])[0] for i in range(count)]
        if code == D.FLOAT8E4M3FN:
            return [_fp8_e4m3fn(b) for b in raw[:count]]
        if code == D.FLOAT8E5M2:
            return [_fp8_e5m2(b) for b in raw[:count]]
        if code == D.BOOL:
            return [bool(b) for b in raw[:count]]
        return list(raw[:count])
    values = list(getattr(tensor, field).values)
    if code == D.BOOL:
        return [bool(v) for v in values]
    if code == D.STRING:
        return [v if isinstance(v, str) else v.decode("utf-8") for v in values]
    if code in FLOATS:
        return [float(v) for v in values]
    if code == D.UINT64:
        return [int(v) + (1 << 64) if v < 0 else int(v) for v in values]
    return [int(v) for v in values]


def _as_int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def storage_field(code: int) -> str:
    """The TensorValue field `encode_elements` fills for `code`."""
    return _dtype(code).field


def _dtype(code: int) -> DType:
    found = DType.from_proto(code)
    if found is None:
        raise ValueError(f"no storage for MIL data type {code}")
    return found


def encode_elements(tensor: MIL_pb2.TensorValue, code: int, values: Sequence[Any]) -> None:
    """Store `values` in the field coremltools (and Apple's reader) use for `code`."""
    if code == D.BOOL:
        tensor.bools.values.extend(bool(v) for v in values)
    elif code == D.STRING:
        tensor.strings.values.extend(values)
    elif code == D.FLOAT32:
        tensor.floats.values.extend(values)
    elif code == D.FLOAT64:
        tensor.doubles.values.extend(values)
    elif storage_field(code) == "ints":
        tensor.ints.values.extend(int(v) for v in values)
    elif storage_field(code) == "longInts":
        # longInts is int64: a uint64 from 2^63 up is stored as its two's complement.
        tensor.longInts.values.extend(_as_int64(int(v)) for v in values)
    elif code in SUB_BYTE_BITS:
        tensor.bytes.values = pack_bits(np.asarray(values, dtype=np.int16), _dtype(code))
    elif code in _BYTE_CODES:
        tensor.bytes.values = struct.pack(f"<{len(values)}{_BYTE_CODES[code]}", *values)
    elif code == D.BFLOAT16:
        tensor.bytes.values = b"".join(struct.pack("<f", v)[2:] for v in values)
    elif code in (D.FLOAT8E4M3FN, D.FLOAT8E5M2):
        tensor.bytes.values = bytes(_encode_fp8(float(v), code) for v in values)
    else:
        raise ValueError(f"no storage for MIL data type {code}")
