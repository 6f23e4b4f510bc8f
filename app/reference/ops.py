"""The reference semantics of every MIL op the builder supports, as NumPy: one table, one place.

Each function receives an op's arguments (arrays in their stored dtype, const arguments as plain
Python) and returns the exact-as-practical result; the executor rounds it to the op's declared
output dtype. Elementwise ops compute in float32: on fp16 inputs a product is exact there and the
one rounding to fp16 dominates. Accumulating ops (reductions, softmax, matmul, conv, attention)
accumulate in float64, so each op's result is its correctly rounded value whatever the summation
order: the reference then measures fp16 *storage* error, which the kernel controls, and not a
particular device's accumulator (an fp32 accumulator differs by ~n·2⁻²⁴, far below fp16's 2⁻¹¹).
Semantics follow the coremltools op definitions (e.g. scaled_dot_product_attention divides by
sqrt(E) itself; concat with interleave alternates its inputs along the axis).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping

import numpy as np

from app.mil.ir import Input, Operation, Var


class Args:
    """An op's arguments during execution: arrays by argument name, consts as Python values."""

    def __init__(
        self,
        op: Operation,
        values: MutableMapping[str, np.ndarray],
        states: MutableMapping[str, np.ndarray],
    ):
        self.op, self._values, self.states = op, values, states

    def has(self, arg: str) -> bool:
        return arg in self.op.inputs

    def __getitem__(self, arg: str) -> np.ndarray:
        var = self.op.inputs[arg]
        assert isinstance(var, Var)
        return self._values[var.name]

    def many(self, arg: str) -> list[np.ndarray]:
        value: Input = self.op.inputs[arg]
        return [self._values[v.name] for v in (value if isinstance(value, tuple) else (value,))]

    def const(self, arg: str, default=None):
        if arg not in self.op.inputs:
            return default
        value = self[arg]
        return value if isinstance(value, str) else np.asarray(value).tolist()

    def state_name(self, arg: str) -> str:
        var = self.op.inputs[arg]
        assert isinstance(var, Var)
        return var.name

    def f32(self, arg: str) -> np.ndarray:
        return _compute(self[arg], np.float32)

    def f64(self, arg: str) -> np.ndarray:
        return _compute(self[arg], np.float64)


def _compute(a: np.ndarray, dtype: type) -> np.ndarray:
    """Float inputs widen to the compute dtype; integer and bool arrays stay exact (int64)."""
    a = np.asarray(a)
    return a.astype(dtype if a.dtype.kind == "f" else np.int64)


def _binary(fn: Callable) -> Callable[[Args], np.ndarray]:
    return lambda a: fn(a.f32("x"), a.f32("y"))


def _real_div(a: Args) -> np.ndarray:
    x, y = a.f32("x"), a.f32("y")
    if x.dtype.kind == "i":  # integer real_div: true division, truncated when stored as int32
        return np.true_divide(x, y)
    return x / y


def _rsqrt(a: Args) -> np.ndarray:
    return 1 / np.sqrt(a.f32("x") + np.float32(a.const("epsilon", 1e-12)))


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
        y += np.einsum("ngc...,goc->ngo...", patch, wg[(..., *k)])
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


def _read_state(a: Args) -> np.ndarray:
    return a.states[a.state_name("input")].copy()


def _write_state(a: Args) -> None:
    a.states[a.state_name("input")] = np.array(a["data"])


OpFn = Callable[[Args], np.ndarray | None]

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
    "expand_dims": _expand_dims,
    "squeeze": _squeeze,
    "scaled_dot_product_attention": _sdpa,
    "read_state": _read_state,
    "write_state": _write_state,
}
