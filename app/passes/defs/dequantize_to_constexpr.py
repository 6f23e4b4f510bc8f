"""dequantize_to_constexpr: a dequantize of a constant is constexpr_affine_dequantize of the same
data, scale, zero point and axis: the data stays int8 or uint8 in the weights, decompressed
when the model loads, where a folded dequantize would store it decompressed (the seed's reason).
constexpr_affine_dequantize takes a zero point and an axis always: zero, and axis 0 for a
scalar scale."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Input
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import const_op


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("dequantize"):
        data = op.var("input")
        scale = op.var("scale")
        zero = op.var("zero_point") if "zero_point" in op.inputs else None
        if const_op(data) is None or const_op(scale) is None:
            continue
        if zero is not None and const_op(zero) is None:
            continue
        dtype = data.tensor.dtype
        args: dict[str, Input] = {"quantized_data": data, "scale": scale}
        if zero is None:
            args["zero_point"] = edit.const(f"{op.name}_zero_point", np.array(0), dtype, op)
        else:
            args["zero_point"] = zero
        if "axis" in op.inputs:
            args["axis"] = op.var("axis")
        else:
            args["axis"] = edit.const(f"{op.name}_axis", np.array(0), DType.INT32, op)
        edit.swap(op, "constexpr_affine_dequantize", args)


PASS = GraphPass(
    "dequantize_to_constexpr",
    "optimize_quantization",
    "dequantize of a constant becomes constexpr_affine_dequantize",
    run,
    needs=frozenset({"dequantize"}),
)
