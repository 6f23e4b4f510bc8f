"""Slices: reading a window of a tensor and writing one into it (coremltools
`tensor_transformation.py`, iOS18 `slice_update`); no arithmetic, so no fp16 error."""

from __future__ import annotations

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ops import sources as src
from app.mil.ops.common import CONST_INT, MOVES, OPTIONAL_BOOL, OPTIONAL_INT, any_x, swept
from app.mil.ops.record import (
    ANY_TENSOR,
    INT,
    Arg,
    Family,
    Form,
    GraphUse,
    OpRecord,
    Seen,
)
from app.mil.types import TensorType

F = Family.LAYOUT


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


RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "slice_by_size",
        F,
        Form(any_x(begin=CONST_INT, size=CONST_INT), _slice_by_size_type),
        meaning=_slice_by_size,
        traits=MOVES,
        graph=GraphUse("x[begin : begin + size] per axis", 0.0),
        ane=swept(0.0),
    ),
    OpRecord(
        "slice_by_index",
        F,
        Form(
            any_x(
                begin=CONST_INT,
                end=CONST_INT,
                stride=OPTIONAL_INT,
                begin_mask=OPTIONAL_BOOL,
                end_mask=OPTIONAL_BOOL,
                squeeze_mask=OPTIONAL_BOOL,
            ),
            _slice_by_index_type,
        ),
        meaning=_slice_by_index,
        traits=MOVES,
        graph=GraphUse("x[begin:end:stride] per axis, with masks", 0.0),
        histogram={16: Seen(src.BASE, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)},
        ane=swept(0.0),
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
                "stride": OPTIONAL_INT,
            },
            _slice_update_type,
            {"T": ANY_TENSOR},
        ),
        since="ios18",
        meaning=_slice_update,
        traits=MOVES,
    ),
)
