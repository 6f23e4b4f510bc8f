"""Lowerings of ONNX's linear algebra, convolution, normalization and reduction ops.

Normalizations are spelled out in primitives until the IR has `layer_norm`, `instance_norm` and
`batch_norm` records: LayerNormalization as
    mean = reduce_mean(x); d = x − mean; var = reduce_mean(d·d); y = d · rsqrt(var + ε) · γ + β
(the pattern coremltools' fuse_layernorm_or_instancenorm pass folds into one layer_norm), and an
inference BatchNormalization as one multiply and one add per channel, its scale γ/√(σ²+ε) and
shift β − μ·γ/√(σ²+ε) computed at import (in float64, stored fp16).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.errors import RequestError
from app.mil import Var
from app.onnx.lowering import Handler, Lowering, Node, Value
from app.onnx.ops_layout import reshape_to


def _f32(value: float) -> np.ndarray:
    return np.array(value, np.float32)


def _operand(ctx: Lowering, value: Value, key: str) -> Var:
    return value if isinstance(value, Var) else ctx.tensor(value, key)


def _weight(ctx: Lowering, value: Value, key: str, channel_axis: int, input_axis: int) -> Var:
    """A product's or a convolution's weight: a matrix (or conv kernel) known at import goes
    through the request's quantize config."""
    if isinstance(value, Var) or value.ndim not in (2, 3, 4, 5):
        return _operand(ctx, value, key)
    return ctx.weight(value, key, channel_axis, input_axis)


def matmul(ctx: Lowering, node: Node) -> list[Value]:
    """numpy's matmul: rank-1 operands get a unit axis for the product, removed after."""
    x = _operand(ctx, node.given(0), node.proto.input[0])
    given = node.input(1)
    if isinstance(given, np.ndarray) and given.ndim == 2:  # [in, out]
        y = _weight(ctx, given, node.proto.input[1], 1, 0)
    else:
        # MatMul's second input is always given (the reader checks every node's inputs)
        y = _operand(ctx, given, node.proto.input[1])  # type: ignore[arg-type]
    xr, yr = x.tensor.rank, y.tensor.rank
    if xr >= 2 and yr >= 2:
        return [ctx.op("matmul", node.out[0], x=x, y=y)]
    if xr == 1:
        x = reshape_to(ctx, x, [1, x.tensor.shape[0]], None)
    if yr == 1:
        y = reshape_to(ctx, y, [y.tensor.shape[0], 1], None)
    product = ctx.op("matmul", x=x, y=y)
    shape = list(product.tensor.shape)
    keep = shape[:-2] + ([shape[-2]] if xr > 1 else []) + ([shape[-1]] if yr > 1 else [])
    if not keep:
        raise RequestError(node.field, f"MatMul node {node.label!r}: a rank-0 product")
    return [reshape_to(ctx, product, keep, node.out[0])]


def gemm(ctx: Lowering, node: Node) -> list[Value]:
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    a, b, c = node.given(0), node.given(1), node.input(2)
    if alpha != 1 and isinstance(b, np.ndarray):
        b, alpha = (b.astype(np.float32) * alpha), 1.0
        weight = _operand(ctx, b, node.proto.input[1])  # scaled: not the initializer's values
    else:
        axes = (0, 1) if node.attr("transB", 0) else (1, 0)  # output channels, inputs
        weight = _weight(ctx, b, node.proto.input[1], *axes)
    y = ctx.op(
        "matmul",
        None if c is not None or alpha != 1 else node.out[0],
        x=_operand(ctx, a, node.proto.input[0]),
        y=weight,
        transpose_x=bool(node.attr("transA", 0)),
        transpose_y=bool(node.attr("transB", 0)),
    )
    if alpha != 1:
        y = ctx.op("mul", None if c is not None else node.out[0], x=y, y=_f32(alpha))
    if c is None or beta == 0:
        return [y]
    bias: Value
    if isinstance(c, np.ndarray):
        bias = c.astype(np.float32) * beta if beta != 1 else c
    else:
        bias = c if beta == 1 else ctx.op("mul", x=c, y=_f32(beta))
    return [ctx.op("add", node.out[0], x=y, y=bias)]


