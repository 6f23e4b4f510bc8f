"""fuse_prelu: relu(x) + a·relu(-x) (the seed's pattern 1: -x as mul(x, -1); a one constant per
channel, shaped (C, 1, 1) or (1, C, 1, 1)) is prelu(x, alpha = -a): for x < 0 it is -a·x.
x of rank 3 to 5, channels on axis 1 (prelu's own form). The add's and the muls' operands may
come in either order; every intermediate must be read by the pattern alone.

The seed's pattern 2 (x transposed to channels-last first) is not taken: no graph or import
here puts a prelu's channels last."""

from __future__ import annotations

from app.mil.ir import Operation, Var
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import fits, per_channel, wide
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
        if x is not None and wide(a) is not None:
            match.ops = trial.ops
            return x, a
    return None


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
            if found is None or found[0] is not relu.var("x"):  # type: ignore[union-attr]
                continue
            x, a = found
            if x.type != out.type or x.tensor.rank not in (3, 4, 5):
                continue
            alpha = per_channel(wide(a), x.tensor.shape, 1)  # type: ignore[arg-type]
            if alpha is None or not fits(-alpha, a):
                continue
            value = edit.const(f"{op.name}_alpha", -alpha, a.tensor.dtype, op)
            new = edit.op("prelu", op.name, {"x": x, "alpha": value}, op, out=[out.name])
            edit.replace(out, new.outputs[0])
            edit.drop(op, *match.ops)
            break


PASS = GraphPass(
    "fuse_prelu",
    "optimize_activation",
    "relu(x) + a·relu(-x), a per channel, becomes prelu(x, alpha=-a)",
    run,
    needs=frozenset({"relu"}),
)
