"""Tensor layout: reshapes, permutations, repeats, joins, cuts and slices; no arithmetic, so no
fp16 error (coremltools `tensor_transformation.py`, `tensor_operation.py`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ops import sources as src
from app.mil.ops.common import MOVES
from app.mil.ops.record import (
    ANY_TENSOR,
    BOOL,
    INT,
    AneFacts,
    AneStatus,
    Arg,
    Family,
    Form,
    GraphUse,
    OpRecord,
    Seen,
    Trait,
)
from app.mil.types import TensorType

F = Family.LAYOUT
RESHAPES = MOVES | {Trait.SHAPE_ONLY}
# Outputs one split may make: far beyond any use, and a bound on the list of types a hostile
# count (num_splits 2^30 of an axis that long) would otherwise make.
MAX_SPLITS = 16384


def _transpose_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    perm = call.axes("perm", x.rank)
    if len(perm) != x.rank:
        raise call.fail("perm", f"needs {x.rank} axes, got {len(perm)}")
    return [TensorType(x.dtype, tuple(x.shape[p] for p in perm))]


def _reshape_type(call: Call) -> list[TensorType]:
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


def _tile_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    reps = call.const("reps")
    if len(reps) != x.rank or any(r < 1 for r in reps):
        raise call.fail("reps", f"needs {x.rank} positive repetitions, got {reps}")
    return [TensorType(x.dtype, tuple(d * r for d, r in zip(x.shape, reps, strict=True)))]


def _concat_type(call: Call) -> list[TensorType]:
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


def _concat(a: Args) -> np.ndarray:
    values = a.many("values")
    axis = int(a.const("axis")) % values[0].ndim
    if a.const("interleave", False):  # a0, b0, a1, b1, ... along the axis
        stacked = np.stack(values, axis=axis + 1)
        shape = list(values[0].shape)
        shape[axis] *= len(values)
        return stacked.reshape(shape)
    return np.concatenate(values, axis=axis)


def _split_type(call: Call) -> list[TensorType]:
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


def _split_count(params: Mapping[str, Any]) -> int | None:
    sizes = params.get("split_sizes")
    count = len(sizes) if isinstance(sizes, list) else params.get("num_splits") or 1
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_SPLITS:
        return None  # the op's own check refuses the count, naming its argument
    return count


def _split(a: Args) -> list[np.ndarray]:
    x = a["x"]
    axis = int(a.const("axis")) % x.ndim
    sizes = a.const("split_sizes")
    if sizes is None:
        count = int(a.const("num_splits"))
        sizes = [x.shape[axis] // count] * count
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _expand_dims_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    rank = x.rank + len(call.const("axes"))
    axes = call.axes("axes", rank)
    dims = iter(x.shape)
    return [TensorType(x.dtype, tuple(1 if i in axes else next(dims) for i in range(rank)))]


def _expand_dims(a: Args) -> np.ndarray:
    x = a["x"]
    rank = x.ndim + len(a.const("axes"))
    return np.expand_dims(x, tuple(ax % rank for ax in a.const("axes")))


def _squeeze_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    axes = call.axes("axes", x.rank, [i for i, d in enumerate(x.shape) if d == 1])
    if any(x.shape[a] != 1 for a in axes):
        raise call.fail("axes", f"can only squeeze dimensions of size 1 in {list(x.shape)}")
    return [TensorType(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))]


def _squeeze(a: Args) -> np.ndarray:
    x = a["x"]
    axes = a.const("axes")
    return np.squeeze(x, None if axes is None else tuple(ax % x.ndim for ax in axes))


def _slice_by_size_type(call: Call) -> list[TensorType]:
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


def _slice_by_size(a: Args) -> np.ndarray:
    x = a["x"]
    index = []
    for d, b, s in zip(x.shape, a.const("begin"), a.const("size"), strict=True):
        b = b % d if b < 0 else b
        index.append(slice(b, d if s == -1 else b + s))
    return x[tuple(index)]


_MASKS = ("begin_mask", "end_mask", "squeeze_mask")


def _slice_by_index_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    begin, end = call.const("begin"), call.const("end")
    stride = call.const("stride", [1] * x.rank)
    masks = {m: call.const(m, [False] * x.rank) for m in _MASKS}
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


def _slice_by_index(a: Args) -> np.ndarray:
    x = a["x"]
    rank = x.ndim
    begin, end = a.const("begin"), a.const("end")
    stride = a.const("stride", [1] * rank)
    begin_mask, end_mask, squeeze = (a.const(m, [False] * rank) for m in _MASKS)
    index: list[int | slice] = []
    for i in range(rank):
        if squeeze[i]:
            index.append(begin[i])
            continue
        b = None if begin_mask[i] else begin[i]
        e = None if end_mask[i] else end[i]
        index.append(slice(b, e, stride[i]))
    return x[tuple(index)]


def _slice_update_type(call: Call) -> list[TensorType]:
    """x with update written into x[begin:end:stride]; begin and end may be runtime values (a
    KV cache written at the current length), so only ranks and dtypes are checked here."""
    x, update = call.type("x"), call.type("update")
    for arg in ("begin", "end"):
        if call.type(arg).shape != (x.rank,):
            raise call.fail(arg, f"needs one index per axis of x: shape [{x.rank}]")
    if update.rank != x.rank or any(u > d for u, d in zip(update.shape, x.shape, strict=True)):
        raise call.fail("update", f"{update} does not fit into {x}")
    return [x]


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


def _x(**args: Arg) -> dict[str, Arg]:
    return {"x": Arg(ANY_TENSOR), **args}


_CONST_INT = Arg(INT, const=True)
_OPTIONAL_INT = Arg(INT, optional=True, const=True)
_OPTIONAL_BOOL = Arg(BOOL, optional=True, const=True)

RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "transpose",
        F,
        Form(_x(perm=_CONST_INT), _transpose_type),
        meaning=lambda a: np.transpose(a["x"], a.const("perm")),
        traits=MOVES,
        graph=GraphUse("permute axes by `perm`", 0.0),
        histogram={16: Seen(src.BASE, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "reshape",
        F,
        Form(_x(shape=_CONST_INT), _reshape_type),
        meaning=lambda a: a["x"].reshape(a.const("shape")),
        traits=RESHAPES,
        graph=GraphUse("reshape to `shape`", 0.0),
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "tile",
        F,
        Form(_x(reps=_CONST_INT), _tile_type),
        meaning=lambda a: np.tile(a["x"], a.const("reps")),
        traits=MOVES,
        graph=GraphUse("repeat `reps` times per axis", 0.0),
        histogram={17: Seen(src.BASE, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "concat",
        F,
        Form(
            {
                "values": Arg(ANY_TENSOR, variadic=True),
                "axis": _CONST_INT,
                "interleave": _OPTIONAL_BOOL,
            },
            _concat_type,
        ),
        meaning=_concat,
        traits=MOVES,
        graph=GraphUse("join `values` along `axis` (a list of references)", 0.0),
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "slice_by_size",
        F,
        Form(_x(begin=_CONST_INT, size=_CONST_INT), _slice_by_size_type),
        meaning=_slice_by_size,
        traits=MOVES,
        graph=GraphUse("x[begin : begin + size] per axis", 0.0),
    ),
    OpRecord(
        "slice_by_index",
        F,
        Form(
            _x(
                begin=_CONST_INT,
                end=_CONST_INT,
                stride=_OPTIONAL_INT,
                begin_mask=_OPTIONAL_BOOL,
                end_mask=_OPTIONAL_BOOL,
                squeeze_mask=_OPTIONAL_BOOL,
            ),
            _slice_by_index_type,
        ),
        meaning=_slice_by_index,
        traits=MOVES,
        graph=GraphUse("x[begin:end:stride] per axis, with masks", 0.0),
        histogram={16: Seen(src.BASE, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "split",
        F,
        Form(_x(num_splits=_OPTIONAL_INT, split_sizes=_OPTIONAL_INT, axis=_CONST_INT), _split_type),
        meaning=_split,
        traits=MOVES,
        outputs=_split_count,
        graph=GraphUse(
            "cut along `axis` into `num_splits` or `split_sizes` outputs: node.0, node.1, …", 0.0
        ),
        histogram={17: Seen(src.BASE, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "expand_dims",
        F,
        Form(_x(axes=_CONST_INT), _expand_dims_type),
        meaning=_expand_dims,
        traits=RESHAPES,
        graph=GraphUse("insert axes of size 1", 0.0),
        histogram={16: Seen(src.BASE, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "squeeze",
        F,
        Form(_x(axes=_OPTIONAL_INT), _squeeze_type),
        meaning=_squeeze,
        traits=RESHAPES,
        graph=GraphUse("remove axes of size 1", 0.0),
        histogram={16: Seen(src.BASE, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_DECODER)},
    ),
    OpRecord(
        "slice_update",
        F,
        Form(
            {
                "x": Arg("T"),
                "update": Arg("T"),
                "begin": Arg(INT),
                "end": Arg(INT),
                "stride": _OPTIONAL_INT,
            },
            _slice_update_type,
            {"T": ANY_TENSOR},
        ),
        since="ios18",
        meaning=_slice_update,
        traits=MOVES,
    ),
    # -- known from other programs: never built here --------------------------------------------
    OpRecord(
        "gather",
        F,
        ane=AneFacts(
            AneStatus.UNSUPPORTED,
            "not implemented on the ANE backend; index on the CPU, or use a one-hot matmul",
            f"{src.MIL_E}; {src.ANEFORGE_CAPABILITIES}",
        ),
        histogram={17: Seen(17, src.PARAKEET_DECODER)},
    ),
    OpRecord("gather_along_axis", F, histogram={17: Seen(17, src.PARAKEET_JOINT)}),
    OpRecord(
        "pad",
        F,
        histogram={16: Seen(src.BASE, src.SILERO_INT8), 17: Seen(src.BASE, src.PARAKEET_ENCODER)},
    ),
    OpRecord("stack", F, histogram={17: Seen(src.BASE, src.PARAKEET_ENCODER)}),
    OpRecord("range_1d", F, histogram={17: Seen(src.BASE, src.PARAKEET_PREPROCESSOR)}),
    OpRecord("identity", F, histogram={17: Seen(src.BASE, src.PARAKEET_PREPROCESSOR)}),
    OpRecord("shape", F, histogram={17: Seen(src.BASE, src.PARAKEET_PREPROCESSOR)}),
    OpRecord("fill_like", F, histogram={17: Seen(16, src.PUBLISHED)}),
    OpRecord("upsample_bilinear", F, histogram={17: Seen(16, src.PUBLISHED)}),
    OpRecord("upsample_nearest_neighbor", F, histogram={17: Seen(src.BASE, src.PUBLISHED)}),
)
