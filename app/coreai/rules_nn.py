"""Rules for the normalizations, pools, linears, arg-reductions and scans.

Core AI has no normalization op: layer_norm and instance_norm are spelt with reduce_mean (which
keeps the reduced axes) and rsqrt, batch_norm as one multiply and one add by constants folded
here. Pools are 2-D only, and pad nothing: the padding (and ceil mode's overhang) is a `pad`
before them, an average a window sum divided by each window's own count. A conv_transpose is
the full transposed convolution, cut to the output window by a slice (and a pad where the
window reaches past it), so that no padding convention of Core AI's is relied on.
"""

from __future__ import annotations

import numpy as np

from app.coreai.rules import Rule, rows_through_conv
from app.coreai.spelling import ca, cast_to, reshape, scalar, transpose
from app.coreai.step import NoCoreAIForm, Step
from app.mil import DType, TensorType
from app.mil.call import Call
from app.mil.ops.conv import transpose_geometry
from app.mil.ops.pool import pool_plan
from app.mil.ops.windows import WindowError


# -- normalization ---------------------------------------------------------------------------
def _normalized(step: Step, axes: list[int]):
    """(x - mean) / √(variance + epsilon) over `axes`, in x's dtype."""
    x, like = step.value("x"), step.type("x")
    axes_value = step.indices(axes)
    centred = ca().broadcasting_sub(x, ca().reduce_mean(x, axes_value))
    variance = ca().reduce_mean(ca().mul(centred, centred), axes_value)
    eps = scalar(step, step.const("epsilon", 1e-5), like)
    return ca().broadcasting_mul(centred, ca().rsqrt(ca().broadcasting_add(variance, eps)))


def _affine(step: Step, y, shape: list[int]):
    """y · gamma + beta, each reshaped to broadcast (the normalized axes kept)."""
    like = step.type("x")
    for arg, combine in (("gamma", ca().broadcasting_mul), ("beta", ca().broadcasting_add)):
        if step.has(arg):
            value = step.array(arg)
            if value is None:
                raise NoCoreAIForm(f"{step.op.type} with a computed {arg}")
            y = combine(y, step.make(value.reshape(shape), like))
    return y


def _layer_norm(step: Step) -> list:
    like = step.type("x")
    raw = step.const("axes", list(range(like.rank)))
    axes = sorted(a % like.rank for a in ([raw] if isinstance(raw, int) else raw))
    shape = [d if i in axes else 1 for i, d in enumerate(like.shape)]
    return [_affine(step, _normalized(step, axes), shape)]


def _instance_norm(step: Step) -> list:
    like = step.type("x")
    shape = [1, like.shape[1], *[1] * (like.rank - 2)]
    return [_affine(step, _normalized(step, list(range(2, like.rank))), shape)]


def _batch_norm(step: Step) -> list:
    like = step.type("x")
    params = {}
    for arg, default in (("mean", 0.0), ("variance", 1.0), ("gamma", 1.0), ("beta", 0.0)):
        value = step.array(arg) if step.has(arg) else np.full(like.shape[1], default)
        if value is None:
            raise NoCoreAIForm(f"batch_norm with a computed {arg}")
        params[arg] = value.astype(np.float64)
    scale = params["gamma"] / np.sqrt(params["variance"] + step.const("epsilon", 1e-5))
    shift = params["beta"] - params["mean"] * scale
    shape = [1, like.shape[1], *[1] * (like.rank - 2)]
    scaled = ca().broadcasting_mul(step.value("x"), step.make(scale.reshape(shape), like))
    return [ca().broadcasting_add(scaled, step.make(shift.reshape(shape), like))]


# -- pools -----------------------------------------------------------------------------------
def _pool_input(step: Step, fill: float):
    like = step.type("x")
    if like.rank != 4:
        raise NoCoreAIForm(f"{step.op.type} of a rank {like.rank} input (only 2-D pools)")
    try:
        plan = pool_plan(like.shape, lambda arg: step.const(arg))
    except WindowError as exc:  # the type rule has refused these already
        raise NoCoreAIForm(str(exc)) from None
    x = step.value("x")
    if any(before or after for before, after in plan.widths):
        pads = [0, 0, 0, 0, *(w for pair in plan.widths for w in pair)]
        x = ca().pad(x, step.indices(pads, "uint32"), scalar(step, fill, like))
    return x, plan


def _max_pool(step: Step) -> list:
    x, plan = _pool_input(step, -np.inf)
    from coreai.authoring import TensorType as CoreAIType

    from app.coreai.dtype_map import coreai_dtype, dtype_name

    out = step.out[0]
    output = CoreAIType(out.shape, coreai_dtype(dtype_name(out.dtype)))
    ones = step.indices([1, 1], "uint32")
    return [
        ca().maxpool2d(
            output,
            x,
            step.indices(plan.kernel, "uint32"),
            step.indices(plan.strides, "uint32"),
            ones,
            np.array(False),
        )
    ]


def _avg_pool(step: Step) -> list:
    x, plan = _pool_input(step, 0.0)
    ones = step.indices([1, 1], "uint32")
    total = ca().sumpool2d(
        x, step.indices(plan.kernel, "uint32"), step.indices(plan.strides, "uint32"), ones
    )
    divisor = step.make(plan.divisor.reshape(1, 1, *plan.out), step.type("x"))
    return [ca().broadcasting_divide(total, divisor)]


