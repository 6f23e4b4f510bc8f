"""const_deduplication: a const holding the same values (dtype, shape, bytes) as an earlier one
is replaced by it, as is a constexpr op of the same type reading the same inputs. Small consts
(under `const_threshold` elements: op arguments such as axes) stay as they are, as in
coremltools, where they are written inline anyway."""

from __future__ import annotations

from app.mil.ir import Input, Operation, Var
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import AtLeast, GraphPass, Option, Options
from app.passes.patterns import const_op, same_value, value_hint, value_key


def _input_key(value: Input) -> tuple:
    if isinstance(value, tuple):
        return tuple(_input_key(v) for v in value)
    return value_key(value) if const_op(value) is not None else ("var", id(value))


def run(edit: Editor, options: Options) -> None:
    threshold = options["const_threshold"]
    first: dict[tuple, list[Var]] = {}
    # consts by a cheap hint of their value (dtype, shape, a few bytes), each compared with those
    # of its hint in full: a program's weights are hashed never, compared only when alike
    alike: dict[tuple, list[Operation]] = {}
    for op in edit.ops_among(facts.kinds().constexpr | {"const"}):
        if op.type == "const":
            if op.value is None or op.value.type.size < threshold:
                continue
            hint = alike.setdefault(value_hint(op.output), [])
            same = next((e for e in hint if same_value(e.output, op.output)), None)
            if same is None or not edit.merge_into(op, same.outputs):
                hint.append(op)
            continue
        elif facts.is_constexpr(op.type):
            key = (op.type, *sorted((arg, _input_key(v)) for arg, v in op.inputs.items()))
        else:
            continue
        kept = first.setdefault(key, op.outputs)
        if kept is not op.outputs:
            edit.merge_into(op, kept)


PASS = GraphPass(
    "const_deduplication",
    "cleanup",
    "keeps one const of each value, and one constexpr op of each type and inputs",
    run,
    {
        "const_threshold": Option(
            100, AtLeast(0), "consts with fewer elements than this are left as they are"
        )
    },
)
