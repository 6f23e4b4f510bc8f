"""A constant added to or subtracted from a product along its last axis, as a linear's bias:
what fuse_matmul_weight_bias and fuse_linear_bias share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.mil.ir import Operation, Var
from app.passes.edit import Editor
from app.passes.patterns import operands, per_channel, wide


@dataclass(frozen=True)
class Bias:
    """out = sign · product + value, made by `op` (the add or sub reading the product alone)."""

    op: Operation
    value: np.ndarray  # one number per output feature (the product's last axis)
    sign: float


def bias_after(edit: Editor, product: Var) -> Bias | None:
    op = edit.sole_reader(product)
    if op is None or op.type not in ("add", "sub") or op.outputs[0].type != product.type:
        return None
    other = operands(op, product)
    value = None if other is None else wide(other)
    shape = product.tensor.shape
    vector = None if value is None or not shape else per_channel(value, shape, len(shape) - 1)
    if vector is None:
        return None
    if op.type == "add":
        return Bias(op, vector, 1.0)
    if op.var("x") is product:  # product - c
        return Bias(op, -vector, 1.0)
    return Bias(op, vector, -1.0)  # c - product


def linear(edit: Editor, x: Var, weight: np.ndarray, bias: np.ndarray, like: Var, at: Bias) -> None:
    """linear(x, weight, bias) in place of `at`'s op, its consts in `like`'s dtype."""
    op, out = at.op, at.op.outputs[0]
    dtype = like.tensor.dtype
    args = {
        "x": x,
        "weight": edit.const(f"{op.name}_weight", weight, dtype, op),
        "bias": edit.const(f"{op.name}_bias", bias, dtype, op),
    }
    new = edit.op("linear", op.name, args, op, out=[out.name])
    edit.replace(out, new.outputs[0])
