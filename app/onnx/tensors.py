"""An ONNX tensor's values, read bounded and checked: embedded ones from the parsed model, external
ones by offset from their file, a chunk at a time (never the whole file at once: a model's weights
are read into fp16 arrays, so its peak memory is about its fp16 size, not twice its fp32 size).

Floats of more than `KEEP_FP32_ELEMENTS` elements become fp16 as they are read, each value held
to fp16's range (a weight beyond ±65504 would become infinite: refused naming the tensor); small
ones stay float32, so constant arithmetic at import (shapes, scales) is exact, and are checked
when they become program constants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnx import TensorProto

from app.errors import ErrorKind, RequestError
from app.kernels.weight_check import check_values
from app.mil import DType

KEEP_FP32_ELEMENTS = 4096
MAX_TENSOR_ELEMENTS = 1 << 32  # 4 G elements: far beyond one weight the ANE holds
# the read buffer of a tensor, beside every weight read before it (at the last tensor: all of
# them): small, since it adds to the peak and reading in bigger pieces gains nothing measurable
_CHUNK_BYTES = 1 << 20

# ONNX data type -> the numpy dtype its bytes are (bfloat16 read as its bits)
_STORED: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype("<f4"),
    TensorProto.FLOAT16: np.dtype("<f2"),
    TensorProto.BFLOAT16: np.dtype("<u2"),
    TensorProto.DOUBLE: np.dtype("<f8"),
    TensorProto.INT8: np.dtype("i1"),
    TensorProto.UINT8: np.dtype("u1"),
    TensorProto.INT16: np.dtype("<i2"),
    TensorProto.UINT16: np.dtype("<u2"),
    TensorProto.INT32: np.dtype("<i4"),
    TensorProto.UINT32: np.dtype("<u4"),
    TensorProto.INT64: np.dtype("<i8"),
    TensorProto.UINT64: np.dtype("<u8"),
    TensorProto.BOOL: np.dtype("?"),
}
_CONVERTED = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.BFLOAT16})
FLOAT_TYPES = frozenset(
    {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
)


def type_name(data_type: int) -> str:
    return (
        TensorProto.DataType.Name(data_type)
        if data_type in TensorProto.DataType.values()
        else str(data_type)
    )


def element_count(dims, what: str, field: str) -> int:
    """The element count of a shape, refused when a dim is negative or the count overflows."""
    count = 1
    for d in dims:
        if d < 0:
            raise RequestError(field, f"{what}: a negative dimension in {list(dims)}")
        count *= int(d)
        if count > MAX_TENSOR_ELEMENTS:
            raise RequestError(
                field,
                f"{what}: shape {list(dims)} holds more than {MAX_TENSOR_ELEMENTS} elements",
                kind=ErrorKind.TOO_LARGE,
                title="Tensor too large",
                limit=MAX_TENSOR_ELEMENTS,
            )
    return count


@dataclass(frozen=True)
class External:
    """Where an external tensor's bytes are."""

    name: str  # the file, as the model names it (normalized)
    path: Path
    offset: int
    length: int | None


def stored_dtype(tensor: TensorProto, field: str) -> np.dtype:
    dtype = _STORED.get(tensor.data_type)
    if dtype is None:
        raise RequestError(
            field,
            f"tensor {tensor.name!r}: data type {type_name(tensor.data_type)} is not supported "
            f"(supported: {', '.join(type_name(t) for t in _STORED)})",
        )
    return dtype


def fp16_bytes(tensor: TensorProto) -> int:
    """What the tensor takes in the program (floats as fp16)."""
    count = math.prod(tensor.dims)
    if tensor.data_type in FLOAT_TYPES:
        return 2 * count
    return count * _STORED.get(tensor.data_type, np.dtype("u1")).itemsize


def read_tensor(tensor: TensorProto, field: str, external: External | None) -> np.ndarray:
    """The values of `tensor` (floats over KEEP_FP32_ELEMENTS as fp16, other floats as float32,
    integers and bools as stored), in its shape."""
    shape = tuple(int(d) for d in tensor.dims)
    count = element_count(shape, f"tensor {tensor.name!r}", field)
    stored = stored_dtype(tensor, field)
    floats = tensor.data_type in FLOAT_TYPES
    if external is not None:
        values = _read_external(tensor, field, external, stored, count)
        if floats and count > KEEP_FP32_ELEMENTS:
            return values.reshape(shape)  # fp16 already, each chunk checked as it was read
    else:
        values = _embedded(tensor, field, stored, count)
    if floats:
        values = _as_float(values, tensor, field, count)
    return values.reshape(shape)


