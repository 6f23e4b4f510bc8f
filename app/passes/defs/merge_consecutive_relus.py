"""merge_consecutive_relus: relu of a relu is the inner relu (relu is idempotent), whatever else
reads the inner one."""

from __future__ import annotations

from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("relu"):
        inner = op.var("x")
        if inner.op is not None and inner.op.type == "relu":
            edit.merge_into(op, [inner])


PASS = GraphPass(
    "merge_consecutive_relus",
    "optimize_repeat_ops",
    "relu(relu(x)) becomes relu(x)",
    run,
    needs=frozenset({"relu"}),
)
