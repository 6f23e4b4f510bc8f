"""fuse_conv_scale: a convolution's output multiplied (or divided) by a constant that is one
number per output channel, or one number, is the same convolution with its weight and bias
scaled (W'[o] = s[o]·W[o], b'[o] = s[o]·b[o]), when the weight is a plain const."""

from __future__ import annotations

import numpy as np

from app.passes.conv_parts import bias_of, fold_into, weight_of
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import fits, operands, per_channel, wide


def run(edit: Editor, options: Options) -> None:
    edit.repeat(_sweep)  # the conv a fusion makes may be followed by another such op


def _sweep(edit: Editor) -> bool:
    fused = False
    for conv in edit.ops("conv"):
        y = conv.outputs[0]
        op = edit.sole_reader(y)
        if op is None or op.type not in ("mul", "real_div"):
            continue
        other = operands(op, y)
        value = None if other is None else wide(other)
        if value is None or op.outputs[0].type != y.type:
            continue
        if op.type == "real_div" and (op.var("x") is not y or not np.all(value != 0)):
            continue
        scale = per_channel(value, y.tensor.shape, 1)
        weight, bias = weight_of(conv), bias_of(conv)
        if scale is None or weight is None or bias is None:
            continue
        if op.type == "real_div":
            scale = 1.0 / scale
        weight = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        bias = bias * scale if "bias" in conv.inputs else None
        w = conv.var("weight")
        if not fits(weight, w) or not fits(bias, w):
            continue
        fold_into(edit, conv, op, weight, bias)
        fused = True
    return fused


PASS = GraphPass(
    "fuse_conv_scale",
    "optimize_conv",
    "a per-channel constant multiplying a conv's output is folded into its weight and bias",
    run,
    needs=frozenset({"conv"}),
)
