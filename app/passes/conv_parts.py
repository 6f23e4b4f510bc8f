"""A convolution's constant parts, and the same convolution with new ones: what the passes that
fold an operation into a conv (bias, scale, batch norm) share."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.passes.edit import Editor
from app.passes.patterns import const_op, wide


def out_channels(conv: Operation) -> int:
    return conv.outputs[0].tensor.shape[1]


def scale_out_channels(conv: Operation, weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The weight with output channel o multiplied by scale[o]: a conv's weight is
    [C_out, C_in/groups, ...]; a conv_transpose's [C_in, C_out/groups, ...], input channel i of
    group i // (C_in/groups) making that group's C_out/groups outputs."""
    if conv.type == "conv":
        return weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
    c_in, per_group = weight.shape[0], weight.shape[1]
    groups = len(scale) // per_group
    rows = np.arange(c_in) // (c_in // groups)  # the group of each input channel
    factors = scale.reshape(groups, per_group)[rows]  # [C_in, C_out/groups]
    return weight * factors.reshape(factors.shape + (1,) * (weight.ndim - 2))


def bias_of(conv: Operation) -> np.ndarray | None:
    """The conv's bias in float64 (zeros without one); None when it is not a plain const."""
    if "bias" not in conv.inputs:
        return np.zeros(out_channels(conv))
    return wide(conv.var("bias"))


def weight_of(conv: Operation) -> np.ndarray | None:
    """The conv's weight in float64, when it is a plain const (a compressed one is not folded
    into: that would undo its compression)."""
    return wide(conv.var("weight"))


def remade(
    edit: Editor,
    conv: Operation,
    anchor: Operation,
    name: str,
    out: str,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> Operation:
    """`conv` (or conv_transpose) again, named `name` with output `out` and placed before
    `anchor`, with a new weight and/or bias (each stored in the weight's dtype, rounded once)."""
    w: Var = conv.var("weight")
    dtype = w.tensor.dtype
    args = dict(conv.inputs)
    if weight is not None:
        args["weight"] = edit.const(f"{name}_weight", weight, dtype, anchor)
    if bias is not None:
        args["bias"] = edit.const(f"{name}_bias", bias, dtype, anchor)
    return edit.op(conv.type, name, args, anchor, out=[out])


def fold_into(
    edit: Editor,
    conv: Operation,
    op: Operation,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> None:
    """`op`, the one reader of the conv's output and of its type, folded into `conv`: the conv
    takes a new weight and/or bias (each stored in the weight's dtype, rounded once), op's
    place, name and output, and op goes (with the consts only it, or the conv's old weight and
    bias, read). The conv is renewed, not remade (its output's type stays): reported as the
    conv replaced, as `remade` would be, at the cost of an edit."""
    dtype = conv.var("weight").tensor.dtype
    replaced = []
    for arg, value in (("weight", weight), ("bias", bias)):
        if value is None:
            continue
        old = conv.inputs.get(arg)
        name = f"{op.name}_{arg}"
        if isinstance(old, Var):
            new = edit.const_for(old, conv, name, value, dtype, op)
        else:
            new = edit.const(name, value, dtype, op)
        if new is not old:
            replaced.append(old)
            edit.set_input(conv, arg, new)
    y, out = conv.outputs[0], op.outputs[0]
    edit.remove(op)  # its names are free for the conv
    edit.renew(conv, name=op.name)
    edit.rename(y, out.name)
    edit.replace(out, y)
    edit.move(conv, op)
    edit.remove_if_unused(
        *(v.op for v in (*replaced, *op.inputs.values()) if isinstance(v, Var) and const_op(v))
    )
