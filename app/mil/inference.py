"""Type inference of the MIL ops the builder supports: each rule reads an op application (`Call`)
and gives its output types, or refuses it naming the argument at fault. The declarations that
pair each op with its rule and arguments are app/mil/ops.py."""

from __future__ import annotations

import math

from app.mil.call import Call
from app.mil.types import DType, TensorType


def _broadcast(a: tuple[int, ...], b: tuple[int, ...], call: Call) -> tuple[int, ...]:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise call.fail("y", f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(da, db))
    return tuple(reversed(out))


def _elementwise(call: Call) -> list[TensorType]:
    x, y = call.type("x"), call.type("y")
    return [TensorType(x.dtype, _broadcast(x.shape, y.shape, call))]


def _same(call: Call) -> list[TensorType]:
    return [call.type("x")]


def _reduce(call: Call) -> list[TensorType]:
    x = call.type("x")
    axes = call.axes("axes", x.rank, list(range(x.rank)))
    if call.const("keep_dims", False):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorType(x.dtype, shape)]


def _softmax(call: Call) -> list[TensorType]:
    call.axes("axis", call.type("x").rank)
    return _same(call)


_CAST_TARGETS = {"fp16": DType.FP16, "fp32": DType.FP32, "int32": DType.INT32, "bool": DType.BOOL}


def _cast(call: Call) -> list[TensorType]:
    name = call.const("dtype")
    if name not in _CAST_TARGETS:
        raise call.fail("dtype", f"cannot cast to {name!r}; one of {sorted(_CAST_TARGETS)}")
    return [TensorType(_CAST_TARGETS[name], call.type("x").shape)]


