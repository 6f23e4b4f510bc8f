"""merge_consecutive_paddings: a pad of a pad is one pad when both have the same mode and either
both are constant pads of the same value (the amounts add up; of different values, the outer
one fills the corners, which one pad cannot write) or, reflect or replicate, they pad different
axes (a pad along one axis and then another is the pad along both). The inner pad must be read
by the outer alone."""

from __future__ import annotations

from app.mil.ir import Var
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.pad_parts import amounts, pad_of, padded_axes


def run(edit: Editor, options: Options) -> None:
    edit.repeat(_sweep)  # three pads in a row merge two at a time


def _sweep(edit: Editor) -> bool:
    merged = False
    for outer in edit.ops("pad"):
        inner_out: Var = outer.var("x")
        inner = inner_out.op
        if inner is None or inner.type != "pad" or edit.sole_reader(inner_out) is not outer:
            continue
        a, b = pad_of(inner), pad_of(outer)
        if a is None or b is None or a.mode != b.mode:
            continue
        if a.mode == "constant":
            if a.value is None or a.value != b.value:
                continue  # the outer pad's value fills the corners: one pad cannot write two
        elif padded_axes(a.pairs) & padded_axes(b.pairs):
            continue
        pairs = tuple((p[0] + q[0], p[1] + q[1]) for p, q in zip(a.pairs, b.pairs, strict=True))
        args = dict(outer.inputs)
        args["x"] = inner.var("x")
        args["pad"] = edit.const(f"{outer.name}_pad", amounts(pairs), DType.INT32, outer)
        out = outer.outputs[0]
        new = edit.op("pad", outer.name, args, outer, out=[out.name])
        edit.replace(out, new.outputs[0])
        edit.drop(outer, inner)
        merged = True
    return merged


PASS = GraphPass(
    "merge_consecutive_paddings",
    "optimize_repeat_ops",
    "pad(pad(x)) of one mode becomes one pad",
    run,
    needs=frozenset({"pad"}),
)
