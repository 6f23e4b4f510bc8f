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
    FLOAT_TU,
    NUMERIC_T,
    UNARY,
    XY,
    U,
    X,
    binary,
    elementwise,
    erf,
    not_on_ane,
    same,
    swept,
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
_FLOAT_X = Form(X, same, FLOAT_T)
# iOS17's log and inverse: epsilon of a float dtype of its own ("U")
_EPSILON_FORM = Form(
    {"x": Arg("T"), "epsilon": Arg("U", optional=True, const=True)}, same, FLOAT_TU
)


def _real_div(a: Args) -> np.ndarray:
    x, y = a.f32("x"), a.f32("y")
    if x.dtype.kind == "i":  # integer real_div: true division, truncated when stored as int32
        return np.true_divide(x, y)
    return x / y


def _floor_div(a: Args) -> np.ndarray:
    """⌊x / y⌋. Integers divide as integers (exact); floats take the quotient, then its floor."""
    x, y = a.f32("x"), a.f32("y")
    if x.dtype.kind == "i" and y.dtype.kind == "i":
        with np.errstate(divide="ignore"):
            return np.floor_divide(x, y)
    return np.floor(np.true_divide(x, y))


def _pow(a: Args) -> np.ndarray:
    """x^y. Integer operands are raised in floats (NumPy refuses a negative integer exponent)
    and truncated when stored as int32; a negative base with a fractional exponent is NaN."""
    x, y = a.f32("x"), a.f32("y")
    if x.dtype.kind == "i":
        return np.power(x.astype(np.float64), y)
    return np.power(x, y)


def _log(a: Args) -> np.ndarray:
    return np.log(a.f32("x") + a.const("epsilon", 1e-45))


def _inverse(a: Args) -> np.ndarray:
    return 1 / (a.f32("x") + a.const("epsilon", 1e-4))


