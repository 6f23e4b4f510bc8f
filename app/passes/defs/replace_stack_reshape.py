"""replace_stack_reshape: stack(values, axis a) then a reshape that folds the new axis into a
neighbour is a concat: into the axis after it, concat(values, axis a); into the axis before it,
concat(values, axis a - 1, interleave=True) (the seed's two examples). The stack must be read
by the reshape alone."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Var
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored


def run(edit: Editor, options: Options) -> None:
    for stack in edit.ops("stack"):
        reshape = edit.sole_reader(stack.outputs[0])
        if reshape is None or reshape.type != "reshape":
            continue
        values = stack.vars("values")
        shape = list(values[0].tensor.shape)
        n, rank = len(values), len(shape)
        a = int(np.asarray(stored(stack.var("axis")))) % (rank + 1)
        target = list(reshape.outputs[0].tensor.shape)
        if a < rank and target == [*shape[:a], n * shape[a], *shape[a + 1 :]]:
            axis, interleave = a, False
        elif a > 0 and target == [*shape[: a - 1], shape[a - 1] * n, *shape[a:]]:
            axis, interleave = a - 1, True
        else:
            continue
        args: dict[str, Var | tuple[Var, ...]] = {
            "values": values,
            "axis": edit.const(f"{reshape.name}_axis", np.array(axis), DType.INT32, reshape),
        }
        if interleave:
            args["interleave"] = edit.const(
                f"{reshape.name}_interleave", np.array(True), DType.BOOL, reshape
            )
        out = reshape.outputs[0]
        new = edit.op("concat", reshape.name, args, reshape, out=[out.name])
        edit.replace(out, new.outputs[0])
        edit.drop(reshape, stack)


PASS = GraphPass(
    "replace_stack_reshape",
    "optimize_tensor_operation",
    "stack then a reshape that folds the new axis into a neighbour becomes concat",
    run,
    needs=frozenset({"stack"}),
)
