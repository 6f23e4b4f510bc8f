"""remove_redundant_ops: an op of the same type as an earlier one, reading the same values (the
same var, or a const of the same dtype, shape and bytes) for the same arguments, computes the
same thing: its readers read the earlier op's outputs instead. Ops with an effect (states) are
never merged; consts and constexpr ops are const_deduplication's."""

from __future__ import annotations

from collections.abc import Callable

from app.mil.ir import Operation, Var
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import const_op, value_key


def _key(var: Var, keys: dict[int, tuple]) -> tuple:
    if const_op(var) is None:
        return ("var", id(var))
    if id(var) not in keys:
        keys[id(var)] = value_key(var)
    return keys[id(var)]


def _shallow(var: Var, keys: dict[int, tuple]) -> tuple:
    """What `_key` says without reading a const's bytes: equal keys have equal shallow keys."""
    if const_op(var) is None:
        return ("var", id(var))
    return ("const", var.tensor.dtype, var.tensor.shape)


def _signature(op: Operation, key: Callable[[Var, dict[int, tuple]], tuple], keys: dict) -> tuple:
    return (
        op.type,
        *sorted(
            (
                arg,
                tuple(key(v, keys) for v in value)
                if isinstance(value, tuple)
                else key(value, keys),
            )
            for arg, value in op.inputs.items()
        ),
    )


def run(edit: Editor, options: Options) -> None:
    # A const's bytes are hashed only for ops that agree on everything else (the same type,
    # the same vars, consts of the same dtypes and shapes) with an earlier one: most ops have
    # no such twin, and hashing every weight each time the pass runs would cost more than the
    # rest of it.
    keys: dict[int, tuple] = {}
    lone: dict[tuple, Operation | None] = {}  # shallow signature -> its one op, until a second
    first: dict[tuple, list[Var]] = {}  # signature -> the outputs of its first op
    for op in edit.ops():
        if op.type == "const" or facts.is_constexpr(op.type) or facts.is_stateful(op.type):
            continue
        shallow = _signature(op, _shallow, keys)
        if shallow not in lone:
            lone[shallow] = op
            continue
        earlier = lone[shallow]
        if earlier is not None:
            first.setdefault(_signature(earlier, _key, keys), earlier.outputs)
            lone[shallow] = None
        kept = first.setdefault(_signature(op, _key, keys), op.outputs)
        if kept is not op.outputs:
            edit.merge_into(op, kept)


PASS = GraphPass(
    "remove_redundant_ops",
    "cleanup",
    "keeps one of several ops of one type reading the same values",
    run,
)