def _conv(call: Call) -> list[TensorType]:
    x, w = call.type("x"), call.type("weight")
    n_spatial = x.rank - 2
    if n_spatial not in (1, 2, 3) or w.rank != x.rank:
        raise call.fail("weight", f"rank {w.rank} weight for a rank {x.rank} input")
    groups = call.const("groups", 1)
    if groups < 1 or x.shape[1] % groups or w.shape[0] % groups:
        raise call.fail("groups", f"{groups} groups do not divide the channels")
    if x.shape[1] // groups != w.shape[1]:
        raise call.fail(
            "weight", f"C_in / groups = {x.shape[1]}/{groups} != weight[1] ({w.shape[1]})"
        )
    if call.has("bias") and call.type("bias").shape != (w.shape[0],):
        raise call.fail("bias", f"shape {list(call.type('bias').shape)} != [{w.shape[0]}]")
    strides = call.const("strides", [1] * n_spatial)
    dilations = call.const("dilations", [1] * n_spatial)
    pad_type = call.const("pad_type", "valid")
    pad = (
        call.const("pad", [0] * (2 * n_spatial)) if pad_type == "custom" else [0] * (2 * n_spatial)
    )
    if pad_type not in ("valid", "custom", "same"):
        raise call.fail("pad_type", f"{pad_type!r} is not valid, custom or same")
    if len(strides) != n_spatial or len(dilations) != n_spatial or len(pad) != 2 * n_spatial:
        raise call.fail("strides", "strides/dilations/pad lengths do not match the spatial rank")
    if min(strides) < 1 or min(dilations) < 1 or min(pad, default=0) < 0:
        raise call.fail("strides", "strides and dilations must be >= 1 and pads >= 0")
    spatial = []
    for i, size in enumerate(x.shape[2:]):
        if pad_type == "same":
            spatial.append(-(-size // strides[i]))
            continue
        k = dilations[i] * (w.shape[2 + i] - 1) + 1
        out = (size + pad[2 * i] + pad[2 * i + 1] - k) // strides[i] + 1
        if out < 1:
            raise call.fail("weight", f"kernel {k} is larger than the padded input {size}")
        spatial.append(out)
    return [TensorType(x.dtype, (x.shape[0], w.shape[0], *spatial))]


def _matmul(call: Call) -> list[TensorType]:
    x, y = list(call.type("x").shape), list(call.type("y").shape)
    if len(x) < 2 or len(y) < 2:
        raise call.fail("x", "matmul needs tensors of rank >= 2")
    if call.const("transpose_x", False):
        x[-2], x[-1] = x[-1], x[-2]
    if call.const("transpose_y", False):
        y[-2], y[-1] = y[-1], y[-2]
    if x[-1] != y[-2]:
        raise call.fail("y", f"inner dimensions differ: {x[-1]} vs {y[-2]}")
    batch = _broadcast(tuple(x[:-2]), tuple(y[:-2]), call)
    return [TensorType(call.type("x").dtype, (*batch, x[-2], y[-1]))]


def _transpose(call: Call) -> list[TensorType]:
    x = call.type("x")
    perm = call.axes("perm", x.rank)
    if len(perm) != x.rank:
        raise call.fail("perm", f"needs {x.rank} axes, got {len(perm)}")
    return [TensorType(x.dtype, tuple(x.shape[p] for p in perm))]


def _reshape(call: Call) -> list[TensorType]:
    x = call.type("x")
    shape = list(call.const("shape"))
    if shape.count(-1) > 1 or any(d == 0 or d < -1 for d in shape):
        raise call.fail("shape", f"invalid target shape {shape}")
    known = math.prod(d for d in shape if d != -1)  # Python ints: no int64 overflow
    if -1 in shape:
        if known == 0 or x.size % known:
            raise call.fail("shape", f"cannot reshape {list(x.shape)} to {shape}")
        shape[shape.index(-1)] = x.size // known
    if math.prod(shape) != x.size:
        raise call.fail("shape", f"cannot reshape {list(x.shape)} to {shape}")
    return [TensorType(x.dtype, tuple(shape))]


def _tile(call: Call) -> list[TensorType]:
    x = call.type("x")
    reps = call.const("reps")
    if len(reps) != x.rank or any(r < 1 for r in reps):
        raise call.fail("reps", f"needs {x.rank} positive repetitions, got {reps}")
    return [TensorType(x.dtype, tuple(d * r for d, r in zip(x.shape, reps, strict=True)))]


def _concat(call: Call) -> list[TensorType]:
    values = call.types("values")
    first = values[0]
    (axis,) = call.axes("axis", first.rank)
    interleave = call.const("interleave", False)
    for v in values[1:]:
        same_rest = all(
            a == b for i, (a, b) in enumerate(zip(v.shape, first.shape, strict=False)) if i != axis
        )
        if v.rank != first.rank or v.dtype != first.dtype or not same_rest:
            raise call.fail("values", f"{v} does not concatenate with {first} on axis {axis}")
        if interleave and v.shape != first.shape:
            raise call.fail("values", "interleave needs equal shapes")
    shape = list(first.shape)
    shape[axis] = sum(v.shape[axis] for v in values)
    return [TensorType(first.dtype, tuple(shape))]


def _slice_by_size(call: Call) -> list[TensorType]:
    x = call.type("x")
    begin, size = call.const("begin"), call.const("size")
    if len(begin) != x.rank or len(size) != x.rank:
        raise call.fail("begin", f"begin and size need {x.rank} entries")
    shape = []
    for d, b, s in zip(x.shape, begin, size, strict=True):
        b = b % d if -d <= b < 0 else b
        s = d - b if s == -1 else s
        if not (0 <= b < d and s >= 1 and b + s <= d):
            raise call.fail("size", f"slice [{b}, {b + s}) is outside a dimension of {d}")
        shape.append(s)
    return [TensorType(x.dtype, tuple(shape))]


def _slice_by_index(call: Call) -> list[TensorType]:
    x = call.type("x")
    begin, end = call.const("begin"), call.const("end")
    stride = call.const("stride", [1] * x.rank)
    masks = {m: call.const(m, [False] * x.rank) for m in ("begin_mask", "end_mask", "squeeze_mask")}
    if any(len(v) != x.rank for v in (begin, end, stride, *masks.values())):
        raise call.fail("begin", f"begin, end, stride and masks need {x.rank} entries")
    shape = []
    for i, d in enumerate(x.shape):
        if stride[i] == 0:
            raise call.fail("stride", "a stride of 0")
        if masks["squeeze_mask"][i]:
            if not -d <= begin[i] < d:
                raise call.fail("begin", f"index {begin[i]} is outside a dimension of {d}")
            continue
        b = None if masks["begin_mask"][i] else begin[i]
        e = None if masks["end_mask"][i] else end[i]
        n = len(range(*slice(b, e, stride[i]).indices(d)))
        if n < 1:
            raise call.fail("end", f"slice [{b}:{e}:{stride[i]}] of a dimension of {d} is empty")
        shape.append(n)
    if not shape:
        raise call.fail("squeeze_mask", "squeezes every dimension away")
    return [TensorType(x.dtype, tuple(shape))]


# Outputs one split may make: far beyond any use, and a bound on the list of types a hostile
# count (num_splits 2^30 of an axis that long) would otherwise make.
MAX_SPLITS = 16384


def _split(call: Call) -> list[TensorType]:
    x = call.type("x")
    (axis,) = call.axes("axis", x.rank)
    sizes, count = call.const("split_sizes"), call.const("num_splits")
    if ((count or 0) if sizes is None else len(sizes)) > MAX_SPLITS:
        raise call.fail("num_splits", f"more than {MAX_SPLITS} outputs")
    if sizes is None:
        if count is None or count < 1 or x.shape[axis] % count:
            raise call.fail("num_splits", f"{count} does not divide a dimension of {x.shape[axis]}")
        sizes = [x.shape[axis] // count] * count
    if any(s < 1 for s in sizes) or sum(sizes) != x.shape[axis]:
        raise call.fail("split_sizes", f"{sizes} do not add up to {x.shape[axis]}")
    if count is not None and count != len(sizes):
        raise call.fail("num_splits", f"{count} splits but {len(sizes)} sizes")
    shapes = [list(x.shape) for _ in sizes]
    for shape, size in zip(shapes, sizes, strict=True):
        shape[axis] = size
    return [TensorType(x.dtype, tuple(shape)) for shape in shapes]


_GELU_MODES = ("EXACT", "TANH_APPROXIMATION", "SIGMOID_APPROXIMATION")


def _gelu(call: Call) -> list[TensorType]:
    if call.const("mode", "EXACT") not in _GELU_MODES:
        raise call.fail("mode", f"one of {', '.join(_GELU_MODES)}")
    return _same(call)


def _expand_dims(call: Call) -> list[TensorType]:
    x = call.type("x")
    rank = x.rank + len(call.const("axes"))
    axes = call.axes("axes", rank)
    dims = iter(x.shape)
    return [TensorType(x.dtype, tuple(1 if i in axes else next(dims) for i in range(rank)))]


def _squeeze(call: Call) -> list[TensorType]:
    x = call.type("x")
    axes = call.axes("axes", x.rank, [i for i, d in enumerate(x.shape) if d == 1])
    if any(x.shape[a] != 1 for a in axes):
        raise call.fail("axes", f"can only squeeze dimensions of size 1 in {list(x.shape)}")
    return [TensorType(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))]


def _sdpa(call: Call) -> list[TensorType]:
    q, k, v = call.type("query"), call.type("key"), call.type("value")
    if q.rank < 3 or k.rank != q.rank or v.rank != q.rank:
        raise call.fail("query", "query, key and value need the same rank, at least 3")
    if q.shape[-1] != k.shape[-1]:
        raise call.fail("key", f"embedding {k.shape[-1]} != query embedding {q.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise call.fail("value", f"length {v.shape[-2]} != key length {k.shape[-2]}")
    batch = _broadcast(q.shape[:-2], _broadcast(k.shape[:-2], v.shape[:-2], call), call)
    if call.has("attn_mask"):
        _broadcast(call.type("attn_mask").shape, (*batch, q.shape[-2], k.shape[-2]), call)
    return [TensorType(q.dtype, (*batch, q.shape[-2], v.shape[-1]))]


def _read_state(call: Call) -> list[TensorType]:
    return [call.type("input")]


def _write_state(call: Call) -> list[TensorType]:
    if call.type("data") != call.type("input"):
        raise call.fail(
            "data", f"{call.type('data')} does not match the state {call.type('input')}"
        )
    return []


def _slice_update(call: Call) -> list[TensorType]:
    """x with update written into x[begin:end:stride]; begin and end may be runtime values (a
    KV cache written at the current length), so only ranks and dtypes are checked here."""
    x, update = call.type("x"), call.type("update")
    for arg in ("begin", "end"):
        if call.type(arg).shape != (x.rank,):
            raise call.fail(arg, f"needs one index per axis of x: shape [{x.rank}]")
    if update.rank != x.rank or any(u > d for u, d in zip(update.shape, x.shape, strict=True)):
        raise call.fail("update", f"{update} does not fit into {x}")
    return [x]
