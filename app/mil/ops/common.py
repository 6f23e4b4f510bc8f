"""What several families' records share: argument shapes, broadcasting, and the numerics of the
float64 meanings.

The meanings follow the coremltools op definitions. Elementwise ops compute in float32 (through
`Args.f32`): on fp16 inputs a product is exact there and the one rounding to fp16 dominates; with
`exact=True` everything computes in float64, the op's float64 meaning that graph verification
composes. Accumulating ops (reductions, softmax, matmul, conv, attention) accumulate in float64,
so each op's result is its correctly rounded value whatever the summation order: the reference
then measures fp16 *storage* error, which the kernel controls, and not a particular device's
accumulator (an fp32 accumulator differs by ~n·2⁻²⁴, far below fp16's 2⁻¹¹).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ir import Operation, Var
from app.mil.ops import sources as src
from app.mil.ops.record import (
    ANY_TENSOR,
    BOOL,
    INT,
    AneFacts,
    AneStatus,
    Arg,
    Trait,
    ran_on_ane,
    traits,
)
from app.mil.types import FLOATS, NUMERIC, TensorType

U = 2.0**-11  # fp16 unit roundoff

FLOAT_T = {"T": FLOATS}
FLOAT_TU = {"T": FLOATS, "U": FLOATS}  # iOS17: a const parameter of a dtype of its own
NUMERIC_T = {"T": NUMERIC}
X = {"x": Arg("T")}
XY = {"x": Arg("T"), "y": Arg("T")}

CONST_INT = Arg(INT, const=True)
OPTIONAL_INT = Arg(INT, optional=True, const=True)
OPTIONAL_BOOL = Arg(BOOL, optional=True, const=True)


def any_x(**args: Arg) -> dict[str, Arg]:
    """An `x` of any tensor dtype, and `args`."""
    return {"x": Arg(ANY_TENSOR), **args}


UNARY = traits(Trait.ELEMENTWISE, Trait.UNARY)
BINARY = traits(Trait.ELEMENTWISE, Trait.BINARY)
MOVES = traits(Trait.DATA_MOVEMENT)


def swept(relerr: float | None = None) -> AneFacts:
    """Supported, as ANEForge's sweep found it: compiled alone for the ANE and run, compared
    with NumPy (`relerr`) or only run (None)."""
    compared = "not compared" if relerr is None else f"relative error {relerr:g} against NumPy"
    return ran_on_ane(
        f"ANEForge's sweep compiles it alone for the ANE and runs it ({compared})",
        src.ANEFORGE_SWEEP,
    )


def not_on_ane(instead: str) -> AneFacts:
    """Unsupported, as ANEForge's sweep found it: the ANE compile of the op alone fails."""
    return AneFacts(
        AneStatus.UNSUPPORTED,
        f"ANEForge's sweep finds it not implemented on the ANE backend (the compile fails); "
        f"{instead}",
        src.ANEFORGE_SWEEP,
    )


def broadcast(a: tuple[int, ...], b: tuple[int, ...], call: Call) -> tuple[int, ...]:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise call.fail("y", f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(da, db))
    return tuple(reversed(out))


def operand(op: Operation, arg: str) -> Var:
    """A (single) tensor argument of a built op."""
    var = op.inputs[arg]
    assert isinstance(var, Var)
    return var


def known(call: Call, arg: str) -> np.ndarray | None:
    """A const argument's values; None when a constexpr op makes them (at load time)."""
    value = call.value(arg)
    return None if value is None else np.asarray(value)


def elementwise(call: Call) -> list[TensorType]:
    x, y = call.type("x"), call.type("y")
    return [TensorType(x.dtype, broadcast(x.shape, y.shape, call))]


def same(call: Call) -> list[TensorType]:
    return [call.type("x")]


def binary(fn: Callable) -> Callable[[Args], np.ndarray]:
    return lambda a: fn(a.f32("x"), a.f32("y"))


def unary(fn: Callable) -> Callable[[Args], np.ndarray]:
    return lambda a: fn(a.f32("x"))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(0.5 * x))  # no overflow for large |x|, unlike 1 / (1 + exp(-x))


def erf(x: np.ndarray) -> np.ndarray:
    """erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7: a thousand times finer
    than an fp16 step near 1), as NumPy has none and SciPy is not a dependency."""
    t = 1 / (1 + 0.3275911 * np.abs(x))
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return np.sign(x) * (1 - poly * np.exp(-x * x))


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return shifted / np.sum(shifted, axis=axis, keepdims=True)
