"""Rules for the elementwise primitives beyond app/coreai/rules.py: unary math, comparisons and
logic, the parametric activations and activation quantization.

Core AI has `greater` but no `less`: x < y is greater(y, x), and x >= y is not greater(y, x)
(the same but for NaN, which the ANE does not propagate anyway). It has no floor, ceil or sign:
floor is floor_divide by 1, ceil is -floor(-x), sign is where(x > 0, 1, where(x < 0, -1, 0)).
"""

from __future__ import annotations

import numpy as np

from app.coreai.rules import Rule
from app.coreai.spelling import ca, elementwise, scalar
from app.coreai.step import Step


def _same(step: Step, a: str = "x", b: str = "y") -> bool:
    return step.type(a).shape == step.type(b).shape


def _unary(name: str) -> Rule:
    return lambda step: [getattr(ca(), name)(step.value("x"))]


def _pow(step: Step) -> list:
    name = "pow_" if _same(step) else "broadcasting_pow"
    return [getattr(ca(), name)(step.value("x"), step.value("y"))]


def _plus_epsilon(step: Step, default: float):
    """x + epsilon, the epsilon in x's dtype (one that rounds to 0 there is left out)."""
    x, like = step.value("x"), step.type("x")
    eps = np.asarray(step.const("epsilon", default)).astype(like.dtype.numpy)
    return ca().broadcasting_add(x, scalar(step, eps, like)) if eps else x


def _log(step: Step) -> list:
    return [ca().log(_plus_epsilon(step, 1e-45))]


def _inverse(step: Step) -> list:
    one = scalar(step, 1.0, step.type("x"))
    return [ca().broadcasting_divide(one, _plus_epsilon(step, 1e-4))]


def _floor_of(step: Step, x):
    return ca().broadcasting_floor_divide(x, scalar(step, 1.0, step.type("x")))


def _floor_div(step: Step) -> list:
    name = "floor_divide" if _same(step) else "broadcasting_floor_divide"
    return [getattr(ca(), name)(step.value("x"), step.value("y"))]


def _negated(step: Step, x):
    return ca().broadcasting_mul(x, scalar(step, -1.0, step.type("x")))


def _floor(step: Step) -> list:
    return [_floor_of(step, step.value("x"))]


def _ceil(step: Step) -> list:
    return [_negated(step, _floor_of(step, _negated(step, step.value("x"))))]


def _sign(step: Step) -> list:
    x, like = step.value("x"), step.type("x")
    zero = scalar(step, 0, like)
    below = ca().broadcasting_where(
        ca().broadcasting_greater(zero, x), scalar(step, -1, like), zero
    )
    return [
        ca().broadcasting_where(ca().broadcasting_greater(x, zero), scalar(step, 1, like), below)
    ]


def _clip_to(step: Step, x, low, high):
    like = step.type("x")
    raised = ca().broadcasting_maximum(x, scalar(step, low, like))
    return ca().broadcasting_minimum(raised, scalar(step, high, like))


def _clip(step: Step) -> list:
    return [_clip_to(step, step.value("x"), step.const("alpha"), step.const("beta"))]


# -- comparisons and logic -------------------------------------------------------------------
def _compare(name: str, swap: bool = False, negate: bool = False) -> Rule:
    def rule(step: Step) -> list:
        x, y = step.value("x"), step.value("y")
        out = elementwise(name, *((y, x) if swap else (x, y)), _same(step))
        return [ca().not_(out) if negate else out]

    return rule


def _logical(same: str, broadcasting: str) -> Rule:
    def rule(step: Step) -> list:
        name = same if _same(step) else broadcasting
        return [getattr(ca(), name)(step.value("x"), step.value("y"))]

    return rule


def _select(step: Step) -> list:
    same = _same(step, "a", "b") and step.type("cond").shape == step.type("a").shape
    where = ca().where if same else ca().broadcasting_where
    return [where(step.value("cond"), step.value("a"), step.value("b"))]


