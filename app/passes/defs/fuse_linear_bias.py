"""fuse_linear_bias: linear then a constant added or subtracted along the last axis is one linear:
bias' = bias ± c; c - linear(x, W, b) is linear(x, -W, c - b). The weight and bias plain
consts, the linear read by the add or sub alone."""

from __future__ import annotations

import numpy as np

from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.linear_parts import bias_after, linear
from app.passes.patterns import fits, numeric, wide


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("linear"):
        w = op.var("weight")
        if not numeric(w) or ("bias" in op.inputs and not numeric(op.var("bias"))):
            continue
        bias = bias_after(edit, op.outputs[0])
        if bias is None:
            continue
        # read (widened) once the fusion is found: a model's linears are most of its weights
        weight = wide(w)
        given = wide(op.var("bias")) if "bias" in op.inputs else None
        assert weight is not None
        old = np.zeros(weight.shape[0]) if given is None else given.reshape(-1)
        new_weight, new_bias = weight * bias.sign, old * bias.sign + bias.value
        if not fits(new_weight, w) or not fits(new_bias, w):
            continue
        linear(edit, op.var("x"), new_weight, new_bias, w, bias)
        edit.drop(bias.op, op)


PASS = GraphPass(
    "fuse_linear_bias",
    "optimize_linear",
    "linear then a constant bias becomes one linear",
    run,
    needs=frozenset({"linear"}),
)