def _clip_type(call: Call) -> list[TensorType]:
    alpha, beta = call.const("alpha"), call.const("beta")
    if not alpha < beta:  # iOS17 checks it strictly
        raise call.fail("alpha", f"alpha ({alpha}) must be smaller than beta ({beta})")
    return same(call)


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
        ane=swept(0.00033),
    ),
    OpRecord(
        "sub",
        F,
        _BINARY_FORM,
        meaning=binary(np.subtract),
        traits=BINARY,
        graph=GraphUse("x - y (broadcast)", 2 * U),
        histogram={16: Seen(16, src.ISSUE_25), 17: Seen(17, src.PARAKEET_ENCODER)},
        ane=swept(0.0003),
    ),
    OpRecord(
        "mul",
        F,
        _BINARY_FORM,
        meaning=binary(np.multiply),
        traits=BINARY | {Trait.COMMUTATIVE, Trait.ASSOCIATIVE, Trait.COMPOUNDING},
        graph=GraphUse("x * y (broadcast)", 2 * U),
        histogram={16: Seen(16, src.ADD_MODEL), 17: Seen(17, src.PARAKEET_ENCODER)},
        ane=swept(0.00017),
    ),
    OpRecord(
        "real_div",
        F,
        _BINARY_FORM,
        meaning=_real_div,
        traits=BINARY | {Trait.COMPOUNDING},
        graph=GraphUse("x / y (broadcast)", 2 * U),
        histogram={17: Seen(17, src.PUBLISHED)},
        ane=swept(0.00017),
    ),
    # A quotient within an fp16 step of an integer can floor either way; otherwise exact.
    OpRecord(
        "floor_div",
        F,
        _BINARY_FORM,
        meaning=_floor_div,
        traits=BINARY,
        graph=GraphUse("⌊x / y⌋ (broadcast); integers divide exactly", 0.0),
        ane=swept(0.0),
        histogram={17: Seen(17, src.PARAKEET_PREPROCESSOR)},
    ),
    OpRecord(
        "maximum",
        F,
        _BINARY_FORM,
        meaning=binary(np.maximum),
        traits=BINARY | {Trait.COMMUTATIVE, Trait.ASSOCIATIVE},
        graph=GraphUse("max(x, y) (broadcast)", 0.0),
        histogram={17: Seen(17, src.GATHER_3520)},
        ane=swept(0.0),
    ),
    OpRecord(
        "minimum",
        F,
        _BINARY_FORM,
        meaning=binary(np.minimum),
        traits=BINARY | {Trait.COMMUTATIVE, Trait.ASSOCIATIVE},
        graph=GraphUse("min(x, y) (broadcast)", 0.0),
        histogram={17: Seen(17, src.GATHER_3520)},
        ane=swept(0.0),
    ),
    OpRecord(
        "abs",
        F,
        Form(X, same, NUMERIC_T),
        meaning=unary(np.abs),
        traits=UNARY | {Trait.IDEMPOTENT},
        graph=GraphUse("|x|", 0.0),
        histogram={17: Seen(17, src.PUBLISHED)},
        ane=swept(0.0),
    ),
    OpRecord(
        "square",
        F,
        Form(X, same, NUMERIC_T),
        meaning=unary(np.square),
        traits=UNARY,
        graph=GraphUse("x²", 2 * U),
        ane=swept(8e-05),
    ),
    OpRecord(
        "sqrt",
        F,
        Form(X, same, FLOAT_T),
        meaning=unary(np.sqrt),
        traits=NONLINEAR,
        graph=GraphUse("√x", 4 * U),
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PUBLISHED)},
        ane=swept(0.00043),
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
        ane=swept(0.00047),
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
    OpRecord(
        "pow",
        F,
        Form(XY, elementwise, NUMERIC_T),
        meaning=_pow,
        traits=BINARY | {Trait.NONLINEAR, Trait.COMPOUNDING},
        graph=GraphUse("x^y (broadcast; an exponent above 1 amplifies x's error)", 4 * U),
        ane=swept(0.00018),
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_PREPROCESSOR)},
    ),
    OpRecord(
        "erf",
        F,
        _FLOAT_X,
        meaning=unary(erf),
        traits=NONLINEAR,
        graph=GraphUse("erf(x)", 4 * U),
        ane=swept(0.0007),
    ),
    OpRecord(
        "log",
        F,
        _EPSILON_FORM,
        meaning=_log,
        traits=NONLINEAR | {Trait.NEEDS_EPSILON},
        graph=GraphUse("ln(x + epsilon) (epsilon 1e-45 unless given)", 4 * U),
        ane=swept(0.0008),
        histogram={17: Seen(17, src.PARAKEET_PREPROCESSOR)},
    ),
    OpRecord(
        "inverse",
        F,
        _EPSILON_FORM,
        meaning=_inverse,
        traits=NONLINEAR | {Trait.NEEDS_EPSILON, Trait.COMPOUNDING},
        graph=GraphUse("1 / (x + epsilon) (epsilon 1e-4 unless given)", 2 * U),
        ane=swept(0.00028),
    ),
    OpRecord(
        "sin",
        F,
        _FLOAT_X,
        meaning=unary(np.sin),
        traits=NONLINEAR,
        graph=GraphUse("sin(x)", 4 * U),
        ane=swept(0.0005),
        histogram={17: Seen(17, src.PUBLISHED)},
    ),
    OpRecord(
        "cos",
        F,
        _FLOAT_X,
        meaning=unary(np.cos),
        traits=NONLINEAR,
        graph=GraphUse("cos(x)", 4 * U),
        ane=swept(0.00056),
    ),
    OpRecord(
        "atan",
        F,
        _FLOAT_X,
        meaning=unary(np.arctan),
        traits=NONLINEAR,
        graph=GraphUse("arctan(x), in (-π/2, π/2)", 4 * U),
        ane=swept(0.01881),  # some forty times sin's: the ANE approximates it coarsely
        histogram={17: Seen(17, src.PUBLISHED)},
    ),
    OpRecord(
        "asin",
        F,
        _FLOAT_X,
        meaning=unary(np.arcsin),
        traits=NONLINEAR,
        graph=GraphUse("arcsin(x), x in [-1, 1] (NaN outside)", 4 * U),
        ane=not_on_ane("asin(x) = atan(x / √(1 - x²)) is built of ops the sweep ran there"),
    ),
    OpRecord(
        "acos",
        F,
        _FLOAT_X,
        meaning=unary(np.arccos),
        traits=NONLINEAR,
        graph=GraphUse("arccos(x), x in [-1, 1] (NaN outside)", 4 * U),
        ane=not_on_ane("acos(x) = π/2 - atan(x / √(1 - x²)) is built of ops the sweep ran there"),
    ),
    # Rounding ops add no error of their own; on a computed input a step can flip.
    OpRecord(
        "floor",
        F,
        _FLOAT_X,
        meaning=unary(np.floor),
        traits=UNARY | {Trait.IDEMPOTENT},
        graph=GraphUse("⌊x⌋", 0.0),
        ane=swept(0.0),
        histogram={17: Seen(17, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "ceil",
        F,
        _FLOAT_X,
        meaning=unary(np.ceil),
        traits=UNARY | {Trait.IDEMPOTENT},
        graph=GraphUse("⌈x⌉", 0.0),
        ane=swept(0.0),
    ),
    OpRecord(
        "round",
        F,
        _FLOAT_X,
        meaning=unary(np.round),  # halves to even: MIL rounds 0.5 to 0, as ONNX and NumPy do
        traits=UNARY | {Trait.IDEMPOTENT},
        graph=GraphUse("x to the nearest integer, halves to even", 0.0),
        ane=swept(0.0),
    ),
    OpRecord(
        "sign",
        F,
        Form(X, same, NUMERIC_T),
        meaning=unary(np.sign),
        traits=UNARY | {Trait.IDEMPOTENT},
        graph=GraphUse("-1, 0 or 1 by the sign of x", 0.0),
        ane=swept(0.0),
    ),
    OpRecord(
        "clip",
        F,
        Form(
            {"x": Arg("T"), "alpha": Arg("T", const=True), "beta": Arg("T", const=True)},
            _clip_type,
            FLOAT_T,
        ),
        meaning=lambda a: np.minimum(np.maximum(a.f32("x"), a.const("alpha")), a.const("beta")),
        traits=UNARY | {Trait.IDEMPOTENT},
        graph=GraphUse("min(max(x, alpha), beta); alpha < beta", 0.0),
        ane=swept(0.0),
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(17, src.PARAKEET_ENCODER)},
    ),
)
