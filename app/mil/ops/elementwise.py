"""Elementwise ops: binary arithmetic with broadcasting, unary math, casts (coremltools
`elementwise_binary.py`, `elementwise_unary.py`)."""

from __future__ import annotations

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ops import sources as src
from app.mil.ops.common import (
    BINARY,
    FLOAT_T,
    NUMERIC_T,
    UNARY,
    XY,
    U,
    X,
    binary,
    elementwise,
    same,
    unary,
)
from app.mil.ops.record import (
    ANY_TENSOR,
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

F = Family.ELEMENTWISE
NONLINEAR = UNARY | {Trait.NONLINEAR}
_BINARY_FORM = Form(XY, elementwise, NUMERIC_T)


def _real_div(a: Args) -> np.ndarray:
    x, y = a.f32("x"), a.f32("y")
    if x.dtype.kind == "i":  # integer real_div: true division, truncated when stored as int32
        return np.true_divide(x, y)
    return x / y


def _rsqrt(a: Args) -> np.ndarray:
    return 1 / np.sqrt(a.f32("x") + a.const("epsilon", 1e-12))


_CAST_TARGETS = {"fp16": DType.FP16, "fp32": DType.FP32, "int32": DType.INT32, "bool": DType.BOOL}


def _cast_type(call: Call) -> list[TensorType]:
    name = call.const("dtype")
    if name not in _CAST_TARGETS:
        raise call.fail("dtype", f"cannot cast to {name!r}; one of {sorted(_CAST_TARGETS)}")
    return [TensorType(_CAST_TARGETS[name], call.type("x").shape)]


def _cast(a: Args) -> np.ndarray:
    x, dtype = a["x"], a.const("dtype")
    if dtype == "bool":
        return x != 0
    if a.exact and dtype.startswith("int"):  # in float64 nothing stores it: truncate here
        return np.trunc(x)
    return x  # the executor stores it in the target dtype (astype: rounds floats, truncates ints)


RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "add",
        F,
        _BINARY_FORM,
        meaning=binary(np.add),
        traits=BINARY | {Trait.COMMUTATIVE, Trait.ASSOCIATIVE},
        graph=GraphUse("x + y (broadcast)", 2 * U),
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "sub",
        F,
        _BINARY_FORM,
        meaning=binary(np.subtract),
        traits=BINARY,
        graph=GraphUse("x - y (broadcast)", 2 * U),
        histogram={16: Seen(16, src.ISSUE_25), 17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "mul",
        F,
        _BINARY_FORM,
        meaning=binary(np.multiply),
        traits=BINARY | {Trait.COMMUTATIVE, Trait.ASSOCIATIVE, Trait.COMPOUNDING},
        graph=GraphUse("x * y (broadcast)", 2 * U),
        histogram={16: Seen(16, src.ADD_MODEL), 17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "real_div",
        F,
        _BINARY_FORM,
        meaning=_real_div,
        traits=BINARY | {Trait.COMPOUNDING},
        graph=GraphUse("x / y (broadcast)", 2 * U),
        histogram={17: Seen(17, src.PUBLISHED)},
    ),
    OpRecord(
        "maximum",
        F,
        _BINARY_FORM,
        meaning=binary(np.maximum),
        traits=BINARY | {Trait.COMMUTATIVE, Trait.ASSOCIATIVE},
        graph=GraphUse("max(x, y) (broadcast)", 0.0),
        histogram={17: Seen(17, src.GATHER_3520)},
    ),
    OpRecord(
        "minimum",
        F,
        _BINARY_FORM,
        meaning=binary(np.minimum),
        traits=BINARY | {Trait.COMMUTATIVE, Trait.ASSOCIATIVE},
        graph=GraphUse("min(x, y) (broadcast)", 0.0),
        histogram={17: Seen(17, src.GATHER_3520)},
    ),
    OpRecord(
        "abs",
        F,
        Form(X, same, NUMERIC_T),
        meaning=unary(np.abs),
        traits=UNARY | {Trait.IDEMPOTENT},
        graph=GraphUse("|x|", 0.0),
        histogram={17: Seen(17, src.PUBLISHED)},
    ),
    OpRecord(
        "square",
        F,
        Form(X, same, NUMERIC_T),
        meaning=unary(np.square),
        traits=UNARY,
        graph=GraphUse("x²", 2 * U),
    ),
    OpRecord(
        "sqrt",
        F,
        Form(X, same, FLOAT_T),
        meaning=unary(np.sqrt),
        traits=NONLINEAR,
        graph=GraphUse("√x", 4 * U),
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PUBLISHED)},
    ),
    OpRecord(
        "rsqrt",
        F,
        Form({"x": Arg("T"), "epsilon": Arg("T", optional=True, const=True)}, same, FLOAT_T),
        meaning=_rsqrt,
        traits=NONLINEAR | {Trait.NEEDS_EPSILON},
        graph=GraphUse("1 / √(x + epsilon)", 4 * U),
        ane=AneFacts(
            AneStatus.DISPUTED,
            "Espresso lists rsqrt as missing on the ANE, while ironmill uses it with an explicit "
            "epsilon; if a compile fails, use pow(x, -0.5) (maderix) or sqrt then real_div",
            f"{src.FUSED_24}; christopherkarani/Espresso, jafreck/ironmill ane-op-support-matrix.md",
        ),
    ),
    OpRecord(
        "exp",
        F,
        Form(X, same, FLOAT_T),
        meaning=unary(np.exp),
        traits=NONLINEAR,
        graph=GraphUse("e^x", 4 * U),
    ),
    OpRecord(
        "cast",
        F,
        Form({"x": Arg(ANY_TENSOR), "dtype": Arg(STR, const=True)}, _cast_type),
        meaning=_cast,
        traits=UNARY,
        graph=GraphUse("to `dtype` (fp16, fp32, int32, bool)", 2 * U),
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    # -- known from other programs: never built here --------------------------------------------
    OpRecord(
        "pow",
        F,
        traits=BINARY | {Trait.NONLINEAR},
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_PREPROCESSOR)},
    ),
    OpRecord(
        "log",
        F,
        traits=frozenset({Trait.NONLINEAR, Trait.NEEDS_EPSILON}),
        histogram={17: Seen(17, src.PARAKEET_PREPROCESSOR)},
    ),
    OpRecord("inverse", F, traits=frozenset({Trait.NONLINEAR, Trait.NEEDS_EPSILON})),
    OpRecord("erf", F, traits=frozenset({Trait.NONLINEAR})),
    OpRecord(
        "clip", F, histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)}
    ),
    OpRecord("floor", F, histogram={17: Seen(17, src.PARAKEET_ENCODER)}),
    OpRecord("floor_div", F, histogram={17: Seen(17, src.PARAKEET_PREPROCESSOR)}),
    OpRecord("sin", F, histogram={17: Seen(17, src.PUBLISHED)}),
    OpRecord("atan", F, histogram={17: Seen(17, src.PUBLISHED)}),
    OpRecord("equal", F, histogram={17: Seen(17, src.PUBLISHED)}),
    OpRecord("greater", F, histogram={17: Seen(17, src.PUBLISHED)}),
    OpRecord("greater_equal", F, histogram={17: Seen(17, src.PARAKEET_ENCODER)}),
    OpRecord("less", F, histogram={17: Seen(17, src.PARAKEET_ENCODER)}),
    OpRecord("logical_and", F, histogram={17: Seen(17, src.PARAKEET_ENCODER)}),
    OpRecord("logical_not", F, histogram={17: Seen(17, src.PARAKEET_ENCODER)}),
    OpRecord("select", F, histogram={17: Seen(src.BASE, src.PARAKEET_ENCODER)}),
)
