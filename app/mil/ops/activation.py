"""Activations: the nonlinearities and softmax (coremltools `activation.py`)."""

from __future__ import annotations

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ops import sources as src
from app.mil.ops.common import (
    FLOAT_T,
    FLOAT_TU,
    UNARY,
    U,
    X,
    erf,
    known,
    same,
    sigmoid,
    softmax,
    swept,
    unary,
)
from app.mil.ops.record import (
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
from app.mil.types import TensorType

F = Family.ACTIVATION
NONLINEAR = UNARY | {Trait.NONLINEAR}
_GELU_MODES = ("EXACT", "TANH_APPROXIMATION", "SIGMOID_APPROXIMATION")


def _gelu_type(call: Call) -> list[TensorType]:
    if call.const("mode", "EXACT") not in _GELU_MODES:
        raise call.fail("mode", f"one of {', '.join(_GELU_MODES)}")
    return same(call)


def _gelu(a: Args) -> np.ndarray:
    x, mode = a.f32("x"), a.const("mode", "EXACT")
    if mode == "TANH_APPROXIMATION":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    if mode == "SIGMOID_APPROXIMATION":
        return x * sigmoid(1.702 * x)
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def _softmax_type(call: Call) -> list[TensorType]:
    call.axes("axis", call.type("x").rank)
    return same(call)


def _leaky(x: np.ndarray, alpha) -> np.ndarray:
    return np.where(x >= 0, x, x * alpha)


def _prelu_type(call: Call) -> list[TensorType]:
    x, alpha = call.type("x"), call.type("alpha")
    if x.rank not in (3, 4, 5):
        raise call.fail("x", f"needs rank 3, 4 or 5, got {x}")
    if alpha.shape != (x.shape[1],):
        raise call.fail("alpha", f"needs one value per channel: [{x.shape[1]}], got {alpha}")
    values = known(call, "alpha")
    if x.rank != 4 and values is not None and np.any(values != values.flat[0]):
        raise call.fail("alpha", f"a rank {x.rank} input takes one alpha for all channels")
    return same(call)


def _prelu(a: Args) -> np.ndarray:
    x = a.f32("x")
    alpha = np.asarray(a.const("alpha")).reshape(-1, *[1] * (x.ndim - 2))
    return _leaky(x, alpha)


def _elu(a: Args) -> np.ndarray:
    x = a.f32("x")
    return np.where(x > 0, x, a.const("alpha") * np.expm1(np.minimum(x, 0)))


_X_FORM = Form(X, same, FLOAT_T)
_ALPHA = Arg("U", const=True)  # iOS17: the parameters have a float dtype of their own

RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "sigmoid",
        F,
        _X_FORM,
        meaning=unary(sigmoid),
        traits=NONLINEAR,
        graph=GraphUse("1 / (1 + exp(-x))", 4 * U),
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(16, src.PARAKEET_ENCODER)},
        ane=swept(0.00384),
    ),
    OpRecord(
        "silu",
        F,
        _X_FORM,
        meaning=lambda a: a.f32("x") * sigmoid(a.f32("x")),
        traits=NONLINEAR,
        graph=GraphUse("x · sigmoid(x)", 4 * U),
        histogram={17: Seen(16, src.PARAKEET_ENCODER)},
        ane=swept(0.00997),
    ),
    OpRecord(
        "relu",
        F,
        _X_FORM,
        meaning=lambda a: np.maximum(a.f32("x"), 0),
        traits=NONLINEAR | {Trait.IDEMPOTENT},
        graph=GraphUse("max(x, 0)", 0.0),
        histogram={
            16: Seen(16, src.SILERO_INT8),
            17: Seen(16, src.PARAKEET_ENCODER),
            18: Seen(18, src.MULTIFUNCTION_3600),
        },
        ane=swept(0.0),
    ),
    OpRecord(
        "tanh",
        F,
        _X_FORM,
        meaning=unary(np.tanh),
        traits=NONLINEAR,
        graph=GraphUse("tanh(x)", 4 * U),
        histogram={17: Seen(17, src.PUBLISHED)},
        ane=swept(0.00126),
    ),
    OpRecord(
        "gelu",
        F,
        Form({"x": Arg("T"), "mode": Arg(STR, optional=True, const=True)}, _gelu_type, FLOAT_T),
        meaning=_gelu,
        traits=NONLINEAR,
        graph=GraphUse("GELU; mode EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION", 4 * U),
        ane=AneFacts(
            AneStatus.REPORTED_FAILING,
            "Orion reports gelu as invalid on the ANE; if the compile fails, spell it as "
            "x * sigmoid(1.702 x) or the tanh form",
            f"{src.FUSED_24}; mechramc/Orion",
        ),
    ),
    OpRecord(
        "softmax",
        F,
        Form({"x": Arg("T"), "axis": Arg(INT, optional=True, const=True)}, _softmax_type, FLOAT_T),
        meaning=lambda a: softmax(a.f64("x"), int(a.const("axis", -1))),
        traits=frozenset({Trait.NONLINEAR}),
        graph=GraphUse("softmax along `axis`", 4 * U),
        histogram={16: Seen(16, src.ISSUE_25), 17: Seen(16, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "leaky_relu",
        F,
        Form({"x": Arg("T"), "alpha": _ALPHA}, same, FLOAT_TU),
        meaning=lambda a: _leaky(a.f32("x"), a.const("alpha")),
        traits=NONLINEAR,
        graph=GraphUse("x where x >= 0, else alpha · x", 2 * U),
        ane=swept(1e-05),
    ),
    OpRecord(
        "prelu",
        F,
        Form({"x": Arg("T"), "alpha": _ALPHA}, _prelu_type, FLOAT_TU),
        meaning=_prelu,
        traits=NONLINEAR,
        graph=GraphUse("leaky_relu with one alpha per channel (axis 1); rank 3 to 5", 2 * U),
        ane=swept(),
    ),
    OpRecord(
        "elu",
        F,
        Form({"x": Arg("T"), "alpha": _ALPHA}, same, FLOAT_TU),
        meaning=_elu,
        traits=NONLINEAR,
        graph=GraphUse("x where x > 0, else alpha · (e^x - 1)", 4 * U),
        ane=swept(0.00506),
    ),
    OpRecord(
        "softplus",
        F,
        _X_FORM,
        meaning=unary(lambda x: np.logaddexp(0, x)),  # ln(1 + e^x) without overflow
        traits=NONLINEAR,
        graph=GraphUse("ln(1 + e^x)", 4 * U),
        ane=swept(0.00078),
    ),
    OpRecord(
        "sigmoid_hard",
        F,
        Form({"x": Arg("T"), "alpha": _ALPHA, "beta": Arg("U", const=True)}, same, FLOAT_TU),
        meaning=lambda a: np.clip(a.f32("x") * a.const("alpha") + a.const("beta"), 0, 1),
        traits=NONLINEAR,
        graph=GraphUse("min(max(alpha · x + beta, 0), 1)", 4 * U),
        ane=swept(0.00026),
    ),
)
