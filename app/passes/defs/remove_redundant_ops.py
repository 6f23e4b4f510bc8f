"""remove_redundant_ops: an op of the same type as an earlier one, reading the same values (the
same var, or a const of the same dtype, shape and bytes) for the same arguments, computes the
same thing: its readers read the earlier op's outputs instead. Ops with an effect (states) are
never merged; consts and constexpr ops are const_deduplication's."""

from __future__ import annotations

from app.mil.ir import Input, Operation, Var
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import const_op, same_value, value_key


def _key(var: Var, keys: dict[int, tuple]) -> tuple:
    if const_op(var) is None:
        return ("var", id(var))
    if id(var) not in keys:
        keys[id(var)] = value_key(var)
    return keys[id(var)]


def _signature(op: Operation, keys: dict[int, tuple]) -> tuple:
    return (
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


def _first_var(op: Operation) -> Var | None:
    """The first value `op` reads that is not a const."""
    for value in op.inputs.values():
        for v in value if isinstance(value, tuple) else (value,):
            if const_op(v) is None:
                return v
    return None


def _same(a: Operation, b: Operation) -> bool:
    """Whether two ops of one type read the same values: the same vars, consts alike (compared,
    not hashed)."""
    if a.inputs.keys() != b.inputs.keys():
        return False
    for arg, x in a.inputs.items():
        y = b.inputs[arg]
        if isinstance(x, tuple) != isinstance(y, tuple):
            return False
        xs, ys = _vars(x), _vars(y)
        if len(xs) != len(ys):
            return False
        for u, v in zip(xs, ys, strict=True):
            if u is not v and (const_op(u) is None or const_op(v) is None or not same_value(u, v)):
                return False
    return True


def _vars(value: Input) -> tuple[Var, ...]:
    return value if isinstance(value, tuple) else (value,)


def run(edit: Editor, options: Options) -> None:
    # An earlier op computing the same reads the same values, so it reads this op's first value
    # that is not a const: only those readers of it are compared (most values have one reader).
    # Ops reading consts alone are compared by their signatures.
    keys: dict[int, tuple] = {}
    place: dict[Operation, int] = {}  # the ops seen, in order
    first: dict[tuple, list[Var]] = {}  # signature -> the first outputs (ops of consts alone)
    for op in edit.ops():
        if op.type == "const" or facts.is_constexpr(op.type) or facts.is_stateful(op.type):
            continue
        var = _first_var(op)
        if var is None:
            kept = first.setdefault(_signature(op, keys), op.outputs)
            if kept is not op.outputs:
                edit.merge_into(op, kept)
            continue
        twins = [r for r in edit.readers(var) if r.type == op.type and r in place]
        same = [t for t in twins if _same(t, op)]
        if same and edit.merge_into(op, min(same, key=place.__getitem__).outputs):
            continue
        place[op] = len(place)


PASS = GraphPass(
    "remove_redundant_ops",
    "cleanup",
    "keeps one of several ops of one type reading the same values",
    run,
)
