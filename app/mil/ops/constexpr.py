"""The compressed-weight ops (`constexpr_*`): their declarations and type rules, as coremltools
defines them (their decompression, the float64 meaning, is app/mil/ops/decompress.py).

Two generations exist under the same names. The iOS16 forms (used by ios17 programs) take flat,
byte-packed data plus a `shape`: `constexpr_lut_to_dense(indices uint8[M], lut T[2^n], shape)`,
`constexpr_sparse_to_dense(nonzero_data, mask uint8[M], shape)`, and
`constexpr_affine_dequantize(quantized_data, zero_point, scale, axis)`. The iOS18 forms take
shaped sub-byte tensors: `constexpr_lut_to_dense(indices uintN[shape], lut[..., 2^n, V])`,
`constexpr_sparse_to_dense(nonzero_data, mask uint1[shape])`, the block-wise
`constexpr_blockwise_shift_scale(data, scale, offset)` and, for pruned-then-quantized weights,
`constexpr_sparse_blockwise_shift_scale` feeding `constexpr_sparse_to_dense`. The checks are those
of coremltools' `ops/defs/iOS16/constexpr_ops.py` and `ops/defs/iOS18/compression.py`.
"""

from __future__ import annotations

import math

import numpy as np

from app.mil.call import Call
from app.mil.ir import Var
from app.mil.ops import decompress
from app.mil.ops import sources as src
from app.mil.ops.record import INT, Arg, Decompression, Family, Form, OpRecord, Seen, output_flops
from app.mil.types import FLOATS, DType, TensorType

_LUT_SIZES = (2, 4, 16, 64, 256)  # iOS16: nbits 1, 2, 4, 6 or 8


def _value(call: Call, arg: str) -> np.ndarray | None:
    """The array of a const argument; None when a constexpr op produces it (known at load time)."""
    var = call.inputs.get(arg)
    if var is None:
        return None
    assert isinstance(var, Var)
    if var.op is None or not (var.op.type == "const" or var.op.type.startswith("constexpr_")):
        raise call.fail(arg, f"must be a const or a constexpr output, got {var.name!r}")
    value = call.value(arg)
    return None if value is None else np.asarray(value)


def _vector(call: Call, arg: str) -> TensorType:
    t = call.type(arg)
    if t.rank != 1:
        raise call.fail(arg, f"must be a vector, got {t}")
    return t


def _shape(call: Call) -> tuple[int, ...]:
    shape = _value(call, "shape")
    assert shape is not None
    dims = tuple(int(d) for d in shape.reshape(-1))
    if not dims or any(d < 1 for d in dims):
        raise call.fail("shape", f"{list(dims)} is not a shape of positive dimensions")
    return dims


def affine_dequantize(call: Call) -> list[TensorType]:
    data = call.type("quantized_data")
    _value(call, "quantized_data")
    (axis,) = call.axes("axis", data.rank)
    for arg in ("scale", "zero_point"):
        t = call.type(arg)
        _value(call, arg)
        if t.rank > 1 or (t.rank == 1 and t.shape[0] != data.shape[axis]):
            raise call.fail(
                arg, f"must be a scalar or a vector of {data.shape[axis]} (axis {axis}), got {t}"
            )
    return [TensorType(call.type("scale").dtype, data.shape)]


def lut_to_dense_ios16(call: Call) -> list[TensorType]:
    indices, lut = _vector(call, "indices"), _vector(call, "lut")
    _value(call, "indices")
    _value(call, "lut")
    if lut.size not in _LUT_SIZES:
        raise call.fail("lut", f"needs one of {list(_LUT_SIZES)} entries, got {lut.size}")
    shape = _shape(call)
    packed = math.ceil(int(math.log2(lut.size)) * math.prod(shape) / 8)
    if indices.size != packed:
        raise call.fail("indices", f"{list(shape)} packed needs {packed} bytes, got {indices.size}")
    return [TensorType(lut.dtype, shape)]


