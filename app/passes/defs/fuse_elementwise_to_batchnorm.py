"""fuse_elementwise_to_batchnorm: x · s + t, x of rank 4 and s, t constants of shape (1, C, 1, 1),
is batch_norm(x, mean 0, variance 1, gamma s, beta t, epsilon 0): one op for two. The mul must
be read by the add alone; a scale and shift after a conv are folded into the conv instead
(fuse_conv_scale, fuse_conv_bias run before this in the default pipeline)."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Var
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import numeric, operands, wide


def _channels(var: Var | None, c: int) -> np.ndarray | None:
    value = None if var is None else wide(var)
    return None if value is None or value.shape != (1, c, 1, 1) else value.reshape(c)


def run(edit: Editor, options: Options) -> None:
    for mul in edit.ops("mul"):
        y = mul.outputs[0]
        add = edit.sole_reader(y)
        if add is None or add.type != "add" or y.tensor.rank != 4:
            continue
        c = y.tensor.shape[1]
        for x, s in ((mul.var("x"), mul.var("y")), (mul.var("y"), mul.var("x"))):
            scale, shift = _channels(s, c), _channels(operands(add, y), c)
            if scale is None or shift is None or numeric(x):
                continue
            if x.type != y.type or add.outputs[0].type != y.type:
                continue
            dtype, out = y.tensor.dtype, add.outputs[0]
            args = {"x": x}
            for name, value in (
                ("mean", np.zeros(c)),
                ("variance", np.ones(c)),
                ("gamma", scale),
                ("beta", shift),
            ):
                args[name] = edit.const(f"{add.name}_{name}", value, dtype, add)
            args["epsilon"] = edit.const(f"{add.name}_epsilon", np.array(0.0), dtype, add)
            new = edit.op("batch_norm", add.name, args, add, out=[out.name])
            edit.replace(out, new.outputs[0])
            edit.drop(add, mul)
            break


PASS = GraphPass(
    "fuse_elementwise_to_batchnorm",
    "optimize_elementwise_binary",
    "x·s + t with s, t of shape (1, C, 1, 1) becomes batch_norm",
    run,
    needs=frozenset({"mul"}),
)
