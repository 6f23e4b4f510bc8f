"""dead_code_elimination: ops whose outputs reach no output of the function go (never an op with
an effect of its own, such as write_state)."""

from __future__ import annotations

from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options


def run(edit: Editor, options: Options) -> None:
    # last to first: removing an op can leave the ops that fed it unused in turn
    for op in reversed(list(edit.ops())):
        edit.remove_if_unused(op)


PASS = GraphPass(
    "dead_code_elimination",
    "cleanup",
    "removes ops whose outputs no output depends on",
    run,
)
