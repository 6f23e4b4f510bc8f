"""A convolution's constant parts, and the same convolution remade with new ones: what the
passes that fold an operation into a conv (bias, scale) share."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.passes.edit import Editor
from app.passes.patterns import wide


def bias_of(conv: Operation) -> np.ndarray | None:
    """The conv's bias in float64 (zeros without one); None when it is not a plain const."""
    weight: Var = conv.var("weight")
    if "bias" not in conv.inputs:
        return np.zeros(weight.tensor.shape[0])
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
    """`conv` again, named `name` with output `out` and placed before `anchor`, with a new weight
    and/or bias (each stored in the weight's dtype, rounded once)."""
    w: Var = conv.var("weight")
    dtype = w.tensor.dtype
    args = dict(conv.inputs)
    if weight is not None:
        args["weight"] = edit.const(f"{name}_weight", weight, dtype, anchor)
    if bias is not None:
        args["bias"] = edit.const(f"{name}_bias", bias, dtype, anchor)
    return edit.op("conv", name, args, anchor, out=[out])
