"""fuse_leaky_relu: maximum(x, alpha·x), alpha one constant number in [0, 1], is
leaky_relu(x, alpha): for x ≥ 0, x ≥ alpha·x; for x < 0, alpha·x ≥ x. (Outside [0, 1] the
maximum picks the other branch, so it is not a leaky relu.) Each op's operands in either order;
the mul must be read by the maximum alone."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Var
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import operands, scalar


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("maximum"):
        out: Var = op.outputs[0]
        for scaled, x in ((op.var("x"), op.var("y")), (op.var("y"), op.var("x"))):
            mul = scaled.op
            if mul is None or mul.type != "mul" or edit.sole_reader(scaled) is not op:
                continue
            alpha = operands(mul, x)
            value = None if alpha is None else scalar(alpha)
            if alpha is None or value is None or not 0 <= value <= 1 or x.type != out.type:
                continue
            dtype = alpha.tensor.dtype
            a = edit.const(f"{op.name}_alpha", np.array(value), dtype, op)
            new = edit.op("leaky_relu", op.name, {"x": x, "alpha": a}, op, out=[out.name])
            edit.replace(out, new.outputs[0])
            edit.drop(op, mul)
            break


PASS = GraphPass(
    "fuse_leaky_relu",
    "optimize_activation",
    "maximum(x, alpha·x) with 0 ≤ alpha ≤ 1 becomes leaky_relu(x, alpha)",
    run,
    needs=frozenset({"maximum"}),
)
