"""prefer_state_in_downstream: the ops after a coreml_update_state that read the value it wrote
read its output instead (the state read back), so the value need not be kept alive beside the
state: read_state -> op -> write -> read_state -> ... rather than the op's output held for its
readers as well (the seed). It runs after canonicalize_inplace_pattern, which puts each write
just after the op making its value, so that every later reader is redirected.

As coremltools: nothing changes when the value is read by the update alone, or otherwise only
by other updates; readers before the update keep the value. Unlike coremltools a function
output that is the value stays that value: an output keeps the name the request gave it, and
it is kept alive to be returned in any case, so the state would save nothing there.

An update is told by its record: a stateful op that writes a state and has an output."""

from __future__ import annotations

from app.mil.ir import Operation
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options


def _is_update(op: Operation) -> bool:
    return bool(op.outputs) and facts.state_write(op) is not None


def run(edit: Editor, options: Options) -> None:
    edit.commit()
    order = {op: i for i, op in enumerate(edit.fn.operations)}
    for update in [op for op in edit.fn.operations if _is_update(op)]:
        written = facts.state_write(update)
        assert written is not None
        _, value = written
        others = [r for r in edit.readers(value) if r is not update]
        if not others or all(_is_update(r) for r in others):
            continue
        new = update.outputs[0]
        for reader in others:
            if order[reader] < order[update]:
                continue
            for arg, given in list(reader.inputs.items()):
                if isinstance(given, tuple):
                    if any(v is value for v in given):
                        edit.set_input(reader, arg, tuple(new if v is value else v for v in given))
                elif given is value:
                    edit.set_input(reader, arg, new)


PASS = GraphPass(
    "prefer_state_in_downstream",
    "optimize_state",
    "readers after a coreml_update_state read its output, not the value it wrote",
    run,
    needs=frozenset({"coreml_update_state"}),
)
