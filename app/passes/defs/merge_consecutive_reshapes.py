"""merge_consecutive_reshapes: a reshape of a reshape that nothing else reads reshapes the
first one's input directly (to the shape the second one makes; none at all when that is the
input's shape)."""

from __future__ import annotations

import numpy as np

from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("reshape"):
        inner = op.inputs["x"].op  # type: ignore[union-attr]
        if inner is None or inner.type != "reshape" or edit.sole_reader(inner.outputs[0]) is not op:
            continue
        source, out = inner.inputs["x"], op.outputs[0]
        if source.type == out.type:  # type: ignore[union-attr]
            if not edit.replace(out, source):  # type: ignore[arg-type]
                continue
        else:
            shape = edit.const(f"{op.name}_shape", np.array(out.tensor.shape), DType.INT32, op)
            new = edit.op("reshape", op.name, {"x": source, "shape": shape}, op, out=[out.name])
            edit.replace(out, new.outputs[0])
        edit.remove(op, inner)
        edit.remove_if_unused(op.inputs["shape"].op, inner.inputs["shape"].op)  # type: ignore[union-attr, arg-type]


PASS = GraphPass(
    "merge_consecutive_reshapes",
    "optimize_repeat_ops",
    "reshape(reshape(x)) becomes one reshape of x",
    run,
    needs=frozenset({"reshape"}),
)
