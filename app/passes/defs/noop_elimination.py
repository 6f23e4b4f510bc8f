"""noop_elimination: ops that hand on their input unchanged go, their readers reading the input.

Which ops do is read from their meanings (the op records), never from a list of names:
- an elementwise binary op one of whose operands is a constant of one number (every element
  equal) that leaves each probe value below as it is: add or sub 0, mul or real_div 1, maximum
  -inf, minimum +inf; when broadcasting leaves the other operand's shape as it is;
- a data-movement op or a reduction whose one tensor input has the output's type and whose
  meaning hands back a tensor of distinct values as it was: reshapes, tiles, slices, splits and
  concats that take everything, transposes that move nothing, reductions over axes of one
  element (keep_dims).
"""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import const_op, stored, uniform

# fp16's extremes, its smallest subnormal, zero, and ordinary numbers each side of 1: an operand
# c of add, sub, mul, real_div, maximum or minimum (and pow) leaves all of them as they are only
# when it is the op's identity (0 misses add/sub c≠0, 1 mul/real_div c≠1, 2 pow c≠1, ±inf
# maximum/minimum c≠∓inf), computed exactly in float64.
_PROBES = np.array([-np.inf, -65504, -1.5, -(2.0**-24), 0, 2.0**-24, 0.75, 1, 2, 65504, np.inf])


# What `_keeps` and `_moves_nothing` found, by what it follows from (the op's type and
# arguments, which of them is kept, the number or the small consts): a program asks the same question of many ops (a scale by the same
# constant, layer after layer), and a service asks it of every program it builds.
_KEPT: dict[tuple, bool] = {}


def _keeps(op: Operation, kept: Var, other: Var) -> bool:
    """Whether the binary op hands on `kept` whatever it is, `other` being a const."""
    number = uniform(other)
    if number is None or kept is other or kept.type != op.outputs[0].type:
        return False
    args = tuple(sorted((arg, value is kept) for arg, value in op.inputs.items()))
    key = (op.type, args, number.dtype.str, number.tobytes())
    if (known := _KEPT.get(key)) is not None:
        return known
    with np.errstate(all="ignore"):
        (result,) = facts.meaning(op, {kept.name: _PROBES, other.name: number})
    keeps = result.shape == _PROBES.shape and bool(np.array_equal(result, _PROBES))
    _remember(key, keeps)
    return keeps


_SMALL = 64  # const arguments up to this many elements key what `_moves_nothing` remembers


def _moves_nothing(op: Operation) -> Var | None:
    """The one tensor input a data-movement op or a reduction hands on as it is, if it does."""
    read = [v for value in op.inputs.values() for v in _vars(value)]
    tensors = [v for v in read if const_op(v) is None]
    if len(tensors) != 1 or tensors[0].type != op.outputs[0].type:
        return None
    (x,) = tensors
    values: dict[str, np.ndarray | str] = {}
    for v in read:
        if v is not x and (value := stored(v)) is not None:  # every one but x is a const
            values[v.name] = value
    # what it follows from: the op's type, x's type, where x is read and the other arguments
    key = None
    if all(isinstance(c, str) or c.size <= _SMALL for c in values.values()):
        key = (
            op.type,
            x.type,
            tuple(
                (arg, isinstance(value, tuple), tuple(_const_key(v, x) for v in _vars(value)))
                for arg, value in sorted(op.inputs.items())
            ),
        )
        if (known := _KEPT.get(key)) is not None:
            return x if known else None
    size = x.tensor.size
    values[x.name] = (np.arange(size, dtype=np.float64) - size + 0.5).reshape(x.tensor.shape)
    (result,) = facts.meaning(op, values)
    keeps = bool(np.array_equal(result, values[x.name]))
    if key is not None:
        _remember(key, keeps)
    return x if keeps else None


def _const_key(v: Var, x: Var) -> tuple:
    if v is x:
        return ("x",)
    value = stored(v)
    if isinstance(value, str):
        return ("str", value)
    array = np.asarray(value)
    return (array.dtype.str, array.shape, array.tobytes())


def _remember(key: tuple, keeps: bool) -> None:
    if len(_KEPT) > 4096:
        _KEPT.clear()
    _KEPT[key] = keeps


def _vars(value) -> tuple[Var, ...]:
    return value if isinstance(value, tuple) else (value,)


def _passed_on(op: Operation) -> Var | None:
    """The input `op` hands on unchanged, if it does."""
    if facts.is_binary(op.type):
        x, y = op.var("x"), op.var("y")
        for kept, other in ((x, y), (y, x)):
            if _keeps(op, kept, other):
                return kept
        return None
    if (facts.moves_data(op.type) or facts.is_reduction(op.type)) and facts.has_meaning(op.type):
        return _moves_nothing(op)
    return None


def run(edit: Editor, options: Options) -> None:
    kinds = facts.kinds()
    candidates = kinds.binary | ((kinds.moves_data | kinds.reductions) & kinds.foldable)
    for op in edit.ops_among(candidates):
        if len(op.outputs) != 1:
            continue
        kept = _passed_on(op)
        if kept is not None:
            edit.merge_into(op, [kept])


PASS = GraphPass(
    "noop_elimination",
    "cleanup",
    "removes ops that hand on their input unchanged (add 0, mul 1, identity reshapes, ...)",
    run,
)
