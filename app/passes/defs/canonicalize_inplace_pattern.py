"""canonicalize_inplace_pattern: a write_state moves up to just after the op that makes what it
writes (read_state -> op -> write_state, the in-place update in its canonical order), unless a
read or a write of the same state lies between: that read would then see the new value.

coremltools matches coreml_update_state, a write that also returns the value; this IR writes a
state with write_state, which returns nothing, and the canonical order is the same."""

from __future__ import annotations

from app.mil.ir import Operation
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options


def run(edit: Editor, options: Options) -> None:
    edit.commit()
    ops = list(edit.fn.operations)
    for write in [op for op in ops if op.type == "write_state"]:
        maker = write.var("data").op
        state = write.var("input")
        at, since = ops.index(write), ops.index(maker) if maker in ops else -1
        between = ops[since + 1 : at]
        if any(_touches(op, state) for op in between):
            continue
        if since + 1 < at:
            ops.insert(since + 1, ops.pop(at))
    if ops != edit.fn.operations:
        edit.fn.operations = ops
        edit.changed = True


def _touches(op: Operation, state) -> bool:
    return op.type in ("read_state", "write_state") and op.inputs.get("input") is state


PASS = GraphPass(
    "canonicalize_inplace_pattern",
    "optimize_state",
    "a write_state moves to just after the op that makes what it writes",
    run,
    needs=frozenset({"write_state"}),
)
