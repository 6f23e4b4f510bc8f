"""noop_elimination: ops that hand on their input unchanged go, their readers reading the input:
adding or subtracting zeros, multiplying or dividing by ones (when the constant's broadcast
leaves the shape as it is), and reshapes, transposes, tiles, slices, splits, concats and
reductions over size-1 axes that leave the shape and the order of the elements as they are."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored, wide

# binary op -> (the x that leaves y, the y that leaves x); None: no such operand
_IDENTITIES = {"add": (0, 0), "sub": (None, 0), "mul": (1, 1), "real_div": (None, 1)}
_SAME_SHAPE = {"reshape", "tile", "slice_by_size", "split", "squeeze"}
_REDUCTIONS = {"reduce_sum", "reduce_mean", "reduce_max"}  # of one element: the element


def _all(var: Var, number: float | None) -> bool:
    value = wide(var)
    return (
        number is not None
        and value is not None
        and value.size > 0
        and bool(np.all(value == number))
    )


def _passed_on(op: Operation) -> Var | None:
    """The input `op` hands on unchanged, if it does."""
    out = op.outputs[0]
    if op.type in _IDENTITIES:
        x, y = op.inputs["x"], op.inputs["y"]
        keeps_y, keeps_x = _IDENTITIES[op.type]
        for kept, other, number in ((x, y, keeps_x), (y, x, keeps_y)):
            if _all(other, number) and kept.type == out.type:  # type: ignore[union-attr]
                return kept  # type: ignore[return-value]
        return None
    x = op.inputs.get("x")
    if not isinstance(x, Var) or x.type != out.type:
        return None
    if op.type in _SAME_SHAPE:
        return x
    if op.type == "transpose":
        perm = [int(p) % x.tensor.rank for p in np.asarray(stored(op.inputs["perm"])).reshape(-1)]  # type: ignore[arg-type]
        return x if perm == sorted(perm) else None
    if op.type == "slice_by_index":
        stride = stored(op.inputs["stride"]) if "stride" in op.inputs else None  # type: ignore[arg-type]
        return x if stride is None or min(np.asarray(stride).reshape(-1)) > 0 else None
    if op.type in _REDUCTIONS:
        return x  # same type as its input: every reduced axis has one element (keep_dims)
    return None


def _concat_of_one(op: Operation) -> Var | None:
    values = op.inputs["values"]
    if len(values) == 1 and values[0].type == op.outputs[0].type:  # type: ignore[arg-type, union-attr]
        return values[0]  # type: ignore[index, return-value]
    return None


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops():
        if len(op.outputs) != 1 or op.type == "const":
            continue
        kept = _concat_of_one(op) if op.type == "concat" else _passed_on(op)
        if kept is not None:
            edit.merge_into(op, [kept])


PASS = GraphPass(
    "noop_elimination",
    "cleanup",
    "removes ops that hand on their input unchanged (add 0, mul 1, identity reshapes, ...)",
    run,
)
