"""expand_high_rank_reshape_and_transpose: a reshape into rank 6 or more, read by one transpose
alone, read by one reshape alone back into rank 5 or less (a depth-to-space or a space-to-depth
as an ONNX import writes it: [N, b, b, C, H, W] and back) computes through tensors of rank 4 at
most. Only where the elements go matters, so:

1. Axes the transpose keeps next to each other, in order, move as one: each such run is folded
   into one axis. When four axes or fewer are left, the reshape into them, their transpose and
   the reshape out are the whole rewrite.
2. Otherwise the transpose is written as steps of rank 4, placing the output's axes one at a
   time: with the axes placed so far folded in front and the others after them in their input
   order, the next axis moves in front of those of the others that come before it (a reshape
   to [placed, before, axis, after] and the transpose [0, 2, 1, 3]). A step with nothing to
   move past moves nothing and is not written. The reshape out reads the last step.

coremltools (9.0) writes the folded transpose as it is when it has fewer than six axes (Core ML
runs rank 5); here at four, the ANE's rank (fold_high_rank's reason: the preflight's
`rank.ane-4d`, ANEForge's rank-4 cap). Left as written: either tensor read elsewhere too or an
output, a transpose whose output is not reshaped, a reshape out of rank 6 or more."""

from __future__ import annotations

import math

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored

ANE_RANK = 4
HIGH_RANK = 6  # the seed's: a reshape into this rank or more starts the pattern
LOW_RANK = 5  # ... and one back into this rank or less ends it


def _perm(op: Operation) -> list[int] | None:
    value = stored(op.var("perm"))
    if not isinstance(value, np.ndarray):
        return None
    return [int(v) % op.var("x").tensor.rank for v in value.reshape(-1)]


def _runs(perm: list[int]) -> list[list[int]]:
    """The perm cut where it stops counting up by one: the runs of input axes that stay together."""
    runs: list[list[int]] = []
    for axis in perm:
        if runs and axis == runs[-1][-1] + 1:
            runs[-1].append(axis)
        else:
            runs.append([axis])
    return runs


def _steps(dims: list[int], perm: list[int]) -> list[tuple[list[int], list[int]]]:
    """Each step of rank 4 that moves something: the shape it reshapes to, and its perm."""
    steps = []
    placed, left = 1, list(range(len(dims)))
    for axis in perm:
        i = left.index(axis)
        before = math.prod(dims[a] for a in left[:i])
        after = math.prod(dims[a] for a in left[i + 1 :])
        if before > 1 and dims[axis] > 1:
            steps.append(([placed, before, dims[axis], after], [0, 2, 1, 3]))
        placed *= dims[axis]
        left.pop(i)
    return steps


def _match(edit: Editor, start: Operation) -> tuple[Operation, Operation, list[int]] | None:
    v = start.outputs[0]
    if v.tensor.rank < HIGH_RANK:
        return None
    transpose = edit.sole_reader(v)
    if transpose is None or transpose.type != "transpose" or transpose.inputs.get("x") is not v:
        return None
    perm = _perm(transpose)
    end = edit.sole_reader(transpose.outputs[0])
    if perm is None or end is None or end.type != "reshape":
        return None
    if end.inputs.get("x") is not transpose.outputs[0] or end.outputs[0].tensor.rank > LOW_RANK:
        return None
    return transpose, end, perm


def run(edit: Editor, options: Options) -> None:
    for start in edit.ops("reshape"):
        if edit.removed(start) or (found := _match(edit, start)) is None:
            continue
        transpose, end, perm = found
        shape = start.outputs[0].tensor.shape
        runs = _runs(perm)
        firsts = sorted(run[0] for run in runs)
        # the runs in input order, their sizes, and the transpose among them
        dims = [math.prod(shape[a] for a in next(r for r in runs if r[0] == f)) for f in firsts]
        order = [firsts.index(run[0]) for run in runs]
        if len(dims) <= ANE_RANK:
            steps = [(dims, order)] if order != sorted(order) else []
        else:
            steps = _steps(dims, order)
        current: Var = start.var("x")
        for k, (to, moved) in enumerate(steps):
            first, last = k == 0, k == len(steps) - 1
            name = start.name if first else edit.fresh(start.name)
            args = {
                "x": current,
                "shape": edit.const(f"{name}_shape", np.array(to), DType.INT32, start),
            }
            out = [start.outputs[0].name] if first else None
            current = edit.op("reshape", name, args, start, out=out).outputs[0]
            name = transpose.name if last else edit.fresh(transpose.name)
            perm_const = edit.const(f"{name}_perm", np.array(moved), DType.INT32, start)
            out = [transpose.outputs[0].name] if last else None
            current = edit.op(
                "transpose", name, {"x": current, "perm": perm_const}, start, out=out
            ).outputs[0]
        edit.set_input(end, "x", current)
        edit.drop(transpose, start)


PASS = GraphPass(
    "expand_high_rank_reshape_and_transpose",
    "optimize_tensor_operation",
    "a reshape into rank 6+ -> transpose -> reshape back computes through rank 4 at most",
    run,
    needs=frozenset({"reshape"}),
)