# -- activations -----------------------------------------------------------------------------
def _leaky(step: Step, slope) -> list:
    """x where x >= 0, else slope · x; `slope` a scalar or a broadcastable constant."""
    x, like = step.value("x"), step.type("x")
    negative = ca().broadcasting_greater(scalar(step, 0, like), x)
    return [ca().broadcasting_where(negative, ca().broadcasting_mul(x, slope), x)]


def _leaky_relu(step: Step) -> list:
    return _leaky(step, scalar(step, step.const("alpha"), step.type("x")))


def _prelu(step: Step) -> list:
    like = step.type("x")
    alpha = np.asarray(step.const("alpha")).reshape(-1, *[1] * (like.rank - 2))
    return _leaky(step, step.make(alpha, like))


def _elu(step: Step) -> list:
    x, like = step.value("x"), step.type("x")
    below = ca().broadcasting_sub(ca().exp(x), scalar(step, 1, like))
    below = ca().broadcasting_mul(below, scalar(step, step.const("alpha"), like))
    return [ca().broadcasting_where(ca().broadcasting_greater(x, scalar(step, 0, like)), x, below)]


def _softplus(step: Step) -> list:
    """max(x, 0) + ln(1 + e^-|x|): e^x itself overflows fp16 beyond x = 11."""
    x, like = step.value("x"), step.type("x")
    tail = ca().exp(_negated(step, ca().abs_(x)))
    tail = ca().log(ca().broadcasting_add(tail, scalar(step, 1, like)))
    return [ca().add(ca().broadcasting_maximum(x, scalar(step, 0, like)), tail)]


def _sigmoid_hard(step: Step) -> list:
    x, like = step.value("x"), step.type("x")
    scaled = ca().broadcasting_mul(x, scalar(step, step.const("alpha"), like))
    shifted = ca().broadcasting_add(scaled, scalar(step, step.const("beta"), like))
    return [_clip_to(step, shifted, 0, 1)]


# -- activation quantization -----------------------------------------------------------------
def _quantization(step: Step, integer, real):
    """(scale, offset1, offset2, axis) in Core AI's terms: offset1 the zero point (of the
    integer dtype), offset2 zero (of the real one); axis all axes for scalar parameters."""
    scale = np.asarray(step.const("scale"))
    zero = step.const("zero_point", np.zeros(scale.shape))
    rank = step.type("input").rank
    axis = step.const("axis") % rank if scale.ndim else list(range(rank))
    return (
        step.make(scale, step.type("scale")),
        step.make(np.asarray(zero), integer),
        step.make(np.zeros(scale.shape), real),
        step.indices(axis),
    )


def _quantize(step: Step) -> list:
    params = _quantization(step, step.out[0], step.type("input"))
    return [ca().quantize(step.value("input"), *params)]


def _dequantize(step: Step) -> list:
    params = _quantization(step, step.type("input"), step.out[0])
    return [ca().dequantize(step.value("input"), *params)]


RULES: dict[str, Rule] = {
    "pow": _pow,
    "erf": _unary("erf"),
    "sin": _unary("sin"),
    "cos": _unary("cos"),
    "atan": _unary("atan"),
    "asin": _unary("asin"),
    "acos": _unary("acos"),
    "floor_div": _floor_div,
    "round": _unary("round_"),
    "log": _log,
    "inverse": _inverse,
    "floor": _floor,
    "ceil": _ceil,
    "sign": _sign,
    "clip": _clip,
    "equal": _compare("equal"),
    "not_equal": _compare("not_equal"),
    "greater": _compare("greater"),
    "less": _compare("greater", swap=True),
    "greater_equal": _compare("greater", swap=True, negate=True),
    "less_equal": _compare("greater", negate=True),
    "logical_and": _logical("and_", "broadcasting_and"),
    "logical_or": _logical("or_", "broadcasting_or"),
    "logical_xor": _logical("xor_", "broadcasting_xor"),
    "logical_not": lambda step: [ca().not_(step.value("x"))],
    "select": _select,
    "leaky_relu": _leaky_relu,
    "prelu": _prelu,
    "elu": _elu,
    "softplus": _softplus,
    "sigmoid_hard": _sigmoid_hard,
    "quantize": _quantize,
    "dequantize": _dequantize,
}
