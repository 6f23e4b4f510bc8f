"""Lowerings of ONNX's elementwise ops and activations onto the IR's primitives.

Each handler takes the lowering and the node and returns the node's output values; its last op is
named `node.out[i]`, the name the program gives that output. Identities used (exact in real
arithmetic, so the program's meaning is the op's): leaky_relu(x) = max(x, αx) for 0 ≤ α ≤ 1;
prelu(x) = relu(x) + s·min(x, 0); hard_sigmoid(x) = min(max(αx + β, 0), 1); min over axes =
−max(−x); softsign(x) = x / (1 + |x|); tan(x) = sin(x) / cos(x); selu(x) = γ·elu(x, α);
celu(x, α) = α·elu(x/α, 1); mish(x) = x·tanh(softplus(x)); log_softmax(x) = d − log Σ exp(d) with
d = x − max(x); mod(x, y) = x − ⌊x/y⌋·y (the divisor's sign) and fmod(x, y) = sign(x)·mod(|x|, |y|)
(the dividend's: truncated division).
"""

from __future__ import annotations

import numpy as np

from app.errors import RequestError
from app.mil import Var
from app.onnx.lowering import Handler, Lowering, Node, Unlowered, Value

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "real_div"}
_UNARY = {
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Exp": "exp",
    "Sqrt": "sqrt",
    "Abs": "abs",
    "Erf": "erf",
    "Log": "log",
    "Floor": "floor",
    "Ceil": "ceil",
    "Round": "round",
    "Sign": "sign",
    "Sin": "sin",
    "Cos": "cos",
    "Atan": "atan",
    "Asin": "asin",
    "Acos": "acos",
    "Softplus": "softplus",
}


def binary(ctx: Lowering, node: Node) -> list[Value]:
    x, y = node.input(0), node.input(1)
    if node.op_type == "Div" and _is_int(x) and _is_int(y):
        raise RequestError(
            node.field, f"Div node {node.label!r}: integer division of program values"
        )
    return [ctx.op(_BINARY[node.op_type], node.out[0], x=x, y=y)]


def _is_int(value: Value | None) -> bool:
    if isinstance(value, Var):
        return value.tensor.dtype.is_int
    return value is not None and value.dtype.kind in "iu"


def unary(ctx: Lowering, node: Node) -> list[Value]:
    return [ctx.op(_UNARY[node.op_type], node.out[0], x=node.var(0))]


def _scalar(x: Var, value: float) -> np.ndarray:
    """A scalar constant of x's kind (float or int)."""
    return np.array(value, np.int32 if x.tensor.dtype.is_int else np.float32)


