"""What the two GELU fusions share: the matched product replaced by one gelu of the mode each
fuses to (fuse_gelu_exact, fuse_gelu_tanh_approximation)."""

from __future__ import annotations

from collections.abc import Callable

from app.mil.ir import Operation, Var
from app.passes.edit import Editor

Match = Callable[[Editor, Operation], "tuple[Var, list[Operation]] | None"]


def fuse_to_gelu(edit: Editor, match: Match, mode: str) -> None:
    """Each mul that `match` finds the end of a GELU spelt out (x and the ops to drop) becomes
    gelu(x, mode), keeping the mul's output name, where x has the output's type."""
    for op in edit.ops("mul"):
        if edit.removed(op):
            continue
        found = match(edit, op)
        out = op.outputs[0]
        if found is None or found[0].type != out.type:
            continue
        x, ops = found
        mode_const = edit.const(f"{op.name}_mode", mode, out.tensor.dtype, op)
        new = edit.op("gelu", op.name, {"x": x, "mode": mode_const}, op, out=[out.name])
        edit.replace(out, new.outputs[0])
        edit.drop(*ops)
