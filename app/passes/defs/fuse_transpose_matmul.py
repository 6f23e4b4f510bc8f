"""fuse_transpose_matmul: a transpose that swaps the last two axes (and only them) feeding a
matmul becomes the matmul's transpose_x / transpose_y, when the matmul is all that reads it (a
transpose read elsewhere as well would stay, and nothing would be saved)."""

from __future__ import annotations

import numpy as np

from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored, wide


def _swaps_last_two(op) -> bool:
    rank = op.outputs[0].tensor.rank
    given = wide(op.var("perm"))
    if given is None:  # not a const
        return False
    perm = [int(p) % rank for p in given]
    return rank >= 2 and perm == [*range(rank - 2), rank - 1, rank - 2]


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("matmul"):
        args = dict(op.inputs)
        fused = []
        for side in ("x", "y"):
            var = op.var(side)
            t = var.op
            if t is None or t.type != "transpose" or edit.sole_reader(var) is not op:
                continue
            if not _swaps_last_two(t) or op.var("x") is op.var("y"):
                continue
            flag = f"transpose_{side}"
            now = bool(stored(op.var(flag))) if flag in op.inputs else False
            args[side] = t.var("x")
            args[flag] = edit.const(f"{op.name}_{flag}", np.array(not now), DType.BOOL, op)
            fused.append(t)
        if fused:
            edit.swap(op, "matmul", args)
            edit.drop(*fused)


PASS = GraphPass(
    "fuse_transpose_matmul",
    "optimize_linear",
    "a transpose of the last two axes feeding a matmul becomes its transpose_x/transpose_y",
    run,
    needs=frozenset({"matmul"}),
)
