"""merge_consecutive_reshapes: a reshape of a reshape that nothing else reads reshapes the
first one's input directly (to the shape the second one makes; none at all when that is the
input's shape)."""

from __future__ import annotations

from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.pairs import merged_pair


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("reshape"):
        inner = op.var("x").op
        if inner is None or inner.type != "reshape" or edit.sole_reader(inner.outputs[0]) is not op:
            continue
        shape = op.outputs[0].tensor.shape
        merged_pair(edit, op, inner, "shape", list(shape), inner.var("x").tensor.shape == shape)


PASS = GraphPass(
    "merge_consecutive_reshapes",
    "optimize_repeat_ops",
    "reshape(reshape(x)) becomes one reshape of x",
    run,
    needs=frozenset({"reshape"}),
)
