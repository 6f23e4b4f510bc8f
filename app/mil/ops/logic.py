"""Comparisons, logical ops and select: elementwise ops with bool results or a bool condition
(coremltools `elementwise_binary.py`, `elementwise_unary.py`, `control_flow.py`).

Their results are exact on their inputs, so they add no fp16 error; a comparison of computed
values can still flip where the two sides are within their error of each other.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ops import sources as src
from app.mil.ops.common import BINARY, NUMERIC_T, UNARY, XY, broadcast, not_on_ane, swept
from app.mil.ops.record import (
    BOOL,
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

F = Family.ELEMENTWISE
_SYMMETRIC = BINARY | {Trait.COMMUTATIVE}
_LOGICAL = _SYMMETRIC | {Trait.ASSOCIATIVE}
# The sweep ran each comparison on the ANE without comparing its result
_COMPARED = swept()


def _compare_type(call: Call) -> list[TensorType]:
    x, y = call.type("x"), call.type("y")
    return [TensorType(DType.BOOL, broadcast(x.shape, y.shape, call))]


def _compare(fn: Callable) -> Callable[[Args], np.ndarray]:
    return lambda a: fn(a.f32("x"), a.f32("y"))


def _select_type(call: Call) -> list[TensorType]:
    cond, a, b = call.type("cond"), call.type("a"), call.type("b")
    return [TensorType(a.dtype, broadcast(cond.shape, broadcast(a.shape, b.shape, call), call))]


def _comparison(name: str, fn: Callable, summary: str, **more) -> OpRecord:
    commutative = fn in (np.equal, np.not_equal)
    return OpRecord(
        name,
        F,
        Form(XY, _compare_type, NUMERIC_T),
        meaning=_compare(fn),
        traits=_SYMMETRIC if commutative else BINARY,
        graph=GraphUse(f"{summary} (broadcast), a bool tensor", 0.0),
        ane=_COMPARED,
        **more,
    )


def _logical(name: str, fn: Callable, summary: str, **more) -> OpRecord:
    return OpRecord(
        name,
        F,
        Form(XY, _compare_type, {"T": BOOL}),
        meaning=lambda a: fn(a["x"].astype(bool), a["y"].astype(bool)),
        traits=_LOGICAL,
        graph=GraphUse(f"{summary} of two bool tensors (broadcast)", 0.0),
        ane=not_on_ane(
            "ANEForge also lists logical ops as not in the ANE's fp16 surface: write "
            "select(x, y, x) for and, select(x, x, y) for or"
        ),
        **more,
    )


RECORDS: tuple[OpRecord, ...] = (
    _comparison("equal", np.equal, "x == y", histogram={17: Seen(17, src.PUBLISHED)}),
    _comparison("not_equal", np.not_equal, "x != y"),
    _comparison("greater", np.greater, "x > y", histogram={17: Seen(17, src.PUBLISHED)}),
    _comparison(
        "greater_equal",
        np.greater_equal,
        "x >= y",
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    _comparison("less", np.less, "x < y", histogram={17: Seen(17, src.PARAKEET_ENCODER)}),
    _comparison("less_equal", np.less_equal, "x <= y"),
    _logical(
        "logical_and", np.logical_and, "x and y", histogram={17: Seen(17, src.PARAKEET_ENCODER)}
    ),
    _logical("logical_or", np.logical_or, "x or y"),
    _logical("logical_xor", np.logical_xor, "x xor y"),
    OpRecord(
        "logical_not",
        F,
        Form({"x": Arg(BOOL)}, lambda call: [call.type("x")]),
        meaning=lambda a: np.logical_not(a["x"].astype(bool)),
        traits=UNARY,
        graph=GraphUse("not x, of a bool tensor", 0.0),
        ane=AneFacts(
            AneStatus.DISPUTED,
            "ANEForge's sweep runs logical_not on the ANE (its result not compared) while its "
            "capability census lists not among the logical ops the ANE rejects; if the compile "
            "fails, write select(x, false, true)",
            f"{src.ANEFORGE_SWEEP}; {src.ANEFORGE_CAPABILITIES}",
        ),
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "select",
        F,
        Form(
            {"cond": Arg(BOOL), "a": Arg("T"), "b": Arg("T")},
            _select_type,
            {"T": frozenset({DType.FP16, DType.FP32, DType.BOOL, DType.INT32})},
        ),
        meaning=lambda a: np.where(a["cond"].astype(bool), a["a"], a["b"]),
        traits=frozenset({Trait.ELEMENTWISE, Trait.DATA_MOVEMENT}),
        graph=GraphUse("a where cond, else b (the three broadcast)", 0.0),
        ane=swept(0.0),
        histogram={17: Seen(src.BASE, src.PARAKEET_ENCODER)},
    ),
)
