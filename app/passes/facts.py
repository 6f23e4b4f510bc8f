"""What the passes know about an op type, read in one place: its record (app/mil/ops).

Every pass asks here (never a list of op names of its own): the record's traits say which ops
compute element by element, which have an effect, which decompress; its float64 meaning computes
an op from its inputs' values; its declaration infers output types; its ANE facts say which ops a
runtime reports failing. A primitive added as a record is known to every pass from that alone.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from app.language.targets import Target
from app.mil import ops
from app.mil.args import Args
from app.mil.ir import Input, Operation
from app.mil.ops import AneStatus, Family, Trait
from app.mil.types import TensorType


def _family(op_type: str) -> Family | None:
    record = ops.get(op_type)
    return None if record is None else record.family


def is_unary(op_type: str) -> bool:
    """y = f(x) element by element, the output shaped as x (const arguments such as rsqrt's
    epsilon or cast's dtype aside): a layout change before the op may move after it."""
    return ops.has(op_type, Trait.ELEMENTWISE, Trait.UNARY)


def is_binary(op_type: str) -> bool:
    """z = f(x, y) element by element with NumPy broadcasting."""
    return ops.has(op_type, Trait.ELEMENTWISE, Trait.BINARY)


def moves_data(op_type: str) -> bool:
    """No arithmetic: every output element is an input element (reshapes, transposes, slices)."""
    return ops.has(op_type, Trait.DATA_MOVEMENT)


def is_reduction(op_type: str) -> bool:
    """A reduction over axes (its `axes` or `axis`; with keep_dims, the rank stays)."""
    return _family(op_type) is Family.REDUCTION


def is_stateful(op_type: str) -> bool:
    """Ops whose effect is not (only) their outputs: never removed, folded, merged or moved."""
    return _family(op_type) is Family.STATE


def is_constexpr(op_type: str) -> bool:
    """Decompressed when the model loads: a constant, but one whose compressed form is the point."""
    return _family(op_type) is Family.CONSTEXPR


def has_meaning(op_type: str) -> bool:
    """Whether the op's value can be computed here (and so folded when its inputs are consts)."""
    record = ops.get(op_type)
    return (
        record is not None
        and record.meaning is not None
        and not is_stateful(op_type)
        and not is_constexpr(op_type)
    )


def meaning(op: Operation, values: Mapping[str, np.ndarray | str]) -> list[np.ndarray]:
    """The op's outputs in float64 from its inputs' values (by var name), unrounded: the caller
    stores each in its output's dtype."""
    result = ops.meaning(op.type)(Args(op, dict(values), {}, exact=True))  # type: ignore[arg-type]
    parts = list(result) if isinstance(result, list | tuple) else [result]
    return [np.asarray(p) for p in parts]


def output_types(
    op_type: str, name: str, inputs: dict[str, Input], target: Target
) -> list[TensorType]:
    """The op's output types, checked as the builder checks them (raises MILBuildError)."""
    return ops.infer(op_type, name, inputs, target)


def reported_failing() -> frozenset[str]:
    """The ops whose records report them failing on the ANE (AneFacts: one project reports it,
    none reports it working): the preflight warns of each (app/preflight/checks_ops.py), and
    the default pipeline for ANE-direct runtimes writes none where the program had none."""
    return frozenset(r.name for r in ops.records() if r.ane.status is AneStatus.REPORTED_FAILING)
