"""rank0_expand_dims_swap: a binary elementwise op of two rank-0 values (one of them a const)
whose result one expand_dims(axes=[0]) reads computes on rank-1 values instead: the value is
expanded first, the const stored as [1], and the op makes the expand_dims's output. Other
readers of the rank-0 result read a squeeze of it. (coremltools: the backend writes a rank-0
elementwise result as rank 1 anyway, so the expand_dims is the one that costs.)"""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import const_op, stored, wide


def _expands_axis_0(op: Operation) -> bool:
    return op.type == "expand_dims" and np.asarray(stored(op.var("axes"))).reshape(-1).tolist() == [
        0
    ]


def run(edit: Editor, options: Options) -> None:
    order = {op: i for i, op in enumerate(edit.fn.operations)}
    for op in edit.ops():
        if not facts.is_binary(op.type) or edit.is_output(op.outputs[0]):
            continue
        x, y, out = op.var("x"), op.var("y"), op.outputs[0]
        if out.tensor.rank or x.tensor.rank or y.tensor.rank:
            continue
        consts = [v for v in (x, y) if const_op(v) is not None]
        readers = edit.readers(out)
        expands = [r for r in readers if _expands_axis_0(r)]
        if len(consts) != 1 or len(expands) != 1 or not all(r in order for r in readers):
            continue
        (expand,) = expands
        first = min(readers, key=order.__getitem__)
        args: dict[str, Var] = {}
        for arg, value in (("x", x), ("y", y)):
            if value is consts[0]:
                data = wide(value)
                assert data is not None  # a numeric const: a binary op reads no strings
                args[arg] = edit.const(
                    f"{value.name}_1d", data.reshape(1), value.tensor.dtype, first
                )
            else:
                axes = edit.const(f"{value.name}_expanded_axes", np.array([0]), DType.INT32, first)
                name = edit.fresh(f"{value.name}_expanded")
                args[arg] = edit.op("expand_dims", name, {"x": value, "axes": axes}, first).outputs[
                    0
                ]
        made = expand.outputs[0]
        new = edit.op(op.type, expand.name, dict(args), first, out=[made.name])
        edit.replace(made, new.outputs[0])
        edit.remove(expand)
        if edit.readers(out):
            axes = edit.const(f"{out.name}_squeeze_axes", np.array([0]), DType.INT32, first)
            squeezed = edit.op(
                "squeeze",
                edit.fresh(f"{out.name}_squeezed"),
                {"x": new.outputs[0], "axes": axes},
                first,
            )
            edit.replace(out, squeezed.outputs[0])
        edit.remove(op)
        edit.remove_if_unused(consts[0].op, expand.var("axes").op)


PASS = GraphPass(
    "rank0_expand_dims_swap",
    "optimize_elementwise_binary",
    "a rank-0 elementwise op then expand_dims computes on rank-1 values",
    run,
    needs=frozenset({"expand_dims"}),
)
