"""How each IR op is written with `coreai.authoring`: one rule per op type, `RULES`.

A rule takes the `Step` of one IR operation and returns its results as Core AI values, shaped
and typed as the IR says. Core AI spells some things differently from MIL: elementwise ops of
unequal shapes are the `broadcasting_*` ops, reductions keep their reduced dimensions, there is
no padding argument on convolutions, and index arguments have dtypes of their own (permutations
ui32, axes si32).

Linears: a matmul with a weight operand becomes a 1×1 convolution. That is the Neural Engine's
preferred form, and Apple's CPU runtime accumulates an fp16 `batch_matmul` in fp16 (4096 ones sum
to 2048) but a convolution in fp32. Matmuls of two activations stay `batch_matmul`;
`app.coreai.accuracy` widens their tolerance for fp16 accumulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from app.coreai.spelling import ca as _ca
from app.coreai.spelling import cast_to
from app.coreai.spelling import reshape as _reshape
from app.coreai.spelling import transpose as _transpose
from app.coreai.step import NoCoreAIForm, Step, is_weight
from app.mil import TensorType

Rule = Callable[[Step], list]


# -- elementwise ------------------------------------------------------------------------------
_BINARY = {
    "add": ("add", "broadcasting_add"),
    "sub": ("sub", "broadcasting_sub"),
    "mul": ("mul", "broadcasting_mul"),
    "real_div": ("divide", "broadcasting_divide"),
    "maximum": ("maximum", "broadcasting_maximum"),
    "minimum": ("minimum", "broadcasting_minimum"),
}


def _binary(name: str) -> Rule:
    same, broadcasting = _BINARY[name]

    def rule(step: Step) -> list:
        x, y = step.value("x"), step.value("y")
        equal = step.type("x").shape == step.type("y").shape
        return [getattr(_ca(), same if equal else broadcasting)(x, y)]

    return rule


def _unary(name: str) -> Rule:
    return lambda step: [getattr(_ca(), name)(step.value("x"))]


def _square(step: Step) -> list:
    x = step.value("x")
    return [_ca().mul(x, x)]


def _rsqrt(step: Step) -> list:
    x = step.value("x")
    if step.has("epsilon"):
        eps = step.make(np.full(step.type("x").shape, step.const("epsilon")), step.type("x"))
        x = _ca().add(x, eps)
    return [_ca().rsqrt(x)]


def _gelu(step: Step) -> list:
    mode = step.const("mode", "EXACT")
    x = step.value("x")
    if mode == "SIGMOID_APPROXIMATION":  # x · sigmoid(1.702 x)
        scale = step.make(np.full(step.type("x").shape, 1.702), step.type("x"))
        return [_ca().mul(x, _ca().sigmoid(_ca().mul(x, scale)))]
    return [_ca().gelu(x, approximate="tanh" if mode == "TANH_APPROXIMATION" else "none")]


_CAST = {"fp16": "float16", "fp32": "float32", "int32": "int32", "bool": "bool_"}


def _cast(step: Step) -> list:
    ca = _ca()
    return [ca.cast(step.value("x"), getattr(ca, _CAST[step.const("dtype")]))]


# -- reductions -------------------------------------------------------------------------------
def _axes(step: Step, rank: int, default: list[int]) -> list[int]:
    raw = step.const("axes", default)
    return sorted(a % rank for a in ([raw] if isinstance(raw, int) else raw))


def _reduction(name: str) -> Rule:
    def rule(step: Step) -> list:
        x = step.value("x")
        rank = step.type("x").rank
        axes = step.indices(_axes(step, rank, list(range(rank))))
        if name == "l2_norm":  # sqrt(sum(x²))
            out = _ca().sqrt(_ca().reduce_sum(_ca().mul(x, x), axes))
        else:
            out = getattr(_ca(), f"reduce_{name}")(x, axes)
        return [_reshape(step, out, step.out[0].shape)]  # Core AI keeps the reduced dims

    return rule


def _softmax(step: Step) -> list:
    axis = step.const("axis", -1) % step.type("x").rank
    return [_ca().softmax(step.value("x"), np.array(axis, np.int32))]


# -- shapes -----------------------------------------------------------------------------------
def _to_output_shape(step: Step) -> list:
    """reshape, expand_dims, squeeze: the same elements under the IR's output shape."""
    return [_reshape(step, step.value("x"), step.out[0].shape)]


def _transpose_rule(step: Step) -> list:
    rank = step.type("x").rank
    return [_transpose(step, step.value("x"), [p % rank for p in step.const("perm")])]


def _tile(step: Step) -> list:
    return [_ca().tile(step.value("x"), step.indices(step.const("reps"), "uint32"))]


