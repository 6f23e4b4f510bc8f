"""topological_reorder: each cast and transpose moves to just before the first op that reads it
(or to the end, when only the function's outputs read it), so that a value converted for a late
reader is not held from where it was made. The other ops keep their order; walking the ops from
last to first, a moved op's readers have found their places before it does. (This is the order
coremltools gives; its example in the seed is the test.)"""

from __future__ import annotations

import itertools

from app.mil.ir import Operation
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options

_MOVED = ("cast", "transpose")


def run(edit: Editor, options: Options) -> None:
    edit.commit()
    ops = edit.fn.operations
    # An op's place is a tuple compared as a sequence: an op left where it is has (i, 0); one
    # moved before an op placed at (..., p) gets (..., p - 1, n, 0), n counting the moves, so
    # later moves to the same reader land after earlier ones and before the reader itself.
    place: dict[Operation, tuple] = {op: (i, 0) for i, op in enumerate(ops)}
    end = (len(ops), 0)
    moves = itertools.count(1)
    for op in reversed(ops):
        if op.type not in _MOVED:
            continue
        readers = [r for v in op.outputs for r in edit.readers(v)]
        anchor = min((place[r] for r in readers), default=end)
        place[op] = (*anchor[:-1], anchor[-1] - 1, next(moves), 0)
    order = sorted(ops, key=place.__getitem__)
    if order != ops:
        edit.fn.operations = order
        edit.changed = True


PASS = GraphPass(
    "topological_reorder",
    "cleanup",
    "moves casts and transposes to just before their first reader",
    run,
)
