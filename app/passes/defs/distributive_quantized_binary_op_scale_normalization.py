"""distributive_quantized_binary_op_scale_normalization: for add or sub of two dequantized values
quantized again,

    quantize(dequantize(x, s_x) ± dequantize(y, s_y), s_z)

every scale divided by s_y gives the same integers: dequantize(x, s_x / s_y) ±
dequantize(y, 1) quantized with s_z / s_y. A backend fuses one input's scale into the op; with
s_y 1 the other needs no multiplication (the seed). Per-tensor scales (scalars), x and y
swapped when y's is a vector and x's a scalar is not taken (the seed's own limit: scalar s_y);
each dequantize read by the op alone, the op read by the quantize alone."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import const_op, stored


def _scale(op: Operation) -> float | None:
    var = op.var("scale")
    if const_op(var) is None:
        return None
    value = np.asarray(stored(var), np.float64)
    return float(value) if value.ndim == 0 else None


def _rescaled(edit: Editor, op: Operation, scale: float) -> Operation:
    args = dict(op.inputs)
    dtype = op.var("scale").tensor.dtype
    args["scale"] = edit.const(f"{op.name}_scale", np.array(scale), dtype, op)
    return edit.swap(op, op.type, args)


def run(edit: Editor, options: Options) -> None:
    for binary in edit.ops("add", "sub"):
        if edit.removed(binary):
            continue
        dx, dy = binary.var("x").op, binary.var("y").op
        quantize = edit.sole_reader(binary.outputs[0])
        if quantize is None or quantize.type != "quantize" or dx is None or dy is None:
            continue
        if dx.type != "dequantize" or dy.type != "dequantize" or dx is dy:
            continue
        if any(edit.sole_reader(d.outputs[0]) is not binary for d in (dx, dy)):
            continue
        sx, sy, sz = _scale(dx), _scale(dy), _scale(quantize)
        if sx is None or sy is None or sz is None or sy == 1.0:
            continue
        _rescaled(edit, dx, sx / sy)
        _rescaled(edit, dy, 1.0)
        _rescaled(edit, quantize, sz / sy)


PASS = GraphPass(
    "distributive_quantized_binary_op_scale_normalization",
    "optimize_quantization",
    "dequantize ± dequantize -> quantize: the second input's scale made 1, the others divided",
    run,
    needs=frozenset({"quantize"}),
)
