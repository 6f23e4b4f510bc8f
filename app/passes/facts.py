"""What the passes know about an op type, read in one place.

Every pass asks here (never app.mil's tables directly), so that when each MIL primitive becomes
one record holding its arguments, type inference, float64 meaning and traits (issue 30), this
module is the one file that changes. Until then the traits are the sets below, written from the
op declarations (app/mil/ops.py) and their meanings (app/mil/semantics.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from app.language.targets import Target
from app.mil.args import Args
from app.mil.ir import Input, Operation
from app.mil.ops import OPS, infer, lookup
from app.mil.semantics import TABLE
from app.mil.types import TensorType

# y = f(x) element by element, the output shaped as x (const arguments such as rsqrt's epsilon or
# gelu's mode aside): a layout change before the op may move after it.
_UNARY = frozenset(
    {"relu", "abs", "sigmoid", "silu", "tanh", "exp", "gelu", "square", "sqrt", "rsqrt"}
)
# z = f(x, y) element by element with NumPy broadcasting.
_BINARY = frozenset({"add", "sub", "mul", "real_div", "maximum", "minimum"})
_COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum"})
# Ops whose effect is not (only) their outputs: never removed, folded, merged or moved.
_STATEFUL = frozenset({"read_state", "write_state"})


def is_unary(op_type: str) -> bool:
    return op_type in _UNARY


def is_binary(op_type: str) -> bool:
    return op_type in _BINARY


def is_commutative(op_type: str) -> bool:
    return op_type in _COMMUTATIVE


def is_stateful(op_type: str) -> bool:
    return op_type in _STATEFUL


def is_constexpr(op_type: str) -> bool:
    """Decompressed when the model loads: a constant, but one whose compressed form is the point."""
    return op_type.startswith("constexpr_")


def is_param(op_type: str, arg: str) -> bool:
    """Whether `arg` of `op_type` must be a const (an attribute such as `perm` or `axes`)."""
    spec = OPS[op_type].args.get(arg)
    return spec is not None and spec.const


def has_meaning(op_type: str) -> bool:
    """Whether the op's value can be computed here (and so folded when its inputs are consts)."""
    return op_type in TABLE and not is_stateful(op_type) and not is_constexpr(op_type)


def meaning(op: Operation, values: Mapping[str, np.ndarray | str]) -> list[np.ndarray]:
    """The op's outputs in float64 from its inputs' values (by var name), unrounded: the caller
    stores each in its output's dtype."""
    result = TABLE[op.type](Args(op, dict(values), {}, exact=True))  # type: ignore[arg-type]
    parts = result if len(op.outputs) > 1 else [result]
    return [np.asarray(p) for p in parts]  # type: ignore[union-attr]


def output_types(
    op_type: str, name: str, inputs: dict[str, Input], target: Target
) -> list[TensorType]:
    """The op's output types, checked as the builder checks them (raises MILBuildError)."""
    return infer(op_type, name, inputs, target)


def available(op_type: str, target: Target) -> bool:
    """Whether the target's opset has the op."""
    opdef = lookup(op_type, target)
    return opdef is not None and target.includes(opdef.since)