def sparse_to_dense_ios16(call: Call) -> list[TensorType]:
    data, mask_t = _vector(call, "nonzero_data"), _vector(call, "mask")
    _value(call, "nonzero_data")
    shape = _shape(call)
    size = math.prod(shape)
    if mask_t.size != math.ceil(size / 8):
        raise call.fail("mask", f"{list(shape)} needs {math.ceil(size / 8)} mask bytes")
    mask = _value(call, "mask")
    assert mask is not None
    bits = np.unpackbits(mask.astype(np.uint8), bitorder="little")
    if bits[size:].any():
        raise call.fail("mask", "the padding bits after the last element must be zero")
    if int(bits.sum()) != data.size:
        raise call.fail("nonzero_data", f"{data.size} values for {int(bits.sum())} set mask bits")
    return [TensorType(data.dtype, shape)]


def _shift_scale(call: Call, data_shape: tuple[int, ...], data_dtype: DType, data_arg: str) -> None:
    scale = call.type("scale")
    _value(call, "scale")
    if scale.rank != len(data_shape):
        raise call.fail("scale", f"rank {scale.rank} differs from the {data_arg} rank")
    for axis, (d, s) in enumerate(zip(data_shape, scale.shape, strict=True)):
        if d % s:
            raise call.fail("scale", f"{s} scales do not divide dimension {axis} ({d})")
    if call.has("offset"):
        offset = call.type("offset")
        _value(call, "offset")
        if offset.shape != scale.shape:
            raise call.fail("offset", f"shape {list(offset.shape)} differs from the scale's")
        if not offset.dtype.is_float and offset.dtype is not data_dtype:
            raise call.fail("offset", f"an integer offset must be {data_dtype.value}")


def blockwise_shift_scale(call: Call) -> list[TensorType]:
    data = call.type("data")
    _value(call, "data")
    _shift_scale(call, data.shape, data.dtype, "data")
    return [TensorType(call.type("scale").dtype, data.shape)]


def _lut_shape(call: Call, indices: TensorType) -> tuple[int, ...]:
    """Checks an iOS18 LUT against its (dense) indices; returns the decompressed shape."""
    lut = call.type("lut")
    _value(call, "lut")
    if lut.rank != indices.rank + 2:
        raise call.fail("lut", f"rank {lut.rank} must be the indices' rank + 2")
    for axis, (d, g) in enumerate(zip(indices.shape, lut.shape, strict=False)):
        if d % g:
            raise call.fail("lut", f"{g} tables do not divide dimension {axis} ({d})")
    bits = indices.dtype.bits
    if lut.shape[-2] != 1 << bits:
        raise call.fail("lut", f"{indices.dtype.value} indices need {1 << bits} entries")
    vector = lut.shape[-1]
    if not call.has("vector_axis"):
        if vector > 1:
            raise call.fail("vector_axis", f"required for vectors of {vector} entries")
        return indices.shape
    (axis,) = call.axes("vector_axis", indices.rank)
    shape = list(indices.shape)
    shape[axis] *= vector
    return tuple(shape)


def lut_to_dense(call: Call) -> list[TensorType]:
    indices = call.type("indices")
    _value(call, "indices")
    return [TensorType(call.type("lut").dtype, _lut_shape(call, indices))]


def _sparse(call: Call, data_arg: str, mask_arg: str) -> TensorType:
    data = _vector(call, data_arg)
    mask = _value(call, mask_arg)
    _value(call, data_arg)
    if mask is not None and int(np.count_nonzero(mask)) != data.size:
        count = int(np.count_nonzero(mask))
        raise call.fail(data_arg, f"{data.size} values for {count} set mask bits")
    return data


def sparse_to_dense(call: Call) -> list[TensorType]:
    data = _sparse(call, "nonzero_data", "mask")
    return [TensorType(data.dtype, call.type("mask").shape)]


def sparse_blockwise_shift_scale(call: Call) -> list[TensorType]:
    data = _sparse(call, "nonzero_data", "data_mask")
    mask = call.type("data_mask")
    _shift_scale(call, mask.shape, data.dtype, "data_mask")
    return [mask, TensorType(call.type("scale").dtype, data.shape)]


