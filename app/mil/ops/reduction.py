"""Reductions over axes, and the windowed and indexed reductions other programs hold
(coremltools `reduction.py`, `pool.py`, `scatter_gather.py`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ops import sources as src
from app.mil.ops.common import FLOAT_T, NUMERIC_T, U
from app.mil.ops.record import (
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
)
from app.mil.types import TensorType

F = Family.REDUCTION
_ARGS = {
    "x": Arg("T"),
    "axes": Arg(INT, optional=True, const=True),
    "keep_dims": Arg(BOOL, optional=True, const=True),
}


def _reduce_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    axes = call.axes("axes", x.rank, list(range(x.rank)))
    if call.const("keep_dims", False):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorType(x.dtype, shape)]


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


_NUMERIC = Form(_ARGS, _reduce_type, NUMERIC_T)
_UNSUPPORTED = f"{src.MIL_E}; {src.ANEFORGE_CAPABILITIES}"

RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "reduce_max",
        F,
        _NUMERIC,
        meaning=_reduce(np.max),
        graph=GraphUse("max over `axes`", 0.0),
        histogram={17: Seen(16, src.PUBLISHED)},
    ),
    OpRecord(
        "reduce_mean",
        F,
        _NUMERIC,
        meaning=_reduce(np.mean),
        graph=GraphUse("mean over `axes`", 4 * U),
        ane=AneFacts(
            AneStatus.DISPUTED,
            "Espresso lists reduce_mean as missing on the ANE, while tmc/apple's RMSNorm runs it "
            "on device (rmsnorm_test.go); if a compile fails, use reduce_sum then mul by 1/n",
            f"{src.FUSED_24}; christopherkarani/Espresso, tmc/apple x/ane/mil/rmsnorm_test.go",
        ),
    ),
    OpRecord(
        "reduce_sum",
        F,
        _NUMERIC,
        meaning=_reduce(np.sum),
        graph=GraphUse("sum over `axes`", 4 * U),
        histogram={17: Seen(16, src.PARAKEET_PREPROCESSOR)},
    ),
    OpRecord(
        "reduce_l2_norm",
        F,
        Form(_ARGS, _reduce_type, FLOAT_T),
        meaning=_reduce(_l2_norm),
        graph=GraphUse("√Σx² over `axes`", 4 * U),
    ),
    # -- known from other programs: never built here --------------------------------------------
    OpRecord(
        "reduce_prod",
        F,
        ane=AneFacts(
            AneStatus.UNSUPPORTED,
            "not implemented on the ANE backend (tmc/apple: 'not supported at all'); use "
            "exp(reduce_sum(log(x))) for positive x",
            f"{_UNSUPPORTED}, tmc/apple x/ane/mil/mil.go@1565d2c8",
        ),
    ),
    OpRecord(
        "cumsum",
        F,
        ane=AneFacts(
            AneStatus.UNSUPPORTED,
            "not implemented on the ANE backend; use a matmul with a triangular ones matrix",
            _UNSUPPORTED,
        ),
        histogram={17: Seen(16, src.PUBLISHED)},
    ),
    OpRecord(
        "reduce_argmax",
        F,
        histogram={16: Seen(16, src.PUBLISHED), 17: Seen(17, src.PARAKEET_JOINT)},
    ),
    OpRecord("topk", F, histogram={17: Seen(17, src.PARAKEET_JOINT)}),
    OpRecord("avg_pool", F, histogram={17: Seen(16, src.PUBLISHED)}),
)
