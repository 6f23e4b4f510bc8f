"""select_optimization: select(cond, a, b) with a constant cond.

- cond one value in every element: the select is a (true) or b (false), when that operand has
  the select's type (broadcasting against cond may make the output larger: then it stays).
- otherwise, when a is a constant of infinities (one number, +inf or -inf): select(cond, a, b)
  is select(cond, a, 0) + b, the first a constant computed here; likewise with b infinite, a
  mask added: the form attention masks take (coremltools' second case). A NaN in the other
  operand where cond picks the infinity gives NaN where the select gave the infinity, as in
  coremltools."""

from __future__ import annotations

import numpy as np

from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import numeric, scalar, stored


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("select"):
        cond, a, b = op.var("cond"), op.var("a"), op.var("b")
        values = stored(cond)
        if values is None or isinstance(values, str):
            continue
        out = op.outputs[0]
        flat = np.asarray(values).astype(bool).reshape(-1)
        if flat.size and np.all(flat == flat[0]):
            kept = a if flat[0] else b
            if kept.type == out.type:
                edit.merge_into(op, [kept])
            continue
        for infinite, other, picked in ((a, b, True), (b, a, False)):
            number = scalar(infinite)
            if number is None or not np.isinf(number) or numeric(other):
                continue
            mask = np.where(np.asarray(values).astype(bool) == picked, number, 0.0)
            mask = np.broadcast_to(mask, np.broadcast_shapes(mask.shape, infinite.tensor.shape))
            shape = np.broadcast_shapes(mask.shape, other.tensor.shape)
            if shape != out.tensor.shape or other.tensor.dtype != out.tensor.dtype:
                continue
            constant = edit.const(f"{op.name}_mask", mask, out.tensor.dtype, op)
            new = edit.op("add", op.name, {"x": constant, "y": other}, op, out=[out.name])
            edit.replace(out, new.outputs[0])
            edit.drop(op)
            break


PASS = GraphPass(
    "select_optimization",
    "optimize_elementwise_binary",
    "select with a constant condition becomes one operand, or an infinite mask added",
    run,
    needs=frozenset({"select"}),
)