# -- products --------------------------------------------------------------------------------
def _plus_bias(step: Step, y, shape):
    """y + bias (in x's dtype, reshaped to `shape`) when the op has one."""
    if not step.has("bias"):
        return y
    like, bias = step.type("x"), step.value("bias")
    if step.type("bias").dtype != like.dtype:
        bias = cast_to(bias, like)
    return ca().broadcasting_add(y, reshape(step, bias, shape))


def _conv_transpose(step: Step) -> list:
    like, w_type = step.type("x"), step.type("weight")
    if like.rank != 4:
        raise NoCoreAIForm(f"conv_transpose of a rank {like.rank} input (only 2-D)")
    strides, dilations, before, out = transpose_geometry(Call("", "", step.op.inputs))
    weight = step.value("weight")
    if w_type.dtype != like.dtype:
        weight = cast_to(weight, like)
    zeros = step.indices([0, 0], "uint32")
    full = ca().conv_transpose2d(
        step.value("x"),
        weight,
        step.indices(strides, "uint32"),
        zeros,
        step.indices(dilations, "uint32"),
        zeros,
        np.array(step.const("groups", 1), np.uint32),
    )
    sizes = [
        (s - 1) * st + d * (k - 1) + 1
        for s, st, d, k in zip(like.shape[2:], strides, dilations, w_type.shape[2:], strict=True)
    ]
    channels = step.out[0].shape[1]
    ends = [min(b + o, f) for b, o, f in zip(before, out, sizes, strict=True)]
    cut = ca().slice_(
        full,
        step.indices([0, 0, *before]),
        step.indices([like.shape[0], channels, *ends]),
        step.indices([1, 1, 1, 1]),
    )
    short = [o - (e - b) for o, e, b in zip(out, ends, before, strict=True)]
    if any(short):
        pads = [0, 0, 0, 0, *(v for s in short for v in (0, s))]
        cut = ca().pad(cut, step.indices(pads, "uint32"), scalar(step, 0, like))
    return [_plus_bias(step, cut, (1, channels, 1, 1))]


def _linear(step: Step) -> list:
    """x @ weightᵀ as matmul writes one with a weight: a 1×1 convolution (the weight is a
    const or a constexpr output: the op's check holds it to that)."""
    like, out = step.type("x"), step.out[0]
    k = like.shape[-1]
    y = rows_through_conv(step, step.value("x"), k, "weight", False, like, out.shape)
    return [_plus_bias(step, y, step.type("bias").shape if step.has("bias") else ())]


def _einsum(step: Step) -> list:
    """Both forms contract the last axis of the first with axis -3 of the second over the
    batch axes (B and) H: swap axes -3 and -2, multiply, swap back."""
    values = step.op.inputs["values"]
    assert isinstance(values, tuple)
    x_type, y_type = (v.tensor for v in values)
    x, y = step.values("values")
    rank = x_type.rank
    swap = [*range(rank - 3), rank - 2, rank - 3, rank - 1]
    same = x_type.shape[:-3] + x_type.shape[-2:-1] == y_type.shape[:-3] + y_type.shape[-2:-1]
    matmul = ca().batch_matmul if same else ca().broadcasting_batch_matmul
    product = matmul(transpose(step, x, swap), transpose(step, y, swap))
    return [transpose(step, product, swap)]


# -- arg-reductions, scans, top-k ------------------------------------------------------------
def _arg(negate: bool) -> Rule:
    def rule(step: Step) -> list:
        like = step.type("x")
        x = step.value("x")
        if negate:  # the first smallest is the first largest of -x
            x = ca().broadcasting_mul(x, scalar(step, -1, like))
        axis = step.const("axis", -1) % like.rank
        found = ca().argmax(x, np.array(axis, np.int32))
        return [reshape(step, cast_to(found, step.out[0]), step.out[0].shape)]

    return rule


def _cumsum(step: Step) -> list:
    like = step.type("x")
    x = step.value("x")
    axis = np.array(step.const("axis", 0) % like.rank, np.uint32)
    total = ca().scan(x, axis, np.array(bool(step.const("reverse", False))), "sum")
    return [ca().sub(total, x) if step.const("exclusive", False) else total]


def _topk(step: Step) -> list:
    """A stable argsort, its first k, and the values at those indices."""
    like = step.type("x")
    axis = step.const("axis", -1) % like.rank
    k = step.out[0].shape[axis]
    descending = np.array(not step.const("ascending", False))
    order = ca().argsort(step.value("x"), np.array(axis, np.int32), descending, np.array(True))
    end = list(like.shape)
    end[axis] = k
    first = ca().slice_(
        order, step.indices([0] * like.rank), step.indices(end), step.indices([1] * like.rank)
    )
    first = cast_to(first, TensorType(DType.INT32, ()))
    values = ca().gather_along_axis(step.value("x"), first, np.array(axis, np.int32))
    if len(step.out) == 1:
        return [values]
    indices = step.out[1]
    return [values, first if indices.dtype is DType.INT32 else cast_to(first, indices)]


RULES: dict[str, Rule] = {
    "layer_norm": _layer_norm,
    "instance_norm": _instance_norm,
    "batch_norm": _batch_norm,
    "max_pool": _max_pool,
    "avg_pool": _avg_pool,
    "conv_transpose": _conv_transpose,
    "linear": _linear,
    "einsum": _einsum,
    "reduce_argmax": _arg(negate=False),
    "reduce_argmin": _arg(negate=True),
    "cumsum": _cumsum,
    "topk": _topk,
}
