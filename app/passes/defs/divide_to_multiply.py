"""divide_to_multiply: x / c with c a float constant becomes x * (1/c), the reciprocal computed
in float64 and rounded once to c's dtype (a multiplication is cheaper than a division, and the
multiplication by a constant then folds further: fuse_conv_scale, fuse_reduce_mean). A divisor
with a zero, or whose reciprocal leaves its dtype's range, is left dividing."""

from __future__ import annotations

import numpy as np

from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import wide


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("real_div"):
        x, y = op.var("x"), op.var("y")
        divisor = wide(y)
        dtype = y.tensor.dtype
        if divisor is None or x is y or not dtype.is_float or not np.all(divisor != 0):
            continue
        reciprocal = 1.0 / divisor
        if not np.isfinite(reciprocal.astype(dtype.numpy)).all():
            continue
        # the division becomes the multiplication in place (the output's type is the same), and
        # a divisor read here alone holds the reciprocal in place
        reciprocal_y = edit.const_for(y, op, f"{op.name}_y", reciprocal, dtype, op)
        if reciprocal_y is not y:
            edit.set_input(op, "y", reciprocal_y)
        edit.renew(op, op_type="mul")


PASS = GraphPass(
    "divide_to_multiply",
    "optimize_elementwise_binary",
    "x / c with a constant c becomes x * (1/c)",
    run,
    needs=frozenset({"real_div"}),
)