def _concat(step: Step) -> list:
    rank = step.out[0].rank
    axis = step.const("axis") % rank
    values = step.values("values")
    if not step.const("interleave", False):
        return [_ca().concat(np.array(axis, np.int32), values)]
    # interleaved: a new axis after `axis` holds the inputs side by side, then folds into it
    given = step.op.inputs["values"]
    first = (given[0] if isinstance(given, tuple) else given).tensor
    spread = (*first.shape[: axis + 1], 1, *first.shape[axis + 1 :])
    stacked = _ca().concat(
        np.array(axis + 1, np.int32), [_reshape(step, v, spread) for v in values]
    )
    return [_reshape(step, stacked, step.out[0].shape)]


def _slice(step: Step, begin: list[int], end: list[int], stride: list[int]):
    return _ca().slice_(
        step.value("x"), step.indices(begin), step.indices(end), step.indices(stride)
    )


def _slice_by_size(step: Step) -> list:
    shape = step.type("x").shape
    begin = [b % d for b, d in zip(step.const("begin"), shape, strict=True)]
    end = [
        b + (d - b if s == -1 else s)
        for b, s, d in zip(begin, step.const("size"), shape, strict=True)
    ]
    return [_slice(step, begin, end, [1] * len(shape))]


def _slice_by_index(step: Step) -> list:
    shape = step.type("x").shape
    rank = len(shape)
    stride = step.const("stride", [1] * rank)
    masks = {m: step.const(m, [False] * rank) for m in ("begin_mask", "end_mask", "squeeze_mask")}
    begins, ends, strides = [], [], []
    for i, d in enumerate(shape):
        if masks["squeeze_mask"][i]:  # one index, its axis dropped by the reshape below
            start = step.const("begin")[i] % d
            stop, by = start + 1, 1
        else:
            b = None if masks["begin_mask"][i] else step.const("begin")[i]
            e = None if masks["end_mask"][i] else step.const("end")[i]
            start, stop, by = slice(b, e, stride[i]).indices(d)
            if by < 0:
                raise NoCoreAIForm("slice_by_index with a negative stride")
        begins.append(start)
        ends.append(stop)
        strides.append(by)
    return [_reshape(step, _slice(step, begins, ends, strides), step.out[0].shape)]


def _split(step: Step) -> list:
    axis = step.const("axis") % step.type("x").rank
    sizes = [t.shape[axis] for t in step.out]
    return list(
        _ca().split(step.value("x"), step.indices(sizes, "uint32"), np.array(axis, np.int32))
    )


def _slice_update(step: Step) -> list:
    x = step.type("x")
    stride = step.indices(step.const("stride", [1] * x.rank))
    return [
        _ca().slice_update(
            step.value("x"), step.value("begin"), step.value("end"), stride, step.value("update")
        )
    ]


