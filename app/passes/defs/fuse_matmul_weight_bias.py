"""fuse_matmul_weight_bias: matmul(x, W) with W a rank-2 plain const, then a constant added or
subtracted along the last axis, is linear(x, Wᵀ, bias) (linear's weight is [D_out, D_in]; a
matmul with transpose_y holds it so already); c - matmul(x, W) is linear(x, -Wᵀ, c). x of
rank 1 to 3 (linear's own), not transposed; the matmul read by the add or sub alone."""

from __future__ import annotations

import numpy as np

from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.linear_parts import bias_after, linear
from app.passes.patterns import fits, numeric, stored, wide


def _flag(op, arg: str) -> bool:
    return arg in op.inputs and bool(stored(op.inputs[arg]))


def run(edit: Editor, options: Options) -> None:
    for mm in edit.ops("matmul"):
        x, w = mm.var("x"), mm.var("y")
        if not numeric(w) or w.tensor.rank != 2 or numeric(x) or _flag(mm, "transpose_x"):
            continue
        if x.tensor.rank not in (1, 2, 3):
            continue
        bias = bias_after(edit, mm.outputs[0])
        if bias is None:
            continue
        # W as the program holds it (rounded to its dtype, as the linear's const would round
        # it): transposed, a view that shares the memory of the const the program as built
        # keeps, where a copy would hold every fused weight twice; c - matmul negates it
        weight = np.asarray(stored(w)) if bias.sign > 0 else -np.asarray(wide(w))
        weight = weight if _flag(mm, "transpose_y") else weight.T
        if not fits(weight, w) or not fits(bias.value, w):
            continue
        linear(edit, x, weight, bias.value, w, bias)
        edit.drop(bias.op, mm)


PASS = GraphPass(
    "fuse_matmul_weight_bias",
    "optimize_linear",
    "matmul by a constant weight then a constant bias becomes linear",
    run,
    needs=frozenset({"matmul"}),
)
