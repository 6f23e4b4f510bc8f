"""Reductions over axes, and the windowed and indexed reductions other programs hold
(coremltools `reduction.py`, `pool.py`, `scatter_gather.py`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ops import sources as src
from app.mil.ops.common import FLOAT_T, NUMERIC_T, U, swept
from app.mil.ops.record import (
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
    Trait,
)
from app.mil.types import DType, TensorType

F = Family.REDUCTION
_INDEX_DTYPES = {"int32": DType.INT32, "uint16": DType.UINT16}  # iOS17's output_dtype
_SMALL_INTS = frozenset({DType.INT8, DType.INT16, DType.INT32})
_TOPK_VALUES = frozenset(
    {DType.FP16, DType.FP32, DType.INT8, DType.INT16, DType.INT32, DType.UINT8, DType.UINT16}
)
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


def _arg_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    (axis,) = call.axes("axis", x.rank, -1)
    dtype = call.const("output_dtype", "int32")
    if dtype not in _INDEX_DTYPES:
        raise call.fail("output_dtype", f"{dtype!r} is not one of {', '.join(_INDEX_DTYPES)}")
    keep = call.const("keep_dims", False)
    shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape) if keep or i != axis)
    return [TensorType(_INDEX_DTYPES[dtype], shape)]


def _arg(fn: Callable) -> Callable[[Args], np.ndarray]:
    """The index of the first largest (smallest) element along `axis`, as NumPy finds it."""

    def run(a: Args) -> np.ndarray:
        x = a.f64("x")
        axis = int(a.const("axis", -1)) % x.ndim
        return fn(x, axis=axis, keepdims=bool(a.const("keep_dims", False)))

    return run


def _arg_record(name: str, fn: Callable, seen: dict[int, Seen]) -> OpRecord:
    which = "largest" if fn is np.argmax else "smallest"
    return OpRecord(
        name,
        F,
        Form(
            {
                "x": Arg("T"),
                "axis": Arg(INT, optional=True, const=True),
                "keep_dims": Arg(BOOL, optional=True, const=True),
                "output_dtype": Arg(STR, optional=True, const=True),
            },
            _arg_type,
            NUMERIC_T,
        ),
        meaning=_arg(fn),
        graph=GraphUse(f"the index of the first {which} element along `axis` (int32)", 0.0),
        ane=AneFacts(
            AneStatus.DISPUTED,
            f"ANEForge's sweep finds {name} not implemented on the ANE backend, while ane-guide "
            "gives Core ML's ANE a limit for it (an axis of at most 2048); keep its axis within "
            "2048, or take the index on the CPU",
            f"{src.ANEFORGE_SWEEP}; {src.ANE_GUIDE}",
        ),
        histogram=seen,
    )


def _cumsum_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    axis = call.const("axis", 0)
    if not -1 <= axis < x.rank:  # as coremltools checks it: -1 is the only negative axis
        raise call.fail("axis", f"axis {axis} is not in [-1, {x.rank - 1}]")
    return [x]


def _cumsum(a: Args) -> np.ndarray:
    x = a.f64("x")
    axis = int(a.const("axis", 0)) % x.ndim
    if a.const("reverse", False):
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis)
    if a.const("exclusive", False):
        out = out - x
    return np.flip(out, axis) if a.const("reverse", False) else out


def _topk_type(call: Call) -> list[TensorType]:
    x = call.type("x")
    (axis,) = call.axes("axis", x.rank, -1)
    k = call.const("k", 1)
    k = x.shape[axis] if k == -1 else k
    if not 1 <= k <= x.shape[axis]:
        raise call.fail("k", f"k = {k} is not in [1, {x.shape[axis]}] (or -1: all)")
    shape = tuple(k if i == axis else d for i, d in enumerate(x.shape))
    if not call.const("return_indices", True):
        if call.has("output_indices_dtype"):
            raise call.fail("output_indices_dtype", "only with return_indices")
        return [TensorType(x.dtype, shape)]
    dtype = call.const("output_indices_dtype", "int32")
    if dtype not in _INDEX_DTYPES:
        raise call.fail(
            "output_indices_dtype", f"{dtype!r} is not one of {', '.join(_INDEX_DTYPES)}"
        )
    return [TensorType(x.dtype, shape), TensorType(_INDEX_DTYPES[dtype], shape)]


def _topk(a: Args) -> np.ndarray | list[np.ndarray]:
    """Sorted by value, equal values by index (a stable sort), as ONNX TopK orders them."""
    x = a.f64("x")
    axis = int(a.const("axis", -1)) % x.ndim
    k = int(a.const("k", 1))
    k = x.shape[axis] if k == -1 else k
    keys = x if a.const("ascending", False) else -x
    order = np.take(np.argsort(keys, axis=axis, kind="stable"), np.arange(k), axis=axis)
    values = np.take_along_axis(x, order, axis=axis)
    return [values, order] if a.const("return_indices", True) else values


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
        ane=swept(0.0),
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
        ane=swept(0.0008),
    ),
    OpRecord(
        "reduce_l2_norm",
        F,
        Form(_ARGS, _reduce_type, FLOAT_T),
        meaning=_reduce(_l2_norm),
        graph=GraphUse("√Σx² over `axes`", 4 * U),
        ane=swept(0.00051),
    ),
    OpRecord(
        "reduce_min",
        F,
        _NUMERIC,
        meaning=_reduce(np.min),
        graph=GraphUse("min over `axes`", 0.0),
        ane=swept(0.0),
    ),
    OpRecord(
        "reduce_prod",
        F,
        _NUMERIC,
        meaning=_reduce(np.prod),
        traits=frozenset({Trait.COMPOUNDING}),
        # n roundings for n factors: 8u holds for the short axes it is used on (shapes, masks)
        graph=GraphUse("product over `axes` (one rounding per factor)", 8 * U),
        ane=AneFacts(
            AneStatus.UNSUPPORTED,
            "not implemented on the ANE backend (tmc/apple: 'not supported at all'); use "
            "exp(reduce_sum(log(x))) for positive x",
            f"{_UNSUPPORTED}, tmc/apple x/ane/mil/mil.go@1565d2c8; {src.ANEFORGE_SWEEP}",
        ),
    ),
    _arg_record(
        "reduce_argmax", np.argmax, {16: Seen(16, src.PUBLISHED), 17: Seen(17, src.PARAKEET_JOINT)}
    ),
    _arg_record("reduce_argmin", np.argmin, {}),
    OpRecord(
        "cumsum",
        F,
        Form(
            {
                "x": Arg("T"),
                "axis": Arg(INT, optional=True, const=True),
                "exclusive": Arg(BOOL, optional=True, const=True),
                "reverse": Arg(BOOL, optional=True, const=True),
            },
            _cumsum_type,
            NUMERIC_T,
        ),
        meaning=_cumsum,
        graph=GraphUse("running sum along `axis` (exclusive, reverse)", 4 * U),
        ane=AneFacts(
            AneStatus.UNSUPPORTED,
            "not implemented on the ANE backend; use a matmul with a triangular ones matrix",
            f"{_UNSUPPORTED}; {src.ANEFORGE_SWEEP}",
        ),
        histogram={17: Seen(16, src.PUBLISHED)},
    ),
    OpRecord(
        "topk",
        F,
        Form(
            {
                "x": Arg("T"),
                "k": Arg("K", optional=True, const=True),
                "axis": Arg(INT, optional=True, const=True),
                "ascending": Arg(BOOL, optional=True, const=True),
                "sort": Arg(BOOL, optional=True, const=True),
                "return_indices": Arg(BOOL, optional=True, const=True),
                "output_indices_dtype": Arg(STR, optional=True, const=True),
            },
            _topk_type,
            {"T": _TOPK_VALUES, "K": _SMALL_INTS},
        ),
        meaning=_topk,
        graph=GraphUse(
            "the k largest (ascending: smallest) along `axis`, sorted, ties by index: node.0 "
            "the values, node.1 their indices",
            0.0,
        ),
        ane=AneFacts(
            AneStatus.DISPUTED,
            "ANEForge's sweep runs topk on the ANE correctly, but its census finds k = 3 or 4 "
            "failing the compile (k = 1, 2 and >= 5 work), and Core ML leaves topk on the CPU "
            "in exported detection models; if it fails, take k = 5 and slice",
            f"{src.ANEFORGE_SWEEP}; {src.ANEFORGE_CAPABILITIES} (topk_k3_k4); {src.DETECTION}",
        ),
        outputs=lambda params: 1 if params.get("return_indices") is False else 2,
        histogram={17: Seen(17, src.PARAKEET_JOINT)},
    ),
)
