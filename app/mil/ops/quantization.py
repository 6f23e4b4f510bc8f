"""Activation quantization: quantize and dequantize, the iOS17 ops (coremltools iOS17
`quantization_ops.py`). Weights are compressed by the constexpr ops instead (constexpr.py).

    quantize:   q = clip(round(x / scale) + zero_point)   (int8 or uint8; halves to even)
    dequantize: x = scale · (q - zero_point)

scale and zero_point are scalars, or vectors along `axis` (which then must be given). ONNX's
QuantizeLinear and DequantizeLinear mean the same, with saturation to the integer range.
"""

from __future__ import annotations

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ops.common import U, known, swept
from app.mil.ops.record import INT, STR, Arg, Family, Form, GraphUse, OpRecord, Trait
from app.mil.types import FLOATS, DType, TensorType

F = Family.ELEMENTWISE
_INTEGERS = frozenset({DType.INT8, DType.UINT8})
_OUTPUTS = {"int8": DType.INT8, "uint8": DType.UINT8}


def _check_params(call: Call) -> TensorType:
    x = call.type("input")
    scale = call.type("scale")
    if scale.rank == 0:
        if call.has("axis"):
            raise call.fail("axis", "only with vector scales")
        if call.has("zero_point") and call.type("zero_point").rank != 0:
            raise call.fail("zero_point", "needs a scalar, as the scale is one")
        return x
    if scale.rank != 1 or not call.has("axis"):
        raise call.fail("scale", "needs a scalar, or a vector along a given axis")
    (axis,) = call.axes("axis", x.rank)
    for arg in ("scale", "zero_point"):
        if call.has(arg) and call.type(arg).shape != (x.shape[axis],):
            raise call.fail(arg, f"needs [{x.shape[axis]}] (axis {axis}), got {call.type(arg)}")
    return x


def _quantize_type(call: Call) -> list[TensorType]:
    x = _check_params(call)
    dtype = call.const("output_dtype")
    if dtype not in _OUTPUTS:
        raise call.fail("output_dtype", f"{dtype!r} is not int8 or uint8")
    if call.has("zero_point") and call.type("zero_point").dtype is not _OUTPUTS[dtype]:
        raise call.fail("zero_point", f"needs the output's dtype, {dtype}")
    scale = known(call, "scale")
    if scale is not None and not np.all(scale):
        raise call.fail("scale", "cannot be 0")
    return [TensorType(_OUTPUTS[dtype], x.shape)]


def _dequantize_type(call: Call) -> list[TensorType]:
    x = _check_params(call)
    return [TensorType(call.type("scale").dtype, x.shape)]


def _along(a: Args, arg: str, rank: int, default: float) -> np.ndarray | float:
    """A scalar, or a vector shaped to broadcast along `axis`."""
    if not a.has(arg):
        return default
    value = a.f64(arg)
    if value.ndim == 0:
        return value
    axis = int(a.const("axis")) % rank
    return value.reshape([-1 if i == axis else 1 for i in range(rank)])


def _quantize(a: Args) -> np.ndarray:
    x = a.f64("input")
    info = np.iinfo(_OUTPUTS[a.const("output_dtype")].numpy)
    q = np.round(x / _along(a, "scale", x.ndim, 1.0)) + _along(a, "zero_point", x.ndim, 0.0)
    return np.clip(q, info.min, info.max)


def _dequantize(a: Args) -> np.ndarray:
    q = a.f64("input")
    return _along(a, "scale", q.ndim, 1.0) * (q - _along(a, "zero_point", q.ndim, 0.0))


_PARAMS = {"axis": Arg(INT, optional=True, const=True)}

RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "quantize",
        F,
        Form(
            {
                "input": Arg("SrcT"),
                "zero_point": Arg("DstT", optional=True, const=True),
                "scale": Arg("SrcT", const=True),
                **_PARAMS,
                "output_dtype": Arg(STR, const=True),
            },
            _quantize_type,
            {"SrcT": FLOATS, "DstT": _INTEGERS},
        ),
        meaning=_quantize,
        traits=frozenset({Trait.ELEMENTWISE}),
        # Exact on its input; a device dividing in fp16 rounds a value within fp16 of a half
        # step to the neighbouring integer (Core AI's runtime does): one step, 2^-6 of the
        # output when the scale uses at least half of int8's 127 steps.
        graph=GraphUse("clip(round(input / scale) + zero_point) to int8 or uint8", 2**-6),
        ane=swept(0.00027),
    ),
    OpRecord(
        "dequantize",
        F,
        Form(
            {
                "input": Arg("SrcT"),
                "zero_point": Arg("SrcT", optional=True, const=True),
                "scale": Arg("DstT", const=True),
                **_PARAMS,
            },
            _dequantize_type,
            {"SrcT": _INTEGERS, "DstT": FLOATS},
        ),
        meaning=_dequantize,
        traits=frozenset({Trait.ELEMENTWISE}),
        graph=GraphUse("scale · (input - zero_point), in the scale's dtype", 2 * U),
        ane=swept(0.00027),
    ),
)