def neg(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    return [ctx.op("mul", node.out[0], x=x, y=_scalar(x, -1))]


def reciprocal(ctx: Lowering, node: Node) -> list[Value]:
    return [ctx.op("real_div", node.out[0], x=np.array(1.0, np.float32), y=node.var(0))]


def variadic(ctx: Lowering, node: Node) -> list[Value]:
    """Max, Min, Sum, Mean of any number of inputs: pairwise."""
    op = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[node.op_type]
    values = [v for v in node.inputs if v is not None]
    if len(values) == 1 and node.op_type != "Mean":
        return [values[0]]
    acc = values[0]
    last = len(values) - 1 if node.op_type != "Mean" else len(values)
    for i, value in enumerate(values[1:], start=1):
        acc = ctx.op(op, node.out[0] if i == last else None, x=acc, y=value)
    if node.op_type == "Mean":
        acc = ctx.op("mul", node.out[0], x=acc, y=np.array(1.0 / len(values), np.float32))
    return [acc]


def pow_(ctx: Lowering, node: Node) -> list[Value]:
    """A constant exponent of 2, 3, 0.5, -0.5, -1 or 1 as the cheaper op it is; any other, or one
    computed from the data, as `pow`; a constant base (2 ** x) as `pow` of that constant."""
    base = node.given(0)
    out = node.out[0]
    if isinstance(base, np.ndarray):
        exponent_var = node.var(1)
        if (base.dtype.kind == "f") != exponent_var.tensor.dtype.is_float:
            raise Unlowered("Pow of a constant base to an exponent of another type")
        return [ctx.op("pow", out, x=_like(exponent_var, base), y=exponent_var)]
    x = base
    exponent = node.input(1)
    if not isinstance(exponent, np.ndarray) or exponent.size != 1:
        return [ctx.op("pow", out, x=x, y=_like(x, exponent))]
    e = float(exponent.reshape(-1)[0])
    if e == 1:
        return [x]
    if e == 2:
        return [ctx.op("square", out, x=x)]
    if e == 3:
        return [ctx.op("mul", out, x=ctx.op("square", x=x), y=x)]
    if e == 0.5:
        return [ctx.op("sqrt", out, x=x)]
    if e == -0.5:
        return [ctx.op("rsqrt", out, x=x)]
    if e == -1:
        return [ctx.op("real_div", out, x=np.array(1.0, np.float32), y=x)]
    return [ctx.op("pow", out, x=x, y=_like(x, exponent))]


def _like(x: Var, value: Value | None) -> Value:
    """A constant operand in x's kind (an integer exponent of a float base is a float)."""
    if isinstance(value, np.ndarray):
        return value.astype(np.int32 if x.tensor.dtype.is_int else np.float32)
    assert value is not None
    return value


def tan(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    return [ctx.op("real_div", node.out[0], x=ctx.op("sin", x=x), y=ctx.op("cos", x=x))]


def mod(ctx: Lowering, node: Node) -> list[Value]:
    """Mod: fmod=0 the floor remainder x − ⌊x/y⌋·y, which ONNX defines for integers; fmod=1 the
    truncated one (C's fmod), sign(x)·mod(|x|, |y|). Both of floor_div, mul, sub, abs and sign,
    which the ANE runs (MIL's own `mod` it does not)."""
    x, y = node.given(0), node.given(1)
    fmod = int(node.attr("fmod", 0))
    if fmod not in (0, 1):
        raise Unlowered(f"Mod with fmod = {fmod} (ONNX defines 0 and 1)")
    if fmod == 0 and not (_is_int(x) and _is_int(y)):
        raise Unlowered("Mod of floats with fmod = 0 (ONNX requires fmod = 1 for floats)")
    out = node.out[0]
    if fmod == 0:
        return [_floor_mod(ctx, x, y, out)]
    magnitude = np.abs(x) if isinstance(x, np.ndarray) else ctx.op("abs", x=x)
    divisor = np.abs(y) if isinstance(y, np.ndarray) else ctx.op("abs", x=y)
    remainder = _floor_mod(ctx, magnitude, divisor, None)
    sign = np.sign(x) if isinstance(x, np.ndarray) else ctx.op("sign", x=x)
    return [ctx.op("mul", out, x=sign, y=remainder)]


def _floor_mod(ctx: Lowering, x: Value, y: Value, out: str | None) -> Var:
    """x − ⌊x/y⌋·y, the remainder with the divisor's sign."""
    quotient = ctx.op("floor_div", x=x, y=y)
    return ctx.op("sub", out, x=x, y=ctx.op("mul", x=quotient, y=y))


def elu(ctx: Lowering, node: Node) -> list[Value]:
    """Elu, Selu (γ·elu(x, α)) and Celu (α·elu(x/α, 1))."""
    x, out = node.var(0), node.out[0]
    if node.op_type == "Elu":
        return [ctx.op("elu", out, x=x, alpha=_f32(node.attr("alpha", 1.0)))]
    if node.op_type == "Selu":
        alpha = float(node.attr("alpha", 1.67326319217681884765625))
        gamma = float(node.attr("gamma", 1.05070102214813232421875))
        return [ctx.op("mul", out, x=ctx.op("elu", x=x, alpha=_f32(alpha)), y=_f32(gamma))]
    alpha = float(node.attr("alpha", 1.0))
    if alpha == 0:
        raise RequestError(node.field, f"Celu node {node.label!r}: alpha 0")
    scaled = ctx.op("mul", x=x, y=_f32(1 / alpha)) if alpha != 1 else x
    y = ctx.op("elu", out if alpha == 1 else None, x=scaled, alpha=_f32(1.0))
    return [y if alpha == 1 else ctx.op("mul", out, x=y, y=_f32(alpha))]


def _f32(value: float) -> np.ndarray:
    return np.array(value, np.float32)


def mish(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    return [ctx.op("mul", node.out[0], x=x, y=ctx.op("tanh", x=ctx.op("softplus", x=x)))]


def log_softmax(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    axes = np.array([node.axis(int(node.attr("axis", -1)), x.tensor.rank)], np.int32)
    top = ctx.op("reduce_max", x=x, axes=axes, keep_dims=True)
    d = ctx.op("sub", x=x, y=top)
    total = ctx.op("reduce_sum", x=ctx.op("exp", x=d), axes=axes, keep_dims=True)
    return [ctx.op("sub", node.out[0], x=d, y=ctx.op("log", x=total))]


def softmax(ctx: Lowering, node: Node) -> list[Value]:
    return [ctx.op("softmax", node.out[0], x=node.var(0), axis=int(node.attr("axis", -1)))]


def gelu(ctx: Lowering, node: Node) -> list[Value]:
    approximate = node.attr("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    mode = {"none": "EXACT", "tanh": "TANH_APPROXIMATION"}.get(approximate)
    if mode is None:
        raise RequestError(node.field, f"Gelu node {node.label!r}: approximate {approximate!r}")
    return [ctx.op("gelu", node.out[0], x=node.var(0), mode=mode)]


def leaky_relu(ctx: Lowering, node: Node) -> list[Value]:
    x, alpha = node.var(0), float(node.attr("alpha", 0.01))
    if not 0 <= alpha <= 1:  # max(x, αx) is leaky_relu only there
        return [ctx.op("leaky_relu", node.out[0], x=x, alpha=_f32(alpha))]
    scaled = ctx.op("mul", x=x, y=np.array(alpha, np.float32))
    return [ctx.op("maximum", node.out[0], x=x, y=scaled)]


def prelu(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    slope = node.known(1, "slope", waits="prelu (a slope computed from the data)")
    negative = ctx.op("minimum", x=x, y=np.array(0.0, np.float32))
    scaled = ctx.op("mul", x=negative, y=slope)
    return [ctx.op("add", node.out[0], x=ctx.op("relu", x=x), y=scaled)]


def _hard_sigmoid(ctx: Lowering, x: Var, alpha: float, beta: float, out: str | None) -> Var:
    linear = ctx.op(
        "add", x=ctx.op("mul", x=x, y=np.array(alpha, np.float32)), y=np.array(beta, np.float32)
    )
    low = ctx.op("maximum", x=linear, y=np.array(0.0, np.float32))
    return ctx.op("minimum", out, x=low, y=np.array(1.0, np.float32))


def hard_sigmoid(ctx: Lowering, node: Node) -> list[Value]:
    alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    return [_hard_sigmoid(ctx, node.var(0), alpha, beta, node.out[0])]


def hard_swish(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    return [ctx.op("mul", node.out[0], x=x, y=_hard_sigmoid(ctx, x, 1 / 6, 0.5, None))]


def clip(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    low = node.known(1, "min", waits="clip (bounds computed from the data)")
    high = node.known(2, "max", waits="clip (bounds computed from the data)")
    steps = [
        (op, bound) for op, bound in (("maximum", low), ("minimum", high)) if bound is not None
    ]
    if not steps:
        return [x]
    for i, (op, bound) in enumerate(steps):
        x = ctx.op(
            op,
            node.out[0] if i == len(steps) - 1 else None,
            x=x,
            y=bound.astype(x.tensor.dtype.numpy),
        )
    return [x]


def softsign(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    denominator = ctx.op("add", x=ctx.op("abs", x=x), y=np.array(1.0, np.float32))
    return [ctx.op("real_div", node.out[0], x=x, y=denominator)]


def identity(ctx: Lowering, node: Node) -> list[Value]:
    return [node.given(0)]


def cast(ctx: Lowering, node: Node) -> list[Value]:
    """Floats are fp16 and integers int32 in the program: a cast between two floats or two
    integers changes nothing there."""
    from onnx import TensorProto

    x = node.var(0)
    to = int(node.attr("to"))
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)
    ints = (
        TensorProto.INT64,
        TensorProto.INT32,
        TensorProto.INT16,
        TensorProto.INT8,
        TensorProto.UINT8,
    )
    dtype = (
        "fp16"
        if to in floats
        else "int32"
        if to in ints
        else "bool"
        if to == TensorProto.BOOL
        else None
    )
    if dtype is None:
        raise RequestError(node.field, f"Cast node {node.label!r}: to type {to} is not supported")
    if x.tensor.dtype.value == dtype:
        return [x]
    return [ctx.op("cast", node.out[0], x=x, dtype=dtype)]


HANDLERS: dict[str, Handler] = {
    **dict.fromkeys(_BINARY, binary),
    **dict.fromkeys(_UNARY, unary),
    "Neg": neg,
    "Reciprocal": reciprocal,
    **dict.fromkeys(("Max", "Min", "Sum", "Mean"), variadic),
    "Pow": pow_,
    "Tan": tan,
    "Mod": mod,
    **dict.fromkeys(("Elu", "Selu", "Celu"), elu),
    "Mish": mish,
    "LogSoftmax": log_softmax,
    "Softmax": softmax,
    "Gelu": gelu,
    "LeakyRelu": leaky_relu,
    "PRelu": prelu,
    "HardSigmoid": hard_sigmoid,
    "HardSwish": hard_swish,
    "Clip": clip,
    "Softsign": softsign,
    "Identity": identity,
    "Dropout": identity,
    "Cast": cast,
}
