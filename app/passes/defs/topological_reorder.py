"""topological_reorder: each cast and transpose moves to just before the first op that reads it
(or to the end, when only the function's outputs read it), so that a value converted for a late
reader is not held from where it was made. The other ops keep their order. Walking the ops from
last to first, a moved op's readers have found their places before it does. (This is the order
coremltools gives; its example in the seed is the test.)

Consts stay with the op they belong to: "just before a reader" is before the consts written
just before it that it reads, and a moved op takes along the consts written just before it that
only it reads (its dtype, its perm)."""

from __future__ import annotations

import itertools

from app.mil.ir import Operation
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options

_MOVED = ("cast", "transpose")


def _own_consts(edit: Editor, ops: list[Operation], index: int) -> list[Operation]:
    """The consts written just before ops[index] that it reads (and, `only`, nothing else)."""
    op, own = ops[index], []
    reads = {id(v) for v in op.inputs.values() if not isinstance(v, tuple)}
    i = index - 1
    while i >= 0 and ops[i].type == "const" and id(ops[i].outputs[0]) in reads:
        own.append(ops[i])
        i -= 1
    return own[::-1]


def run(edit: Editor, options: Options) -> None:
    edit.commit()
    ops = edit.fn.operations
    index = {op: i for i, op in enumerate(ops)}
    # An op's place is a tuple compared as a sequence: an op left where it is has (i, 0); one
    # moved before an op placed at (..., p) gets (..., p - 1, n, 0), n counting the moves, so
    # later moves to the same reader land after earlier ones and before the reader itself.
    place: dict[Operation, tuple] = {op: (i, 0) for i, op in enumerate(ops)}
    end = (len(ops), 0)
    moves = itertools.count(1)

    def before(anchor: tuple) -> tuple:
        return (*anchor[:-1], anchor[-1] - 1, next(moves), 0)

    for op in reversed(ops):
        if op.type not in _MOVED:
            continue
        readers = [r for v in op.outputs for r in edit.readers(v)]
        anchor = min((place[r] for r in readers), default=end)
        first = min(readers, key=place.__getitem__) if readers else None
        if first is not None and (consts := _own_consts(edit, ops, index[first])):
            anchor = min(anchor, *(place[c] for c in consts))
        own = [c for c in _own_consts(edit, ops, index[op]) if edit.readers(c.outputs[0]) == [op]]
        for const in own:
            place[const] = before(anchor)
        place[op] = before(anchor)
    order = sorted(ops, key=place.__getitem__)
    if order != ops:
        edit.fn.operations = order
        edit.changed = True


PASS = GraphPass(
    "topological_reorder",
    "cleanup",
    "moves casts and transposes to just before their first reader",
    run,
    needs=frozenset({"cast", "transpose"}),
)
