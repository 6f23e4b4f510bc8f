"""const_elimination: an op whose inputs are all constants is computed here, with its float64
meaning, and its output becomes a const stored in the output's dtype (rounded once).

An op that makes a function output is left computing it (an output that is a constant would be
a program that ignores its inputs there), as are ops with an effect (states) and constexpr ops
(decompressing them would undo the compression). A result that is not finite in its dtype is
left to the op as well: the op overflows at run time the same way, and a literal inf is not
written into a program.
"""

from __future__ import annotations

import numpy as np

from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Option, Options
from app.passes.patterns import const_op, stored, wide


def _skip_size(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError("a positive number of elements, or null for no limit")
    return float(value)


def run(edit: Editor, options: Options) -> None:
    limit = options["skip_const_by_size"]
    for op in edit.ops_among(facts.kinds().foldable):
        if op.type == "const" or not op.outputs:
            continue
        args = [v for value in op.inputs.values() for v in _vars(value)]
        if not all(const_op(v) is not None for v in args):
            continue
        if any(edit.is_output(v) for v in op.outputs):
            continue
        if limit is not None and any(v.tensor.size > limit for v in op.outputs):
            continue
        values = {v.name: _value(v) for v in args}
        results = [
            r.astype(v.tensor.dtype.numpy)
            for r, v in zip(facts.meaning(op, values), op.outputs, strict=True)
        ]
        if any(r.dtype.kind == "f" and not np.isfinite(r).all() for r in results):
            continue
        for out, result in zip(op.outputs, results, strict=True):
            if edit.used(out):
                const = edit.const(
                    out.name, result.reshape(out.tensor.shape), out.tensor.dtype, op, fresh=False
                )
                edit.replace(out, const)
        edit.drop(op)


def _vars(value):
    return value if isinstance(value, tuple) else (value,)


def _value(var):
    """Floats as given (folded from the values the request gave, rounded once when stored);
    integers, booleans and strings as held."""
    return wide(var) if var.tensor.dtype.is_float else stored(var)


PASS = GraphPass(
    "const_elimination",
    "cleanup",
    "computes ops whose inputs are all constants, keeping the result as a const",
    run,
    {
        "skip_const_by_size": Option(
            None, _skip_size, "leave ops with more output elements than this computing"
        )
    },
)