def conv(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    w = _weight(ctx, node.given(1), node.proto.input[1], 0, 1)
    spatial = x.tensor.rank - 2
    strides = list(node.attr("strides") or [1] * spatial)
    dilations = list(node.attr("dilations") or [1] * spatial)
    pads = list(node.attr("pads") or [0] * (2 * spatial))
    auto = node.attr("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    kernel = w.tensor.shape[2:]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * spatial)
        for i, size in enumerate(x.tensor.shape[2:]):
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 - size)
            small, large = total // 2, total - total // 2
            pads[i], pads[i + spatial] = (small, large) if auto == "SAME_UPPER" else (large, small)
    elif auto == "VALID":
        pads = [0] * (2 * spatial)
    # ONNX lists every start, then every end; MIL pairs them per axis
    pad = [p for i in range(spatial) for p in (pads[i], pads[i + spatial])]
    bias = node.input(2)
    args = {
        "x": x,
        "weight": w,
        "strides": np.array(strides, np.int32),
        "pad_type": "custom",
        "pad": np.array(pad, np.int32),
        "dilations": np.array(dilations, np.int32),
        "groups": np.array(int(node.attr("group", 1)), np.int32),
    }
    if bias is not None:
        args["bias"] = _operand(ctx, bias, node.proto.input[2])
    return [ctx.op("conv", node.out[0], **args)]


def _channel_shape(x: Var) -> list[int]:
    """A per-channel constant's shape against (N, C, ...)."""
    return [x.tensor.shape[1]] + [1] * (x.tensor.rank - 2)


def batch_norm(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    stats = [node.known(i, what) for i, what in enumerate(("scale", "bias", "mean", "variance"), 1)]
    gamma, beta, mean, var = (np.asarray(s, np.float64) for s in stats)
    scale = gamma / np.sqrt(var + float(node.attr("epsilon", 1e-5)))
    shift = beta - mean * scale
    shape = _channel_shape(x)
    scaled = ctx.op("mul", x=x, y=scale.astype(np.float32).reshape(shape))
    return [ctx.op("add", node.out[0], x=scaled, y=shift.astype(np.float32).reshape(shape))]


def _moments(ctx: Lowering, x: Var, axes: list[int]) -> tuple[Var, Var]:
    """x − mean and the variance over `axes` (kept as axes of 1), spelled in primitives."""
    axes_arg = np.array(axes, np.int32)
    mean = ctx.op("reduce_mean", x=x, axes=axes_arg, keep_dims=True)
    centered = ctx.op("sub", x=x, y=mean)
    var = ctx.op(
        "reduce_mean", x=ctx.op("mul", x=centered, y=centered), axes=axes_arg, keep_dims=True
    )
    return centered, var


def normalize(ctx: Lowering, x: Var, axes: list[int], epsilon: float, out: str | None) -> Var:
    """(x − mean) / √(var + ε) over `axes`, spelled in primitives."""
    centered, var = _moments(ctx, x, axes)
    inv = ctx.op("rsqrt", x=ctx.op("add", x=var, y=_f32(epsilon)))
    return ctx.op("mul", out, x=centered, y=inv)


def _affine(ctx: Lowering, node: Node, y: Var, scale: Value | None, bias: Value | None) -> Var:
    steps = [("mul", scale, 1), ("add", bias, 2)]
    steps = [(op, v, i) for op, v, i in steps if v is not None]
    for k, (op, value, _) in enumerate(steps):
        y = ctx.op(op, node.out[0] if k == len(steps) - 1 else None, x=y, y=value)
    return y


def layer_norm(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    rank = x.tensor.rank
    axis = node.axis(int(node.attr("axis", -1)), rank)
    scale, bias = node.input(1), node.input(2)
    last = scale is None and bias is None
    y = normalize(
        ctx,
        x,
        list(range(axis, rank)),
        float(node.attr("epsilon", 1e-5)),
        node.out[0] if last else None,
    )
    return [_affine(ctx, node, y, scale, bias)]


def _per_channel(ctx: Lowering, node: Node, i: int, x: Var) -> Value:
    value = node.known(i, ("scale", "bias")[i - 1])
    assert value is not None
    return value.astype(np.float32).reshape(_channel_shape(x))


def instance_norm(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    y = normalize(ctx, x, list(range(2, x.tensor.rank)), float(node.attr("epsilon", 1e-5)), None)
    scaled = ctx.op("mul", x=y, y=_per_channel(ctx, node, 1, x))
    return [ctx.op("add", node.out[0], x=scaled, y=_per_channel(ctx, node, 2, x))]


def group_norm(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    groups = int(node.attr("num_groups"))
    n, c, *rest = x.tensor.shape
    if c % groups:
        raise RequestError(
            node.field, f"GroupNormalization node {node.label!r}: {groups} groups of {c} channels"
        )
    grouped = reshape_to(ctx, x, [n, groups, (c // groups) * int(np.prod(rest or [1]))], None)
    y = normalize(ctx, grouped, [2], float(node.attr("epsilon", 1e-5)), None)
    y = reshape_to(ctx, y, list(x.tensor.shape), None)
    scale, bias = (node.known(i, w) for i, w in ((1, "scale"), (2, "bias")))
    assert scale is not None and bias is not None
    if scale.size == groups and c != groups:  # opset 18's per-group scale, repeated per channel
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    shape = _channel_shape(x)
    scaled = ctx.op("mul", x=y, y=scale.astype(np.float32).reshape(shape))
    return [ctx.op("add", node.out[0], x=scaled, y=bias.astype(np.float32).reshape(shape))]


_REDUCE = {
    "ReduceMean": "reduce_mean",
    "ReduceSum": "reduce_sum",
    "ReduceMax": "reduce_max",
    "ReduceL2": "reduce_l2_norm",
    "ReduceProd": "reduce_prod",
}


def reduce(ctx: Lowering, node: Node) -> list[Value]:
    """Axes as an attribute (to opset 17; ReduceSum to 12) or as an input (after)."""
    x = node.var(0)
    given = node.known(1, "axes")
    axes = [int(a) for a in given.reshape(-1)] if given is not None else node.attr("axes")
    keep = bool(node.attr("keepdims", 1))
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(x.tensor.rank))
    axes = sorted(node.axis(a, x.tensor.rank) for a in axes)
    if not keep and len(axes) == x.tensor.rank:
        raise RequestError(
            node.field, f"{node.op_type} node {node.label!r}: a program holds no rank-0 tensor"
        )
    args: dict[str, Any] = {"axes": np.array(axes, np.int32), "keep_dims": keep}
    out = node.out[0]
    if node.op_type == "ReduceMin":
        negated = ctx.op("mul", x=x, y=_f32(-1))
        return [ctx.op("mul", out, x=ctx.op("reduce_max", x=negated, **args), y=_f32(-1))]
    if node.op_type == "ReduceSumSquare":
        return [ctx.op("reduce_sum", out, x=ctx.op("square", x=x), **args)]
    if node.op_type == "ReduceL1":
        return [ctx.op("reduce_sum", out, x=ctx.op("abs", x=x), **args)]
    if node.op_type == "ReduceLogSum":
        return [ctx.op("log", out, x=ctx.op("reduce_sum", x=x, **args))]
    if node.op_type == "ReduceLogSumExp":  # m + log Σ exp(x − m), m the maximum: no overflow
        top = ctx.op("reduce_max", x=x, axes=args["axes"], keep_dims=True)
        total = ctx.op("reduce_sum", x=ctx.op("exp", x=ctx.op("sub", x=x, y=top)), **args)
        if not keep:
            top = reshape_to(ctx, top, list(total.tensor.shape), None)
        return [ctx.op("add", out, x=top, y=ctx.op("log", x=total))]
    return [ctx.op(_REDUCE[node.op_type], out, x=x, **args)]


# The smallest fp16 number: a vector whose norm is zero divides by it, and comes out zero, as
# onnxruntime gives it (it does not divide by a zero norm).
_TINIEST = float(np.finfo(np.float16).smallest_subnormal)


def lp_normalization(ctx: Lowering, node: Node) -> list[Value]:
    """x / ||x||_p along an axis: p = 2 reduce_l2_norm, p = 1 the sum of |x|."""
    x = node.var(0)
    axis = node.axis(int(node.attr("axis", -1)), x.tensor.rank)
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise RequestError(node.field, f"LpNormalization node {node.label!r}: p = {p} (1 or 2)")
    args: dict[str, Any] = {"axes": np.array([axis], np.int32), "keep_dims": True}
    if p == 2:
        norm = ctx.op("reduce_l2_norm", x=x, **args)
    else:
        norm = ctx.op("reduce_sum", x=ctx.op("abs", x=x), **args)
    guarded = ctx.op("maximum", x=norm, y=_f32(_TINIEST))
    return [ctx.op("real_div", node.out[0], x=x, y=guarded)]


def mean_variance_normalization(ctx: Lowering, node: Node) -> list[Value]:
    """(x − mean) / (σ + 1e-9) over `axes` (by default 0, 2, 3), as ONNX's function body
    writes it; σ held above the smallest fp16 number instead of 1e-9 added (fp16 has no 1e-9),
    so a constant slice comes out zero, as the function gives it (onnxruntime's kernel gives
    NaN there)."""
    x = node.var(0)
    rank = x.tensor.rank
    axes = sorted({node.axis(a, rank) for a in node.attr("axes") or (0, 2, 3)})
    centered, var = _moments(ctx, x, axes)
    sigma = ctx.op("sqrt", x=var)
    guarded = ctx.op("maximum", x=sigma, y=_f32(_TINIEST))
    return [ctx.op("real_div", node.out[0], x=centered, y=guarded)]


def global_pool(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    op = "reduce_mean" if node.op_type == "GlobalAveragePool" else "reduce_max"
    axes = np.array(list(range(2, x.tensor.rank)), np.int32)
    return [ctx.op(op, node.out[0], x=x, axes=axes, keep_dims=True)]


HANDLERS: dict[str, Handler] = {
    "MatMul": matmul,
    "Gemm": gemm,
    "Conv": conv,
    "BatchNormalization": batch_norm,
    "LayerNormalization": layer_norm,
    "InstanceNormalization": instance_norm,
    "GroupNormalization": group_norm,
    **dict.fromkeys(
        (*_REDUCE, "ReduceMin", "ReduceSumSquare", "ReduceL1", "ReduceLogSum", "ReduceLogSumExp"),
        reduce,
    ),
    "GlobalAveragePool": global_pool,
    "GlobalMaxPool": global_pool,
    "LpNormalization": lp_normalization,
    "MeanVarianceNormalization": mean_variance_normalization,
}
