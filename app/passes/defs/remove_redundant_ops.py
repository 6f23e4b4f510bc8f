"""remove_redundant_ops: an op of the same type as an earlier one, reading the same values (the
same var, or a const of the same dtype, shape and bytes) for the same arguments, computes the
same thing: its readers read the earlier op's outputs instead. Ops with an effect (states) are
never merged; consts and constexpr ops are const_deduplication's."""

from __future__ import annotations

from app.mil.ir import Var
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


def run(edit: Editor, options: Options) -> None:
    keys: dict[int, tuple] = {}
    first: dict[tuple, list[Var]] = {}
    for op in edit.ops():
        if op.type == "const" or facts.is_constexpr(op.type) or facts.is_stateful(op.type):
            continue
        signature = (
            op.type,
            *sorted(
                (
                    arg,
                    tuple(_key(v, keys) for v in value)
                    if isinstance(value, tuple)
                    else _key(value, keys),
                )
                for arg, value in op.inputs.items()
            ),
        )
        kept = first.setdefault(signature, op.outputs)
        if kept is not op.outputs:
            edit.merge_into(op, kept)


PASS = GraphPass(
    "remove_redundant_ops",
    "cleanup",
    "keeps one of several ops of one type reading the same values",
    run,
)
