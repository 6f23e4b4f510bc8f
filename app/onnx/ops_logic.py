"""Lowerings of ONNX's comparisons, logical ops, Where and the tests of float classes onto the
IR's comparisons and `select`.

And and Or are written as `select` (and: select(x, y, x); or: select(x, x, y)), exact and what
the records advise for the ANE, which rejects the logical ops (app/mil/ops/logic.py). IsNaN is
x ≠ x (only NaN is unequal to itself) and IsInf |x| > 65504 (fp16's largest finite value: every
larger fp16 value is infinite). ThresholdedRelu and Shrink are selects between their branches.
A constant branch of Where at float32's extremes (an attention mask's "minus infinity") is
stored as fp16's.
"""

from __future__ import annotations

import numpy as np

from app.mil import Var
from app.onnx.lowering import Handler, Lowering, Node, Value

_COMPARE = {
    "Equal": "equal",
    "Less": "less",
    "LessOrEqual": "less_equal",
    "Greater": "greater",
    "GreaterOrEqual": "greater_equal",
}
FP16_MAX = 65504.0


def _is_bool(value: Value | None) -> bool:
    if isinstance(value, Var):
        return value.tensor.dtype.value == "bool"
    return value is not None and value.dtype == np.bool_


def _operands(node: Node) -> tuple[Value, Value]:
    """The two operands, a constant one in the other's kind (a float constant against an int32
    value would not type)."""
    x, y = node.input(0), node.input(1)
    assert x is not None and y is not None
    if isinstance(x, np.ndarray) and isinstance(y, Var):
        x = _kind(x, y)
    elif isinstance(y, np.ndarray) and isinstance(x, Var):
        y = _kind(y, x)
    return x, y


def _kind(value: np.ndarray, of: Var) -> np.ndarray:
    dtype = of.tensor.dtype
    if dtype.is_int:
        return value.astype(np.int32)
    if dtype.is_float:
        return value.astype(np.float32)
    return value.astype(np.bool_)


def compare(ctx: Lowering, node: Node) -> list[Value]:
    x, y = _operands(node)
    if node.op_type == "Equal" and _is_bool(x):  # bools: equal is not xor
        return [ctx.op("logical_not", node.out[0], x=ctx.op("logical_xor", x=x, y=y))]
    return [ctx.op(_COMPARE[node.op_type], node.out[0], x=x, y=y)]


def logical(ctx: Lowering, node: Node) -> list[Value]:
    x, y = _operands(node)
    out = node.out[0]
    if node.op_type == "And":
        return [ctx.op("select", out, cond=x, a=y, b=x)]
    if node.op_type == "Or":
        return [ctx.op("select", out, cond=x, a=x, b=y)]
    return [ctx.op("logical_xor", out, x=x, y=y)]


def not_(ctx: Lowering, node: Node) -> list[Value]:
    return [ctx.op("logical_not", node.out[0], x=node.var(0))]


def _lowest(value: np.ndarray) -> np.ndarray:
    """float32's extremes (torch.finfo(float32).min, how exporters write an attention mask's
    "minus infinity") as fp16's: a softmax gives both weight 0. Other values are kept, and held
    to fp16's range when they become constants."""
    if value.dtype.kind != "f":
        return value
    extreme = np.abs(value.astype(np.float64)) >= 0.99 * float(np.finfo(np.float32).max)
    return np.where(extreme, np.sign(value) * FP16_MAX, value).astype(value.dtype)


def where(ctx: Lowering, node: Node) -> list[Value]:
    cond, a, b = node.input(0), node.input(1), node.input(2)
    assert cond is not None and a is not None and b is not None
    a, b = (_lowest(v) if isinstance(v, np.ndarray) else v for v in (a, b))
    var = a if isinstance(a, Var) else b if isinstance(b, Var) else None
    if var is not None:
        a = _kind(a, var) if isinstance(a, np.ndarray) else a
        b = _kind(b, var) if isinstance(b, np.ndarray) else b
    # neither is a Var here, so both are arrays
    elif a.dtype.kind == "f" or b.dtype.kind == "f":  # type: ignore[union-attr]
        a, b = a.astype(np.float32), b.astype(np.float32)  # type: ignore[union-attr]
    return [ctx.op("select", node.out[0], cond=cond, a=a, b=b)]


def isnan(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    return [ctx.op("not_equal", node.out[0], x=x, y=x)]


def isinf(ctx: Lowering, node: Node) -> list[Value]:
    x, out = node.var(0), node.out[0]
    positive, negative = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    if positive and negative:
        return [ctx.op("greater", out, x=ctx.op("abs", x=x), y=np.array(FP16_MAX, np.float32))]
    if positive:
        return [ctx.op("greater", out, x=x, y=np.array(FP16_MAX, np.float32))]
    if negative:
        return [ctx.op("less", out, x=x, y=np.array(-FP16_MAX, np.float32))]
    return [ctx.op("greater", out, x=x, y=x)]  # detecting neither: x > x, false everywhere


def thresholded_relu(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    above = ctx.op("greater", x=x, y=np.array(node.attr("alpha", 1.0), np.float32))
    return [ctx.op("select", node.out[0], cond=above, a=x, b=np.array(0.0, np.float32))]


def shrink(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    lambd, bias = float(node.attr("lambd", 0.5)), float(node.attr("bias", 0.0))
    above = ctx.op("greater", x=x, y=np.array(lambd, np.float32))
    below = ctx.op("less", x=x, y=np.array(-lambd, np.float32))
    if x.tensor.dtype.is_int:
        lowered, raised, zero = x, x, np.array(0, np.int32)
        if bias:
            lowered = ctx.op("sub", x=x, y=np.array(bias, np.int32))
            raised = ctx.op("add", x=x, y=np.array(bias, np.int32))
    else:
        lowered = ctx.op("sub", x=x, y=np.array(bias, np.float32)) if bias else x
        raised = ctx.op("add", x=x, y=np.array(bias, np.float32)) if bias else x
        zero = np.array(0.0, np.float32)
    inner = ctx.op("select", cond=above, a=lowered, b=zero)
    return [ctx.op("select", node.out[0], cond=below, a=raised, b=inner)]


HANDLERS: dict[str, Handler] = {
    **dict.fromkeys(_COMPARE, compare),
    **dict.fromkeys(("And", "Or", "Xor"), logical),
    "Not": not_,
    "Where": where,
    "IsNaN": isnan,
    "IsInf": isinf,
    "ThresholdedRelu": thresholded_relu,
    "Shrink": shrink,
}
