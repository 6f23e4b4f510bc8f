"""detect_concat_interleave: n tensors (B, C, H, W) concatenated on the channel axis, reshaped to
(B, n, C, H, W), transposed by [0, 2, 1, 3, 4] and reshaped back to (B, C·n, H, W) is a channel
shuffle: concat(interleave=True) of the same tensors (channel c·n + i is tensor i's channel c).
Each intermediate must be read by the pattern alone."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Input, Operation
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored


def _producer(edit: Editor, op: Operation, op_type: str) -> Operation | None:
    var = op.var("x") if op.type != "concat" else None
    made = var.op if var is not None else None
    if var is None or made is None or made.type != op_type or edit.sole_reader(var) is not op:
        return None
    return made


def run(edit: Editor, options: Options) -> None:
    for last in edit.ops("reshape"):
        transpose = _producer(edit, last, "transpose")
        split = _producer(edit, transpose, "reshape") if transpose else None
        concat = _producer(edit, split, "concat") if split else None
        if concat is None or (
            "interleave" in concat.inputs and bool(stored(concat.var("interleave")))
        ):
            continue
        assert transpose is not None and split is not None  # concat was found through them
        values = concat.inputs["values"]
        assert isinstance(values, tuple)  # a variadic argument
        first = values[0].tensor
        if first.rank != 4 or int(np.asarray(stored(concat.var("axis")))) % 4 != 1:
            continue
        if any(v.tensor != first for v in values):
            continue
        b, c, h, w = first.shape
        n = len(values)
        perm = np.asarray(stored(transpose.var("perm"))).reshape(-1).tolist()
        if (
            split.outputs[0].tensor.shape != (b, n, c, h, w)
            or [p % 5 for p in perm] != [0, 2, 1, 3, 4]
            or last.outputs[0].tensor.shape != (b, c * n, h, w)
        ):
            continue
        interleave = edit.const(f"{last.name}_interleave", np.array(True), DType.BOOL, last)
        args: dict[str, Input] = {
            "values": values,
            "axis": concat.var("axis"),
            "interleave": interleave,
        }
        edit.swap(last, "concat", args)
        edit.drop(transpose, split, concat)


PASS = GraphPass(
    "detect_concat_interleave",
    "optimize_tensor_operation",
    "concat, reshape, transpose, reshape that shuffle channels become concat(interleave=True)",
    run,
    needs=frozenset({"concat"}),
)
