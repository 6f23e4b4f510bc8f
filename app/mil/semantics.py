"""What every MIL op the builder supports computes, as NumPy: one table, one place, beside the
op declarations (app/mil/ops.py) whose types it fills in.

Each function receives an op's arguments (arrays in their stored dtype, const arguments as plain
Python) and returns the exact-as-practical result; the reference executor (app/reference) rounds
it to the op's declared output dtype. With `exact=True` everything computes in float64: that is
an op's float64 meaning, which graph verification composes. Elementwise ops compute in float32: on fp16 inputs a product is exact there and the
one rounding to fp16 dominates. Accumulating ops (reductions, softmax, matmul, conv, attention)
accumulate in float64, so each op's result is its correctly rounded value whatever the summation
order: the reference then measures fp16 *storage* error, which the kernel controls, and not a
particular device's accumulator (an fp32 accumulator differs by ~n·2⁻²⁴, far below fp16's 2⁻¹¹).
Semantics follow the coremltools op definitions (e.g. scaled_dot_product_attention divides by
sqrt(E) itself; concat with interleave alternates its inputs along the axis).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.mil import decompress
from app.mil.args import Args


def _binary(fn: Callable) -> Callable[[Args], np.ndarray]:
    return lambda a: fn(a.f32("x"), a.f32("y"))


def _real_div(a: Args) -> np.ndarray:
    x, y = a.f32("x"), a.f32("y")
    if x.dtype.kind == "i":  # integer real_div: true division, truncated when stored as int32
        return np.true_divide(x, y)
    return x / y


def _rsqrt(a: Args) -> np.ndarray:
    return 1 / np.sqrt(a.f32("x") + a.const("epsilon", 1e-12))


def _axes(a: Args, rank: int) -> tuple[int, ...]:
    axes = a.const("axes", list(range(rank)))
    return tuple(int(ax) % rank for ax in ([axes] if isinstance(axes, int) else axes))


def _reduce(fn: Callable) -> Callable[[Args], np.ndarray]:
    def run(a: Args) -> np.ndarray:
        x = a.f64("x")
        return fn(x, axis=_axes(a, x.ndim), keepdims=bool(a.const("keep_dims", False)))

    return run


def _l2_norm(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sqrt(np.sum(np.square(x), axis=axis, keepdims=keepdims))


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return shifted / np.sum(shifted, axis=axis, keepdims=True)


def _cast(a: Args) -> np.ndarray:
    x = a["x"]
    if a.const("dtype") == "bool":
        return x != 0
    return x  # the executor stores it in the target dtype (astype: rounds floats, truncates ints)


def _conv(a: Args) -> np.ndarray:
    x, w = a.f64("x"), a.f64("weight")
    n = x.ndim - 2
    strides = a.const("strides", [1] * n)
    dil = a.const("dilations", [1] * n)
    groups = a.const("groups", 1)
    kernel = w.shape[2:]
    pad_type = a.const("pad_type", "valid")
    if pad_type == "custom":
        pad = a.const("pad", [0] * (2 * n))
        pads = [(pad[2 * i], pad[2 * i + 1]) for i in range(n)]
    elif pad_type == "same":  # coremltools: total padding split with the extra element after
        pads = []
        for i, size in enumerate(x.shape[2:]):
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + dil[i] * (kernel[i] - 1) + 1 - size, 0)
            pads.append((total // 2, total - total // 2))
    else:
        pads = [(0, 0)] * n
    x = np.pad(x, [(0, 0), (0, 0), *pads])
    out_shape = [
        (x.shape[2 + i] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(n)
    ]
    cin, cout = w.shape[1], w.shape[0]
    xg = x.reshape(x.shape[0], groups, cin, *x.shape[2:])
    wg = w.reshape(groups, cout // groups, cin, *kernel)
    y = np.zeros((x.shape[0], groups, cout // groups, *out_shape))
    for k in np.ndindex(*kernel):
        window = tuple(
            slice(k[i] * dil[i], k[i] * dil[i] + (out_shape[i] - 1) * strides[i] + 1, strides[i])
            for i in range(n)
        )
        patch = xg[(slice(None), slice(None), slice(None), *window)]
        # [g, o, c] @ [n, g, c, positions]: a BLAS product (einsum would loop in NumPy)
        flat = patch.reshape(*patch.shape[:3], -1)
        y += np.matmul(wg[(..., *k)], flat).reshape(y.shape)
    y = y.reshape(x.shape[0], cout, *out_shape)
    if a.has("bias"):
        y += a.f64("bias").reshape(cout, *([1] * n))
    return y


def _matmul(a: Args) -> np.ndarray:
    x, y = a.f64("x"), a.f64("y")
    if a.const("transpose_x", False):
        x = np.swapaxes(x, -1, -2)
    if a.const("transpose_y", False):
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


def _concat(a: Args) -> np.ndarray:
    values = a.many("values")
    axis = int(a.const("axis")) % values[0].ndim
    if a.const("interleave", False):  # a0, b0, a1, b1, ... along the axis
        stacked = np.stack(values, axis=axis + 1)
        shape = list(values[0].shape)
        shape[axis] *= len(values)
        return stacked.reshape(shape)
    return np.concatenate(values, axis=axis)


def _slice_by_size(a: Args) -> np.ndarray:
    x = a["x"]
    index = []
    for d, b, s in zip(x.shape, a.const("begin"), a.const("size"), strict=True):
        b = b % d if b < 0 else b
        index.append(slice(b, d if s == -1 else b + s))
    return x[tuple(index)]


def _slice_by_index(a: Args) -> np.ndarray:
    x = a["x"]
    rank = x.ndim
    begin, end = a.const("begin"), a.const("end")
    stride = a.const("stride", [1] * rank)
    begin_mask = a.const("begin_mask", [False] * rank)
    end_mask = a.const("end_mask", [False] * rank)
    squeeze = a.const("squeeze_mask", [False] * rank)
    index: list[int | slice] = []
    for i in range(rank):
        if squeeze[i]:
            index.append(begin[i])
            continue
        b = None if begin_mask[i] else begin[i]
        e = None if end_mask[i] else end[i]
        index.append(slice(b, e, stride[i]))
    return x[tuple(index)]


def _split(a: Args) -> list[np.ndarray]:
    x = a["x"]
    axis = int(a.const("axis")) % x.ndim
    sizes = a.const("split_sizes")
    if sizes is None:
        count = int(a.const("num_splits"))
        sizes = [x.shape[axis] // count] * count
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(0.5 * x))  # no overflow for large |x|, unlike 1 / (1 + exp(-x))


def _erf(x: np.ndarray) -> np.ndarray:
    """erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7: a thousand times finer
    than an fp16 step near 1), as NumPy has none and SciPy is not a dependency."""
    t = 1 / (1 + 0.3275911 * np.abs(x))
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return np.sign(x) * (1 - poly * np.exp(-x * x))


def _gelu(a: Args) -> np.ndarray:
    x, mode = a.f32("x"), a.const("mode", "EXACT")
    if mode == "TANH_APPROXIMATION":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    if mode == "SIGMOID_APPROXIMATION":
        return x * _sigmoid(1.702 * x)
    return 0.5 * x * (1 + _erf(x / np.sqrt(2)))


def _expand_dims(a: Args) -> np.ndarray:
    x = a["x"]
    rank = x.ndim + len(a.const("axes"))
    return np.expand_dims(x, tuple(ax % rank for ax in a.const("axes")))


def _squeeze(a: Args) -> np.ndarray:
    x = a["x"]
    axes = a.const("axes")
    return np.squeeze(x, None if axes is None else tuple(ax % x.ndim for ax in axes))


def _sdpa(a: Args) -> np.ndarray:
    q, k, v = a.f64("query"), a.f64("key"), a.f64("value")
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])
    if a.has("attn_mask"):
        mask = a["attn_mask"]
        scores = scores + (np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask)
    return np.matmul(_softmax(scores, -1), v)


def _slice_update(a: Args) -> np.ndarray:
    x = np.array(a["x"])
    begin, end = a.const("begin"), a.const("end")
    stride = a.const("stride", [1] * x.ndim)
    index = tuple(slice(b, e, s) for b, e, s in zip(begin, end, stride, strict=True))
    region = x[index]
    if region.shape != a["update"].shape:
        raise ValueError(
            f"slice_update: x[{begin}:{end}] is {list(region.shape)}, the update "
            f"{list(a['update'].shape)}"
        )
    x[index] = a["update"]
    return x


def _read_state(a: Args) -> np.ndarray:
    return a.states[a.state_name("input")].copy()


def _write_state(a: Args) -> None:
    a.states[a.state_name("input")] = np.array(a["data"])


OpFn = Callable[[Args], np.ndarray | list[np.ndarray] | tuple[np.ndarray, ...] | None]

TABLE: dict[str, OpFn] = {
    "cast": _cast,
    "conv": _conv,
    "matmul": _matmul,
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "real_div": _real_div,
    "maximum": _binary(np.maximum),
    "minimum": _binary(np.minimum),
    "abs": lambda a: np.abs(a.f32("x")),
    "square": lambda a: np.square(a.f32("x")),
    "sqrt": lambda a: np.sqrt(a.f32("x")),
    "exp": lambda a: np.exp(a.f32("x")),
    "tanh": lambda a: np.tanh(a.f32("x")),
    "sigmoid": lambda a: _sigmoid(a.f32("x")),
    "silu": lambda a: a.f32("x") * _sigmoid(a.f32("x")),
    "relu": lambda a: np.maximum(a.f32("x"), 0),
    "gelu": _gelu,
    "rsqrt": _rsqrt,
    "reduce_max": _reduce(np.max),
    "reduce_mean": _reduce(np.mean),
    "reduce_sum": _reduce(np.sum),
    "reduce_l2_norm": _reduce(_l2_norm),
    "softmax": lambda a: _softmax(a.f64("x"), int(a.const("axis", -1))),
    "transpose": lambda a: np.transpose(a["x"], a.const("perm")),
    "reshape": lambda a: a["x"].reshape(a.const("shape")),
    "tile": lambda a: np.tile(a["x"], a.const("reps")),
    "concat": _concat,
    "slice_by_size": _slice_by_size,
    "slice_by_index": _slice_by_index,
    "split": _split,
    "expand_dims": _expand_dims,
    "squeeze": _squeeze,
    "scaled_dot_product_attention": _sdpa,
    "slice_update": _slice_update,
    "read_state": _read_state,
    "write_state": _write_state,
    "constexpr_affine_dequantize": decompress.affine_dequantize,
    "constexpr_blockwise_shift_scale": decompress.blockwise_shift_scale,
    "constexpr_lut_to_dense": decompress.lut_to_dense,
    "constexpr_sparse_to_dense": decompress.sparse_to_dense,
    "constexpr_sparse_blockwise_shift_scale": decompress.sparse_blockwise_shift_scale,
}
