"""Activations: the nonlinearities and softmax (coremltools `activation.py`)."""

from __future__ import annotations

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ops import sources as src
from app.mil.ops.common import FLOAT_T, UNARY, U, X, erf, same, sigmoid, softmax, unary
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


_X_FORM = Form(X, same, FLOAT_T)

RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "sigmoid",
        F,
        _X_FORM,
        meaning=unary(sigmoid),
        traits=NONLINEAR,
        graph=GraphUse("1 / (1 + exp(-x))", 4 * U),
        histogram={16: Seen(16, src.SILERO_INT8), 17: Seen(16, src.PARAKEET_ENCODER)},
    ),
    OpRecord(
        "silu",
        F,
        _X_FORM,
        meaning=lambda a: a.f32("x") * sigmoid(a.f32("x")),
        traits=NONLINEAR,
        graph=GraphUse("x · sigmoid(x)", 4 * U),
        histogram={17: Seen(16, src.PARAKEET_ENCODER)},
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
    ),
    OpRecord(
        "tanh",
        F,
        _X_FORM,
        meaning=unary(np.tanh),
        traits=NONLINEAR,
        graph=GraphUse("tanh(x)", 4 * U),
        histogram={17: Seen(17, src.PUBLISHED)},
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
    # -- known from other programs: never built here --------------------------------------------
    OpRecord("elu", F, traits=frozenset({Trait.NONLINEAR})),
    OpRecord("leaky_relu", F, traits=frozenset({Trait.NONLINEAR})),
    OpRecord("softplus", F, traits=frozenset({Trait.NONLINEAR})),
)
