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
from app.mil.ops.common import CONST_INT, MOVES, OPTIONAL_BOOL, OPTIONAL_INT, any_x, swept
from app.mil.ops.record import (
    ANY_TENSOR,
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
from app.mil.types import DType, TensorType

F = Family.LAYOUT
QUANTIZED = frozenset({DType.INT8, DType.UINT8})  # an activation quantize's output dtypes
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


def _stack_type(call: Call) -> list[TensorType]:
    values = call.types("values")
    first = values[0]
    if any(v != first for v in values[1:]):
        raise call.fail("values", f"needs tensors of one type, got {', '.join(map(str, values))}")
    axis = call.const("axis")
    if not -first.rank - 1 <= axis <= first.rank:
        raise call.fail("axis", f"axis {axis} is out of range for rank {first.rank + 1}")
    shape = list(first.shape)
    shape.insert(axis % (first.rank + 1), len(values))
    return [TensorType(first.dtype, tuple(shape))]


RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "transpose",
        F,
        Form(any_x(perm=CONST_INT), _transpose_type),
        meaning=lambda a: np.transpose(a["x"], a.const("perm")),
        traits=MOVES,
        graph=GraphUse("permute axes by `perm`", 0.0),
        histogram={16: Seen(src.BASE, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)},
        ane=swept(0.0),
    ),
    OpRecord(
        "reshape",
        F,
        # iOS17 added the 8-bit integers to x's dtypes (coremltools iOS17
        # `tensor_transformation.py`: reshape's T also holds int8 and uint8, and int16 and uint16,
        # which the IR has no dtype for), so a quantized tensor reshapes as integers
        # (int_op_canonicalization); before it, the iOS15 form. The ANE facts below are of the
        # sweep's fp16 reshape: of an int8 or uint8 one on the ANE there is no report (no source)
        Form({"x": Arg(ANY_TENSOR | QUANTIZED), "shape": CONST_INT}, _reshape_type),
        earlier=Form(any_x(shape=CONST_INT), _reshape_type, until="ios16"),
        meaning=lambda a: a["x"].reshape(a.const("shape")),
        traits=RESHAPES,
        graph=GraphUse("reshape to `shape`", 0.0),
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
        ane=swept(0.0),
    ),
    OpRecord(
        "tile",
        F,
        Form(any_x(reps=CONST_INT), _tile_type),
        meaning=lambda a: np.tile(a["x"], a.const("reps")),
        traits=MOVES,
        graph=GraphUse("repeat `reps` times per axis", 0.0),
        histogram={17: Seen(src.BASE, src.PARAKEET_ENCODER)},
        ane=swept(0.0),
    ),
    OpRecord(
        "concat",
        F,
        Form(
            {
                "values": Arg(ANY_TENSOR, variadic=True),
                "axis": CONST_INT,
                "interleave": OPTIONAL_BOOL,
            },
            _concat_type,
        ),
        meaning=_concat,
        traits=MOVES,
        graph=GraphUse("join `values` along `axis` (a list of references)", 0.0),
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
        ane=swept(0.0),
    ),
    OpRecord(
        "split",
        F,
        Form(any_x(num_splits=OPTIONAL_INT, split_sizes=OPTIONAL_INT, axis=CONST_INT), _split_type),
        meaning=_split,
        traits=MOVES,
        outputs=_split_count,
        graph=GraphUse(
            "cut along `axis` into `num_splits` or `split_sizes` outputs: node.0, node.1, …", 0.0
        ),
        histogram={17: Seen(src.BASE, src.PARAKEET_ENCODER)},
        ane=swept(0.0),
    ),
    OpRecord(
        "expand_dims",
        F,
        Form(any_x(axes=CONST_INT), _expand_dims_type),
        meaning=_expand_dims,
        traits=RESHAPES,
        graph=GraphUse("insert axes of size 1", 0.0),
        histogram={16: Seen(src.BASE, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)},
        ane=swept(0.0),
    ),
    OpRecord(
        "squeeze",
        F,
        Form(any_x(axes=OPTIONAL_INT), _squeeze_type),
        meaning=_squeeze,
        traits=RESHAPES,
        graph=GraphUse("remove axes of size 1", 0.0),
        histogram={16: Seen(src.BASE, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_DECODER)},
        ane=swept(0.0),
    ),
    OpRecord(
        "stack",
        F,
        Form({"values": Arg(ANY_TENSOR, variadic=True), "axis": CONST_INT}, _stack_type),
        meaning=lambda a: np.stack(a.many("values"), axis=int(a.const("axis"))),
        traits=MOVES,
        graph=GraphUse("join equal-shaped `values` along a new `axis` (a list of references)", 0.0),
        ane=swept(0.0),
        histogram={17: Seen(src.BASE, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "identity",
        F,
        Form(any_x(), lambda call: [call.type("x")]),
        meaning=lambda a: a["x"],
        traits=RESHAPES,
        graph=GraphUse("x unchanged (noop_elimination removes it)", 0.0),
        ane=AneFacts(
            AneStatus.REPORTED_FAILING,
            "ANEForge's sweep finds a program of one identity failing the ANE compile "
            "(compile-walled); the pass pipeline removes identities",
            src.ANEFORGE_SWEEP,
        ),
        histogram={17: Seen(src.BASE, src.PARAKEET_PREPROCESSOR)},
    ),
    # -- known from other programs: never built here --------------------------------------------
    OpRecord("range_1d", F, histogram={17: Seen(src.BASE, src.PARAKEET_PREPROCESSOR)}),
    OpRecord("shape", F, histogram={17: Seen(src.BASE, src.PARAKEET_PREPROCESSOR)}),
    OpRecord("fill_like", F, histogram={17: Seen(16, src.PUBLISHED)}),
)
