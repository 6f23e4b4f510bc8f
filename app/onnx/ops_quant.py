"""Lowerings of ONNX's QuantizeLinear and DequantizeLinear on activations (values the program
computes) onto MIL's quantize and dequantize: the same arithmetic, clip(round(x / scale) +
zero_point) and scale · (q − zero_point), with a scalar or per-axis scale and zero point known at
import. The program holds the quantized tensor as int8 or uint8; a model input of those types is
int32 in the program (app/onnx/importer.py), and its dequantization is the arithmetic spelled
out (cast, sub, mul). A DequantizeLinear of an int8 or uint8 weight (weight-only QDQ) stays
compressed: one constexpr_affine_dequantize, which Core ML expands when it loads the model, so
weight.bin holds the model's bytes and not their fp16 expansion.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.mil import DType, Var
from app.onnx.lowering import Handler, Lowering, Node, Unlowered, Value

_DTYPES = {np.dtype(np.int8): DType.INT8, np.dtype(np.uint8): DType.UINT8}


def _params(node: Node, x: Var) -> tuple[np.ndarray, np.ndarray, dict]:
    """(scale, zero point, the axis argument when they are vectors)."""
    if node.attr("block_size", 0):
        raise Unlowered(f"{node.op_type} with block_size (blocked quantization)")
    scale = node.known(1, "scale")
    assert scale is not None
    zero = node.known(2, "zero point")
    if zero is None:
        zero = np.zeros(scale.shape, np.uint8)
    if zero.dtype not in _DTYPES:
        raise Unlowered(f"{node.op_type} to {zero.dtype} (MIL quantizes to int8 and uint8)")
    if scale.ndim == 0 or scale.size == 1:
        return scale.reshape(()), zero.reshape(()), {}
    axis = node.axis(int(node.attr("axis", 1)), x.tensor.rank)
    return scale, zero, {"axis": axis}


def _zero_point(ctx: Lowering, zero: np.ndarray) -> Var:
    # ctx.node is the node being lowered: set before every lowering call
    return ctx.b.const(ctx.fresh(f"{ctx.node.out[0]}_zero_point"), zero, _DTYPES[zero.dtype])  # type: ignore[union-attr]


def quantize(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    scale, zero, axis = _params(node, x)
    return [
        ctx.op(
            "quantize",
            node.out[0],
            input=x,
            scale=scale.astype(np.float32),
            zero_point=_zero_point(ctx, zero),
            output_dtype="int8" if zero.dtype == np.int8 else "uint8",
            **axis,
        )
    ]


def _weight(ctx: Lowering, node: Node, data: np.ndarray) -> Var:
    """constexpr_affine_dequantize of a weight known at import."""
    scale = node.known(1, "scale")
    assert scale is not None
    zero = node.known(2, "zero point")
    zero = np.zeros(scale.shape, data.dtype) if zero is None else zero.astype(data.dtype)
    if scale.size == 1:
        scale, zero, axis = scale.reshape(()), zero.reshape(()), 0
    else:
        axis = int(node.attr("axis", 1)) % data.ndim
    dtype = _DTYPES[data.dtype]
    key = node.proto.input[0]
    name = ctx.fresh(f"{key}_dequantized")
    b = ctx.b
    args: dict[str, Any] = {
        "quantized_data": b.const(b.unique(f"{name}_quantized_data"), data, dtype),
        "zero_point": b.const(b.unique(f"{name}_zero_point"), zero, dtype),
        "scale": b.const(b.unique(f"{name}_scale"), scale.astype(np.float16), DType.FP16),
        "axis": b.const(b.unique(f"{name}_axis"), np.array(axis, np.int32), DType.INT32),
    }
    out = b.op("constexpr_affine_dequantize", name, **args)
    ctx.origin[name] = node.label
    assert isinstance(out, Var)
    return out


def dequantize(ctx: Lowering, node: Node) -> list[Value]:
    data = node.input(0)
    if isinstance(data, np.ndarray):  # weight-only QDQ (lowering.py's _weight_only_qdq)
        return [_weight(ctx, node, data)]
    x = node.var(0)
    scale, zero, axis = _params(node, x)
    if x.tensor.dtype in (DType.INT8, DType.UINT8):
        return [
            ctx.op(
                "dequantize",
                node.out[0],
                input=x,
                scale=scale.astype(np.float32),
                zero_point=ctx.b.const(
                    ctx.fresh(f"{node.out[0]}_zero_point"),
                    zero.astype(x.tensor.dtype.numpy),
                    x.tensor.dtype,
                ),
                **axis,
            )
        ]
    shape = [1] * x.tensor.rank
    if axis:
        shape[axis["axis"]] = -1
    values = ctx.op("cast", x=x, dtype="fp16")
    centered = ctx.op("sub", x=values, y=zero.astype(np.float32).reshape(shape))
    return [ctx.op("mul", node.out[0], x=centered, y=scale.astype(np.float32).reshape(shape))]


HANDLERS: dict[str, Handler] = {"QuantizeLinear": quantize, "DequantizeLinear": dequantize}
