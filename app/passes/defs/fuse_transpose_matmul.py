"""fuse_transpose_matmul: a transpose that swaps the last two axes (and only them) feeding a
matmul becomes the matmul's transpose_x / transpose_y, when the matmul is all that reads it (a
transpose read elsewhere as well would stay, and nothing would be saved)."""

from __future__ import annotations

from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored


def _swaps_last_two(op) -> bool:
    rank = op.outputs[0].tensor.rank
    perm = [int(p) % rank for p in stored(op.inputs["perm"])]
    return rank >= 2 and perm == [*range(rank - 2), rank - 1, rank - 2]


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("matmul"):
        args = dict(op.inputs)
        fused = []
        for side in ("x", "y"):
            var = op.inputs[side]
            t = var.op  # type: ignore[union-attr]
            if t is None or t.type != "transpose" or edit.sole_reader(var) is not op:  # type: ignore[arg-type]
                continue
            if not _swaps_last_two(t) or op.inputs["x"] is op.inputs["y"]:
                continue
            flag = f"transpose_{side}"
            now = bool(stored(op.inputs[flag])) if flag in op.inputs else False  # type: ignore[arg-type]
            args[side] = t.inputs["x"]
            args[flag] = edit.const(f"{op.name}_{flag}", not now, DType.BOOL, op)
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
