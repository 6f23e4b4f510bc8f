"""matmul_to_conv (beyond the seed): a product by a constant weight over the channels of a
(B, C, 1, S) tensor, written in the token-major layout between two transposes, is a 1×1
convolution in the (B, C, 1, S) layout:

    transpose(x, p) -> matmul(·, W [C_in, C_out]) [-> add or sub b along the last axis]
        -> transpose(·, p⁻¹)          becomes          conv(x, Wᵀ [C_out, C_in, 1, 1], b)

p moves the channels (axis 1) last and the second transpose puts every axis back. The ANE is a
convolution engine: Apple's ml-ane-transformers writes every linear as a 1×1 conv in (B, C, 1,
S), and maderix measures a 1×1 conv faster than the same matmul (M4); both in
../shared/research/ane-anchors-2026-11.md. The two transposes go with it. A matmul whose
intermediate is read elsewhere, whose weight is not a plain const, or whose transposes do not
undo each other is left. A rank-3 (B, C, S) x (the channels moved last by the perm (0, 2, 1))
computes the same way between an expand_dims to (B, C, 1, S) and a squeeze back: reshapes,
which move no data."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.linear_parts import bias_after
from app.passes.patterns import fits, stored, wide


def _perm(op: Operation) -> list[int] | None:
    value = stored(op.var("perm"))
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def _flag(op: Operation, arg: str) -> bool:
    return arg in op.inputs and bool(stored(op.var(arg)))


def _axis2(edit: Editor, before: Operation) -> Var:
    return edit.const(f"{before.name}_axes", np.array([2], np.int32), DType.INT32, before)


def run(edit: Editor, options: Options) -> None:
    for mm in edit.ops("matmul"):
        moved: Var = mm.var("x")
        first = moved.op
        if first is None or first.type != "transpose" or edit.sole_reader(moved) is not mm:
            continue
        x: Var = first.var("x")
        p = _perm(first)
        weight = wide(mm.var("y"))
        rank = x.tensor.rank
        if p is None or rank not in (3, 4) or p[-1] != 1 or weight is None or weight.ndim != 2:
            continue
        if _flag(mm, "transpose_x"):
            continue
        weight = weight if _flag(mm, "transpose_y") else weight.T  # [C_out, C_in]
        product: Var = mm.outputs[0]
        bias = bias_after(edit, product)
        last = bias.op.outputs[0] if bias is not None else product
        back = edit.sole_reader(last)
        if back is None or back.type != "transpose":
            continue
        q = _perm(back)
        if q is None or [p[i] for i in q] != list(range(rank)):
            continue
        if bias is not None:
            weight = weight * bias.sign
        b = bias.value if bias is not None else None
        w: Var = mm.var("y")
        if not fits(weight, w) or not fits(b, w):
            continue
        out = back.outputs[0]
        dtype = w.tensor.dtype
        if rank == 3:  # (B, C, S) computes as (B, C, 1, S): a reshape each side, free
            x = edit.op(
                "expand_dims",
                edit.fresh(f"{back.name}_bc1s"),
                {"x": x, "axes": _axis2(edit, back)},
                back,
            ).outputs[0]
        args = {
            "x": x,
            "weight": edit.const(f"{back.name}_weight", weight[:, :, None, None], dtype, back),
        }
        if b is not None:
            args["bias"] = edit.const(f"{back.name}_bias", b, dtype, back)
        # (B, C_out, H, W): p moved the channels last and the transpose back undoes p
        if rank == 4:
            conv = edit.op("conv", back.name, args, back, out=[out.name])
        else:
            inner = edit.op("conv", edit.fresh(f"{back.name}_conv"), args, back)
            conv = edit.op(
                "squeeze",
                back.name,
                {"x": inner.outputs[0], "axes": _axis2(edit, back)},
                back,
                out=[out.name],
            )
        edit.replace(out, conv.outputs[0])
        edit.drop(back, *([bias.op] if bias is not None else []), mm, first)


PASS = GraphPass(
    "matmul_to_conv",
    "ane",
    "transpose -> matmul by a constant weight [-> bias] -> transpose back becomes a 1×1 conv in "
    "(B, C, 1, S)",
    run,
    creates=frozenset({"conv"}),
    needs=frozenset({"matmul"}),
)