F = Family.CONSTEXPR
_U1, _U8, _U32 = frozenset({DType.UINT1}), frozenset({DType.UINT8}), frozenset({DType.UINT32})
_BYTE_INTS = frozenset({DType.INT8, DType.UINT8})
_LUT_VALUES = _BYTE_INTS | FLOATS
_SHIFTED = _LUT_VALUES | {DType.INT4, DType.UINT4}
_INDICES = frozenset({DType.UINT1, DType.UINT2, DType.UINT3, DType.UINT4, DType.UINT6, DType.UINT8})
_SHIFT_SCALE = {"SrcT": _SHIFTED, "DstT": FLOATS, "OffsetT": _SHIFTED}
_CONST_INT = Arg(INT, const=True)
_PALETTE = Decompression("palette")
_SPARSE = Decompression("sparse")


def _record(name: str, form: Form, **facts) -> OpRecord:
    meaning = getattr(decompress, name.removeprefix("constexpr_"))
    return OpRecord(name, F, form, meaning=meaning, flops=output_flops, **facts)


RECORDS: tuple[OpRecord, ...] = (
    _record(
        "constexpr_affine_dequantize",
        Form(
            {
                "quantized_data": Arg("SrcT", const=True),
                "zero_point": Arg("ZeroPointT", const=True),
                "scale": Arg("DstT", const=True),
                "axis": _CONST_INT,
            },
            affine_dequantize,
            {"SrcT": _BYTE_INTS, "ZeroPointT": _BYTE_INTS | {DType.FP32}, "DstT": FLOATS},
            spelling="attributes",
        ),
        since="ios17",  # an iOS16 op: in every target built here
        decompresses=Decompression("linear", "quantized_data"),
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(16, src.QUANTIZED_3600)},
    ),
    _record(
        "constexpr_blockwise_shift_scale",
        Form(
            {"data": Arg("SrcT"), "scale": Arg("DstT"), "offset": Arg("OffsetT", optional=True)},
            blockwise_shift_scale,
            _SHIFT_SCALE,
            spelling="inline",
        ),
        since="ios18",
        decompresses=Decompression("linear", "data"),
    ),
    _record(
        "constexpr_lut_to_dense",
        Form(
            {
                "indices": Arg("IndicesT"),
                "lut": Arg("T"),
                "vector_axis": Arg(INT, optional=True, const=True),
            },
            lut_to_dense,
            {"IndicesT": _INDICES, "T": _LUT_VALUES},
            spelling="inline",
        ),
        # ios17 programs use the iOS16 form: flat, byte-packed indices and a shape
        earlier=Form(
            {
                "indices": Arg(_U8, const=True),
                "lut": Arg("T", const=True),
                "shape": Arg(_U32, const=True),
            },
            lut_to_dense_ios16,
            {"T": _LUT_VALUES},
            spelling="attributes",
            until="ios17",
        ),
        decompresses=_PALETTE,
        histogram={16: Seen(16, src.SILERO_PALETTE)},
    ),
    _record(
        "constexpr_sparse_to_dense",
        Form(
            {"nonzero_data": Arg("T"), "mask": Arg(_U1)},
            sparse_to_dense,
            {"T": _SHIFTED},
            spelling="inline",
        ),
        earlier=Form(
            {
                "nonzero_data": Arg("T", const=True),
                "mask": Arg(_U8, const=True),
                "shape": Arg(_U32, const=True),
            },
            sparse_to_dense_ios16,
            {"T": _LUT_VALUES},
            spelling="attributes",
            until="ios17",
        ),
        decompresses=_SPARSE,
        histogram={16: Seen(16, src.SILERO_PRUNED)},
    ),
    _record(
        "constexpr_sparse_blockwise_shift_scale",
        Form(
            {
                "data_mask": Arg(_U1),
                "nonzero_data": Arg("SrcT"),
                "scale": Arg("DstT"),
                "offset": Arg("OffsetT", optional=True),
            },
            sparse_blockwise_shift_scale,
            _SHIFT_SCALE,
            spelling="inline",
        ),
        since="ios18",
        decompresses=_SPARSE,
    ),
    # -- known from other programs: never built here --------------------------------------------
    OpRecord(
        "constexpr_cast", F, flops=output_flops, decompresses=Decompression("cast", "source_val")
    ),
)
