"""fuse_prelu: relu(x) + a·relu(-x) (the seed's pattern 1: -x as mul(x, -1); a one constant per
channel, shaped (C, 1, 1) or (1, C, 1, 1)) is prelu(x, alpha = -a): for x < 0 it is -a·x.
x of rank 3 to 5, channels on axis 1 (prelu's own form). The add's and the muls' operands may
come in either order; every intermediate must be read by the pattern alone.

The seed's pattern 2: x the output of a transpose read by the pattern alone (NCHW to NHWC, or
any perm that moves axis 1), a one constant per channel along the axis the channels moved to
(shaped (C,), (1, 1, C), ...): prelu on the transpose's input, then the transpose.
(relu and a one-number scale commute with a transpose: the channel axis is only renamed.)"""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import fits, numeric, per_channel, stored, wide
from app.passes.products import Taken


def _negative_branch(match: Taken, var: Var, add: Operation) -> tuple[Var, Var] | None:
    """For var = a · relu(-1 · x): (x, a)."""
    scale = match.take(var, "mul", add)
    if scale is None:
        return None
    for r, a in ((scale.var("x"), scale.var("y")), (scale.var("y"), scale.var("x"))):
        trial = Taken(match.edit, match.ops)
        relu = trial.take(r, "relu", scale)
        x = None if relu is None else trial.other(trial.take(relu.var("x"), "mul", relu), -1.0)
        if x is not None and numeric(a):
            match.ops = trial.ops
            return x, a
    return None


def _channels_last(edit: Editor, x: Var, a: Var, pattern: list[Operation]):
    """For x = transpose(src) read by the pattern alone, moving axis 1 to axis k, and `a` one
    number per channel along k: (src, alpha, the transpose)."""
    moved = x.op
    if moved is None or moved.type != "transpose" or edit.is_output(x):
        return None
    if {id(r) for r in edit.readers(x)} != {id(o) for o in pattern}:
        return None
    src: Var = moved.var("x")
    perm = [int(p) % src.tensor.rank for p in np.asarray(stored(moved.var("perm"))).reshape(-1)]
    slope = wide(a)
    alpha = None if slope is None else per_channel(slope, x.tensor.shape, perm.index(1))
    return None if alpha is None else (src, alpha, moved)


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("add"):
        out: Var = op.outputs[0]
        for positive, negative in (
            (op.var("x"), op.var("y")),
            (op.var("y"), op.var("x")),
        ):
            match = Taken(edit)
            relu = match.take(positive, "relu", op)
            found = None if relu is None else _negative_branch(match, negative, op)
            if relu is None or found is None or found[0] is not relu.var("x"):
                continue
            x, a = found
            if x.type != out.type or x.tensor.rank not in (3, 4, 5):
                continue
            slope = wide(a)
            alpha = None if slope is None else per_channel(slope, x.tensor.shape, 1)
            moved = None
            if alpha is None:
                readers = [
                    relu,
                    *(o for o in match.ops if o.inputs.get("x") is x or o.inputs.get("y") is x),
                ]
                found_last = _channels_last(edit, x, a, readers)
                if found_last is not None:
                    x, alpha, moved = found_last
            if alpha is None or not fits(-alpha, a) or x.tensor.rank not in (3, 4, 5):
                continue
            value = edit.const(f"{op.name}_alpha", -alpha, a.tensor.dtype, op)
            if moved is None:
                new = edit.op("prelu", op.name, {"x": x, "alpha": value}, op, out=[out.name])
            else:
                inner = edit.op(
                    "prelu", edit.fresh(f"{op.name}_prelu"), {"x": x, "alpha": value}, op
                )
                new = edit.op(
                    "transpose",
                    op.name,
                    {**moved.inputs, "x": inner.outputs[0]},
                    op,
                    out=[out.name],
                )
            edit.replace(out, new.outputs[0])
            edit.drop(op, *match.ops, *([moved] if moved is not None else []))
            break


PASS = GraphPass(
    "fuse_prelu",
    "optimize_activation",
    "relu(x) + a·relu(-x), a per channel, becomes prelu(x, alpha=-a)",
    run,
    needs=frozenset({"relu"}),
)