def _embedded(tensor: TensorProto, field: str, stored: np.dtype, count: int) -> np.ndarray:
    if tensor.HasField("raw_data"):
        raw = tensor.raw_data
        if len(raw) != count * stored.itemsize:
            raise RequestError(
                field,
                f"tensor {tensor.name!r}: {len(raw)} bytes of data for a shape of {count} "
                f"elements of {type_name(tensor.data_type)} ({count * stored.itemsize} bytes)",
            )
        values = np.frombuffer(raw, stored)
        if tensor.data_type not in _CONVERTED:  # those _as_float converts (a copy) anyway
            values = values.copy()
        tensor.ClearField("raw_data")  # the model holds no second copy
        return values
    typed = _typed_field(tensor)
    data = np.asarray(typed)
    if data.size != count:
        raise RequestError(
            field, f"tensor {tensor.name!r}: {data.size} values for a shape of {count} elements"
        )
    if tensor.data_type in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        return data.astype(np.uint16).view(stored)  # held as their bits in int32_data
    return data.astype(stored)


def _typed_field(tensor: TensorProto):
    t = tensor.data_type
    if t == TensorProto.FLOAT:
        return tensor.float_data
    if t == TensorProto.DOUBLE:
        return tensor.double_data
    if t == TensorProto.INT64:
        return tensor.int64_data
    if t in (TensorProto.UINT32, TensorProto.UINT64):
        return tensor.uint64_data
    return tensor.int32_data


def _read_external(
    tensor: TensorProto, field: str, external: External, stored: np.dtype, count: int
) -> np.ndarray:
    nbytes = count * stored.itemsize
    claims = f"tensor {tensor.name!r} claims {nbytes} bytes"
    if external.length is not None and external.length != nbytes:
        raise RequestError(
            field,
            f"{claims} ({count} × {type_name(tensor.data_type)}) but its external data "
            f"`length` is {external.length}",
        )
    try:
        size = external.path.stat().st_size
    except OSError as exc:
        raise RequestError(
            field, f"tensor {tensor.name!r}: cannot read {external.name!r}: {exc.strerror}"
        ) from None
    if external.offset < 0 or external.offset + nbytes > size:
        raise RequestError(
            field,
            f"{claims} at offset {external.offset} of {external.name!r}, which holds {size} "
            "bytes: the external data is shorter than its tensor",
        )
    floats = tensor.data_type in FLOAT_TYPES and count > KEEP_FP32_ELEMENTS
    out = np.empty(count, np.float16 if floats else stored)
    step = max(1, _CHUNK_BYTES // stored.itemsize)
    buffer = np.empty(min(step, count), stored)
    with open(external.path, "rb") as f:
        f.seek(external.offset)
        for start in range(0, count, step):
            chunk = buffer[: min(step, count - start)]
            if f.readinto(chunk.data.cast("B")) != chunk.nbytes:
                raise RequestError(field, f"{claims}: {external.name!r} ended early")
            if floats:
                chunk = _widened(chunk, tensor.data_type)
                check_values(field, chunk, DType.FP16)
                out[start : start + chunk.size] = chunk
            else:
                out[start : start + chunk.size] = chunk
    return out


def _widened(chunk: np.ndarray, data_type: int) -> np.ndarray:
    """Float values as float16/32/64 numpy can compute with (bfloat16 from its bits)."""
    if data_type == TensorProto.BFLOAT16:
        return (chunk.astype(np.uint32) << 16).view(np.float32)
    return chunk


def _as_float(values: np.ndarray, tensor: TensorProto, field: str, count: int) -> np.ndarray:
    """Floats as this module keeps them: small ones float32, large ones fp16 (range-checked)."""
    if values.dtype == np.float16 and count > KEEP_FP32_ELEMENTS:
        check_values(field, values, DType.FP16)
        return values
    values = _widened(values, tensor.data_type)
    if count > KEEP_FP32_ELEMENTS:
        check_values(field, values, DType.FP16)
        return values.astype(np.float16)
    return values.astype(np.float32)