# -- convolution and matmul -------------------------------------------------------------------
def _conv(step: Step) -> list:
    x_type, w_type = step.type("x"), step.type("weight")
    if x_type.rank != 4:
        raise NoCoreAIForm(f"conv of a rank {x_type.rank} input (only 2-D convolutions)")
    x, weight = step.value("x"), step.value("weight")
    if w_type.dtype != x_type.dtype:
        weight = cast_to(weight, x_type)
    pad_type = step.const("pad_type", "valid")
    strides = step.const("strides", [1, 1])
    dilations = step.const("dilations", [1, 1])
    if pad_type == "same":
        pad = []
        for size, k, s, d in zip(
            x_type.shape[2:], w_type.shape[2:], strides, dilations, strict=True
        ):
            total = max((-(-size // s) - 1) * s + d * (k - 1) + 1 - size, 0)
            pad += [total // 2, total - total // 2]
    else:
        pad = step.const("pad", [0, 0, 0, 0]) if pad_type == "custom" else [0, 0, 0, 0]
    if any(pad):
        pads = step.indices([0, 0, 0, 0, *pad], "uint32")  # (before, after) per axis
        x = _ca().pad(x, pads, step.make(np.zeros(()), x_type))
    out = _ca().conv2d(x, weight, list(strides), list(dilations), step.const("groups", 1))
    if step.has("bias"):
        bias = step.value("bias")
        if step.type("bias").dtype != x_type.dtype:
            bias = cast_to(bias, x_type)
        out = _ca().broadcasting_add(out, _reshape(step, bias, (1, w_type.shape[0], 1, 1)))
    return [out]


def _weight_as_conv(step: Step, arg: str, transpose: bool, dtype: TensorType):
    """A rank-2 weight operand [out, in] (`transpose`: stored [in, out]) as conv weights
    [out, in, 1, 1]; plain consts are rearranged here, decompressed ones in the program."""
    array = step.array(arg)
    if array is not None:
        matrix = array.T if transpose else array
        return step.make(matrix.reshape(*matrix.shape, 1, 1), dtype)
    value = step.value(arg)
    if transpose:
        value = _transpose(step, value, [1, 0])
    rows, cols = step.type(arg).shape[::-1] if transpose else step.type(arg).shape
    value = _reshape(step, value, (rows, cols, 1, 1))
    return value if step.type(arg).dtype == dtype.dtype else cast_to(value, dtype)


def rows_through_conv(
    step: Step, x, k: int, weight: str, stored_in_out: bool, like: TensorType, shape
) -> object:
    """x @ W for a weight argument W, as one 1×1 convolution: the rows of x (K wide), side by
    side, are what it runs over. `stored_in_out`: the weight is stored [K, out]."""
    rows = math.prod(shape[:-1])
    columns = _transpose(step, _reshape(step, x, (rows, k)), [1, 0])
    w = _weight_as_conv(step, weight, stored_in_out, like)
    conv = _ca().conv2d(_reshape(step, columns, (1, k, 1, rows)), w, [1, 1], [1, 1], 1)
    flat = _transpose(step, _reshape(step, conv, (shape[-1], rows)), [1, 0])
    return _reshape(step, flat, shape)


def _matmul(step: Step) -> list:
    tx, ty = step.const("transpose_x", False), step.const("transpose_y", False)
    x_type, y_type, out = step.type("x"), step.type("y"), step.out[0]
    if is_weight(step.var("x")) and x_type.rank == 2 and math.prod(y_type.shape[:-2]) == 1:
        # W @ y: y's rows are the channels a 1×1 convolution reads
        k, n = y_type.shape[-2:][::-1] if ty else y_type.shape[-2:]
        y = step.value("y")
        if ty:
            y = _transpose(step, _reshape(step, y, (n, k)), [1, 0])
        w = _weight_as_conv(step, "x", tx, y_type)
        conv = _ca().conv2d(_reshape(step, y, (1, k, 1, n)), w, [1, 1], [1, 1], 1)
        return [_reshape(step, conv, out.shape)]
    if is_weight(step.var("y")) and y_type.rank == 2:
        # x @ W: the rows of x, side by side, are what the convolution runs over
        k = y_type.shape[1] if ty else y_type.shape[0]
        x = step.value("x")
        if tx:
            x = _transpose(step, x, [*range(x_type.rank - 2), x_type.rank - 1, x_type.rank - 2])
        return [rows_through_conv(step, x, k, "y", not ty, x_type, out.shape)]
    x, y = step.value("x"), step.value("y")
    if tx:
        x = _transpose(step, x, [*range(x_type.rank - 2), x_type.rank - 1, x_type.rank - 2])
    if ty:
        y = _transpose(step, y, [*range(y_type.rank - 2), y_type.rank - 1, y_type.rank - 2])
    same_batch = x_type.shape[:-2] == y_type.shape[:-2]
    return [(_ca().batch_matmul if same_batch else _ca().broadcasting_batch_matmul)(x, y)]


def _sdpa(step: Step) -> list:
    """softmax(q kᵀ / √d + mask) v, from primitives (Core AI has no attention op)."""
    q_type, k_type = step.type("query"), step.type("key")
    q, k, v = step.value("query"), step.value("key"), step.value("value")
    rank = k_type.rank
    kt = _transpose(step, k, [*range(rank - 2), rank - 1, rank - 2])
    same = q_type.shape[:-2] == k_type.shape[:-2]
    scores = (_ca().batch_matmul if same else _ca().broadcasting_batch_matmul)(q, kt)
    scale = step.make(np.array(1 / math.sqrt(q_type.shape[-1])), q_type)
    scores = _ca().broadcasting_mul(scores, scale)
    if step.has("attn_mask"):
        mask = step.value("attn_mask")
        if step.type("attn_mask").dtype.value == "bool":  # True: attend
            neg = step.make(np.array(-np.inf), q_type)
            scores = _ca().broadcasting_where(mask, scores, neg)
        else:
            scores = _ca().broadcasting_add(scores, mask)
    probs = _ca().softmax(scores, np.array(rank - 1, np.int32))
    same_v = q_type.shape[:-2] == step.type("value").shape[:-2]
    return [(_ca().batch_matmul if same_v else _ca().broadcasting_batch_matmul)(probs, v)]


RULES: dict[str, Rule] = {
    **{name: _binary(name) for name in _BINARY},
    **{name: _unary(name) for name in ("sigmoid", "silu", "relu", "tanh", "exp", "sqrt")},
    "abs": _unary("abs_"),
    "square": _square,
    "rsqrt": _rsqrt,
    "gelu": _gelu,
    "cast": _cast,
    **{f"reduce_{k}": _reduction(k) for k in ("max", "mean", "sum", "l2_norm", "min")},
    "reduce_prod": _reduction("product"),
    "softmax": _softmax,
    "reshape": _to_output_shape,
    "expand_dims": _to_output_shape,
    "squeeze": _to_output_shape,
    "transpose": _transpose_rule,
    "tile": _tile,
    "concat": _concat,
    "slice_by_size": _slice_by_size,
    "slice_by_index": _slice_by_index,
    "split": _split,
    "slice_update": _slice_update,
    "conv": _conv,
    "matmul": _matmul,
    "scaled_dot_product_attention": _sdpa,
}
