"""Indexed reads and writes: gathers, scatter, one_hot and band_part (coremltools
`scatter_gather.py`, `tensor_operation.py`; iOS17 forms).

Indices: iOS17 takes only 0 <= i < size and leaves any other index undefined ("memory safe").
The meanings here count a negative index from the end, as the iOS15/16 ops and ONNX do, and
clamp what is still out of range to the nearest end, so that seeded random indices always
give an answer; an importer writes valid ones.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ops import sources as src
from app.mil.ops.common import MOVES, OPTIONAL_INT, U, not_on_ane
from app.mil.ops.record import (
    ANY_TENSOR,
    BOOL,
    INT,
    STR,
    AneFacts,
    AneStatus,
    Arg,
    Family,
    Form,
    GraphUse,
    OpRecord,
    Seen,
)
from app.mil.types import DType, TensorType

F = Family.LAYOUT
_VALUES = frozenset(
    {DType.FP16, DType.FP32, DType.INT32, DType.INT16, DType.UINT16, DType.INT8, DType.UINT8}
)
_INDICES = frozenset({DType.INT32, DType.INT16, DType.UINT16, DType.INT8, DType.UINT8})
_GATHER_T = {"T": _VALUES, "I": _INDICES}
_VALIDATE = Arg(BOOL, optional=True, const=True)  # iOS17: check indices at run time; no effect here
_SCATTER_MODES: dict[str, Callable] = {
    "update": np.ndarray.__setitem__,
    "add": np.add.at,
    "sub": np.subtract.at,
    "mul": np.multiply.at,
    "div": np.divide.at,
    "max": np.maximum.at,
    "min": np.minimum.at,
}
_GATHERS_ON_CPU = (
    "index on the CPU, or (with a small table and constant indices) use a one-hot matmul"
)


def indices(values: np.ndarray, size: int) -> np.ndarray:
    """Indices as the meanings read them: negative from the end, the rest clamped."""
    found = np.asarray(values).astype(np.int64)
    return np.clip(np.where(found < 0, found + size, found), 0, size - 1)


def _gather_type(call: Call) -> list[TensorType]:
    x, idx = call.type("x"), call.type("indices")
    (axis,) = call.axes("axis", x.rank, 0)
    batch = call.const("batch_dims", 0)
    if not 0 <= batch <= min(axis, idx.rank) or x.shape[:batch] != idx.shape[:batch]:
        raise call.fail(
            "batch_dims", f"{batch} leading axes are not shared by x {x} and indices {idx}"
        )
    return [TensorType(x.dtype, (*x.shape[:axis], *idx.shape[batch:], *x.shape[axis + 1 :]))]


def _gather(a: Args) -> np.ndarray:
    x, batch = a["x"], int(a.const("batch_dims", 0))
    axis = int(a.const("axis", 0)) % x.ndim
    idx = indices(a["indices"], x.shape[axis])
    if batch == 0:
        return np.take(x, idx, axis=axis)
    parts = [np.take(x[b], idx[b], axis=axis - batch) for b in np.ndindex(*x.shape[:batch])]
    stacked = np.stack(parts)
    return stacked.reshape(*x.shape[:batch], *stacked.shape[1:])


def _along_type(call: Call, data: str) -> tuple[TensorType, TensorType, int]:
    x, idx = call.type(data), call.type("indices")
    (axis,) = call.axes("axis", x.rank, 0)
    if idx.rank != x.rank or any(
        i != axis and n != d for i, (n, d) in enumerate(zip(idx.shape, x.shape, strict=True))
    ):
        raise call.fail("indices", f"{idx} must match {x} on every axis but {axis}")
    return x, idx, axis


def _gather_along_type(call: Call) -> list[TensorType]:
    x, idx, _ = _along_type(call, "x")
    return [TensorType(x.dtype, idx.shape)]


def _gather_along(a: Args) -> np.ndarray:
    x = a["x"]
    axis = int(a.const("axis", 0)) % x.ndim
    return np.take_along_axis(x, indices(a["indices"], x.shape[axis]), axis=axis)


def _gather_nd_type(call: Call) -> list[TensorType]:
    x, idx = call.type("x"), call.type("indices")
    batch = call.const("batch_dims", 0)
    if idx.rank < 1 or not 0 <= batch < idx.rank or x.shape[:batch] != idx.shape[:batch]:
        raise call.fail("batch_dims", f"{batch} leading axes are not shared by {x} and {idx}")
    depth = idx.shape[-1]
    if not 1 <= depth <= x.rank - batch:
        raise call.fail("indices", f"the last axis ({depth}) indexes past x's rank {x.rank}")
    return [TensorType(x.dtype, (*idx.shape[:-1], *x.shape[batch + depth :]))]


def _gather_nd(a: Args) -> np.ndarray:
    x, batch = a["x"], int(a.const("batch_dims", 0))
    idx = np.asarray(a["indices"])
    depth = idx.shape[-1]
    if batch == 0:
        where = tuple(indices(idx[..., j], x.shape[j]) for j in range(depth))
        return x[where]
    parts = []
    for b in np.ndindex(*x.shape[:batch]):
        where = tuple(indices(idx[b][..., j], x.shape[batch + j]) for j in range(depth))
        parts.append(x[b][where])
    stacked = np.stack(parts)
    return stacked.reshape(*x.shape[:batch], *stacked.shape[1:])


def _scatter_type(call: Call) -> list[TensorType]:
    data, idx, _ = _along_type(call, "data")
    if call.type("updates").shape != idx.shape:
        raise call.fail("updates", f"needs the indices' shape {list(idx.shape)}")
    mode = call.const("mode", "add")
    if mode not in _SCATTER_MODES:
        raise call.fail("mode", f"{mode!r} is not one of {', '.join(_SCATTER_MODES)}")
    return [data]


def _scatter(a: Args) -> np.ndarray:
    """Each update combined into the element its index names (`mode`); with "update", of
    several updates to one element the last in index order stays."""
    out = np.array(a["data"], dtype=np.result_type(a["data"], a["updates"]))
    axis = int(a.const("axis", 0)) % out.ndim
    where: list[np.ndarray] = list(np.indices(a["indices"].shape))
    where[axis] = indices(a["indices"], out.shape[axis])
    _SCATTER_MODES[a.const("mode", "add")](out, tuple(where), a["updates"])
    return out


def _scatter_nd_type(call: Call) -> list[TensorType]:
    data, idx, updates = call.type("data"), call.type("indices"), call.type("updates")
    depth = idx.shape[-1] if idx.rank else 0
    if not 1 <= depth <= data.rank:
        raise call.fail("indices", f"the last axis ({depth}) must index 1 to {data.rank} axes")
    expected = (*idx.shape[:-1], *data.shape[depth:])
    if updates.shape != expected:
        raise call.fail("updates", f"needs indices' leading axes then data's rest {list(expected)}")
    mode = call.const("mode", "add")
    if mode not in _SCATTER_MODES:
        raise call.fail("mode", f"{mode!r} is not one of {', '.join(_SCATTER_MODES)}")
    return [data]


def _scatter_nd(a: Args) -> np.ndarray:
    """Each update (a slice of data's trailing axes) combined into the slice the last axis of
    its index names (`mode`); with "update", of several to one slice the last stays."""
    out = np.array(a["data"], dtype=np.result_type(a["data"], a["updates"]))
    idx = np.asarray(a["indices"])
    depth = idx.shape[-1]
    where = tuple(indices(idx[..., d], out.shape[d]) for d in range(depth))
    _SCATTER_MODES[a.const("mode", "add")](out, where, a["updates"])
    return out


def _one_hot_type(call: Call) -> list[TensorType]:
    idx = call.type("indices")
    axis = call.const("axis", -1)
    if not -idx.rank - 1 <= axis <= idx.rank:
        raise call.fail("axis", f"axis {axis} is out of range for rank {idx.rank + 1}")
    size = call.const("one_hot_vector_size")
    if not isinstance(size, int) or size < 1:
        raise call.fail("one_hot_vector_size", f"needs a positive size, got {size}")
    dtypes = {call.type(v).dtype for v in ("on_value", "off_value") if call.has(v)}
    if len(dtypes) > 1:
        raise call.fail("off_value", "on_value and off_value need one dtype")
    shape = list(idx.shape)
    shape.insert(axis % (idx.rank + 1), size)
    return [TensorType(dtypes.pop() if dtypes else DType.INT32, tuple(shape))]


def _one_hot(a: Args) -> np.ndarray:
    """An index outside [0, size) gives a row of off_value (ONNX counts negative ones from
    the end: an importer adds the size first)."""
    idx = np.asarray(a["indices"]).astype(np.int64)
    size = int(a.const("one_hot_vector_size"))
    hot = idx[..., None] == np.arange(size)
    out = np.where(hot, a.const("on_value", 1), a.const("off_value", 0))
    return np.moveaxis(out, -1, int(a.const("axis", -1)) % (idx.ndim + 1))


def _band_part_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    if x.rank < 2:
        raise call.fail("x", f"needs rank 2 or more (the band is of the last two axes), got {x}")
    return [x]


def _band_part(a: Args) -> np.ndarray:
    x = a["x"]
    lower, upper = int(a.const("lower", -1)), int(a.const("upper", -1))
    rows, cols = np.indices(x.shape[-2:])
    keep = ((lower < 0) | (rows - cols <= lower)) & ((upper < 0) | (cols - rows <= upper))
    return np.where(keep, x, np.zeros((), x.dtype))


RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "gather",
        F,
        Form(
            {
                "x": Arg("T"),
                "indices": Arg("I"),
                "axis": OPTIONAL_INT,
                "batch_dims": OPTIONAL_INT,
                "validate_indices": _VALIDATE,
            },
            _gather_type,
            _GATHER_T,
        ),
        meaning=_gather,
        traits=MOVES,
        graph=GraphUse(
            "slices of x along `axis` at `indices` (batch_dims leading axes shared)", 0.0
        ),
        ane=AneFacts(
            AneStatus.UNSUPPORTED,
            f"not implemented on the ANE backend; {_GATHERS_ON_CPU}",
            f"{src.MIL_E}; {src.ANEFORGE_CAPABILITIES}; {src.ANEFORGE_SWEEP}",
        ),
        histogram={17: Seen(17, src.PARAKEET_DECODER)},
    ),
    OpRecord(
        "gather_along_axis",
        F,
        Form(
            {
                "x": Arg("T"),
                "indices": Arg("I"),
                "axis": OPTIONAL_INT,
                "validate_indices": _VALIDATE,
            },
            _gather_along_type,
            _GATHER_T,
        ),
        meaning=_gather_along,
        traits=MOVES,
        graph=GraphUse("x[..., indices[i], ...] along `axis` (indices of x's rank)", 0.0),
        ane=not_on_ane(_GATHERS_ON_CPU),
        histogram={17: Seen(17, src.PARAKEET_JOINT)},
    ),
    OpRecord(
        "gather_nd",
        F,
        Form(
            {
                "x": Arg("T"),
                "indices": Arg("I"),
                "batch_dims": OPTIONAL_INT,
                "validate_indices": _VALIDATE,
            },
            _gather_nd_type,
            _GATHER_T,
        ),
        meaning=_gather_nd,
        traits=MOVES,
        graph=GraphUse("slices of x at the coordinates in indices' last axis", 0.0),
        ane=not_on_ane(_GATHERS_ON_CPU),
    ),
    OpRecord(
        "scatter_along_axis",
        F,
        Form(
            {
                "data": Arg("T"),
                "indices": Arg(INT),
                "updates": Arg("T"),
                "axis": OPTIONAL_INT,
                "mode": Arg(STR, optional=True, const=True),
                "validate_indices": _VALIDATE,
            },
            _scatter_type,
            {"T": frozenset({DType.FP16, DType.FP32, DType.INT32})},
        ),
        meaning=_scatter,
        graph=GraphUse(
            "data with updates combined in at indices along `axis` (mode: update, add, sub, "
            "mul, div, max, min; add unless given)",
            2 * U,
        ),
        ane=not_on_ane("ANEForge finds no scatter-write path on the ANE: scatter on the CPU"),
    ),
    OpRecord(
        "scatter_nd",
        F,
        Form(
            {
                "data": Arg("T"),
                "indices": Arg(INT),
                "updates": Arg("T"),
                "mode": Arg(STR, optional=True, const=True),
                "validate_indices": _VALIDATE,
            },
            _scatter_nd_type,
            {"T": frozenset({DType.FP16, DType.FP32, DType.INT32})},
        ),
        meaning=_scatter_nd,
        graph=GraphUse(
            "data with updates combined in at the slices the last axis of indices names (mode: "
            "update, add, sub, mul, div, max, min; add unless given)",
            2 * U,
        ),
        ane=not_on_ane("ANEForge finds no scatter-write path on the ANE: scatter on the CPU"),
    ),
    OpRecord(
        "one_hot",
        F,
        Form(
            {
                "indices": Arg(INT),
                # a tensor in coremltools; a const here, as the output's shape depends on it
                "one_hot_vector_size": Arg(INT, const=True),
                "axis": OPTIONAL_INT,
                "on_value": Arg("T", optional=True, const=True),
                "off_value": Arg("T", optional=True, const=True),
            },
            _one_hot_type,
            {"T": ANY_TENSOR},
        ),
        meaning=_one_hot,
        graph=GraphUse(
            "on_value where an index names the position, off_value elsewhere, along a new "
            "`axis` (int32 1 and 0 unless given)",
            0.0,
        ),
        ane=not_on_ane("compare the indices with a constant range (equal) and select"),
    ),
    OpRecord(
        "band_part",
        F,
        Form(
            {
                "x": Arg("T"),
                "lower": OPTIONAL_INT,
                "upper": OPTIONAL_INT,
            },
            _band_part_type,
            {"T": ANY_TENSOR},
        ),
        meaning=_band_part,
        graph=GraphUse(
            "x with zeros outside the band of the last two axes: `lower` diagonals below, "
            "`upper` above (-1: all)",
            0.0,
        ),
        ane=not_on_ane("multiply by a constant band mask"),
    ),
)
