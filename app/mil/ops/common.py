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
from app.mil.ops.record import Arg, Trait, traits
from app.mil.types import FLOATS, NUMERIC, TensorType

U = 2.0**-11  # fp16 unit roundoff

FLOAT_T = {"T": FLOATS}
NUMERIC_T = {"T": NUMERIC}
X = {"x": Arg("T")}
XY = {"x": Arg("T"), "y": Arg("T")}

UNARY = traits(Trait.ELEMENTWISE, Trait.UNARY)
BINARY = traits(Trait.ELEMENTWISE, Trait.BINARY)
MOVES = traits(Trait.DATA_MOVEMENT)


def broadcast(a: tuple[int, ...], b: tuple[int, ...], call: Call) -> tuple[int, ...]:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise call.fail("y", f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(da, db))
    return tuple(reversed(out))


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


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return shifted / np.sum(shifted, axis=axis, keepdims=True)
