"""fuse_onehot_matmul_to_gather: one_hot(indices, axis=-1, on 1, off 0) multiplied by a constant
rank-2 table W (one row per class) picks rows of W: gather(W, indices, axis=0). The one_hot must
be read by the matmul alone, neither operand transposed.

For an index in range only: one_hot of an index out of range is a row of zeros, so the product
is zeros, where gather reads another row (or refuses). The default pipeline leaves it out (a
graph's verification draws any integers); it runs when named, for indices known in range."""

from __future__ import annotations

import numpy as np

from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import scalar, stored, wide


def _const(op, arg: str, default):
    return default if arg not in op.inputs else stored(op.inputs[arg])


def run(edit: Editor, options: Options) -> None:
    for mm in edit.ops("matmul"):
        hot = mm.var("x").op
        table = wide(mm.var("y"))
        if hot is None or hot.type != "one_hot" or table is None or table.ndim != 2:
            continue
        if edit.sole_reader(hot.outputs[0]) is not mm:
            continue
        if any(bool(_const(mm, f, False)) for f in ("transpose_x", "transpose_y")):
            continue
        rank = hot.outputs[0].tensor.rank
        axis = int(np.asarray(_const(hot, "axis", -1)))
        on = scalar(hot.var("on_value")) if "on_value" in hot.inputs else 1.0
        off = scalar(hot.var("off_value")) if "off_value" in hot.inputs else 0.0
        if axis % rank != rank - 1 or on != 1.0 or off != 0.0:
            continue
        out = mm.outputs[0]
        axis0 = edit.const(f"{mm.name}_axis", np.array(0), DType.INT32, mm)
        args = {"x": mm.var("y"), "indices": hot.var("indices"), "axis": axis0}
        new = edit.op("gather", mm.name, args, mm, out=[out.name])
        edit.replace(out, new.outputs[0])
        edit.drop(mm, hot)


PASS = GraphPass(
    "fuse_onehot_matmul_to_gather",
    "optimize_tensor_operation",
    "one_hot(indices) · W becomes gather(W, indices)",
    run,
    needs=frozenset({"one_hot"}),
)
