"""canonicalize_inplace_pattern: a state's write moves up to just after the op that makes what it
writes (read_state -> op -> write, the in-place update in its canonical order), unless a read or
a write of the same state lies between: that read would then see the new value.

A write is a write_state or a coreml_update_state (coremltools matches the latter, a write that
also returns the value; the canonical order is the same for both), told from the other ops by
its record: a stateful op taking a state and a value."""

from __future__ import annotations

from app.mil.ir import Operation, Var
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options


def run(edit: Editor, options: Options) -> None:
    edit.commit()
    ops = list(edit.fn.operations)
    for write in [op for op in ops if facts.state_write(op) is not None]:
        written = facts.state_write(write)
        assert written is not None
        state, value = written
        maker = value.op
        at, since = ops.index(write), ops.index(maker) if maker in ops else -1
        between = ops[since + 1 : at]
        if any(_touches(op, state) for op in between):
            continue
        if since + 1 < at:
            ops.insert(since + 1, ops.pop(at))
    if ops != edit.fn.operations:
        edit.fn.operations = ops
        edit.changed = True


def _touches(op: Operation, state: Var) -> bool:
    """Whether `op` reads or writes `state` (a stateful op taking it)."""
    return facts.is_stateful(op.type) and any(v is state for v in op.inputs.values())


PASS = GraphPass(
    "canonicalize_inplace_pattern",
    "optimize_state",
    "a state's write moves to just after the op that makes what it writes",
    run,
    needs=frozenset({"write_state", "coreml_update_state"}),
)
