"""What the passes know about an op type, read in one place: its record (app/mil/ops).

Every pass asks here (never a list of op names of its own): the record's traits say which ops
compute element by element, which have an effect, which decompress; its float64 meaning computes
an op from its inputs' values; its declaration infers output types; its ANE facts say which ops a
runtime reports failing. A primitive added as a record is known to every pass from that alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from app.language.targets import Target
from app.mil import ops
from app.mil.args import Args
from app.mil.ir import Input, Operation, Var
from app.mil.ops import AneStatus, Family, OpRecord, Trait
from app.mil.types import DType, TensorType


@dataclass(frozen=True)
class _Kinds:
    """The op types of each kind the passes ask about, read from one list of records."""

    unary: frozenset[str]
    binary: frozenset[str]
    moves_data: frozenset[str]
    shape_only: frozenset[str]
    reductions: frozenset[str]
    stateful: frozenset[str]
    constexpr: frozenset[str]
    meaningful: frozenset[str]
    foldable: frozenset[str]  # meaningful, neither stateful nor constexpr

    @classmethod
    def of(cls, records: tuple[OpRecord, ...]) -> _Kinds:
        def having(*traits: Trait) -> frozenset[str]:
            return frozenset(r.name for r in records if r.has(*traits))

        def of_family(family: Family) -> frozenset[str]:
            return frozenset(r.name for r in records if r.family is family)

        return cls(
            unary=having(Trait.ELEMENTWISE, Trait.UNARY),
            binary=having(Trait.ELEMENTWISE, Trait.BINARY),
            moves_data=having(Trait.DATA_MOVEMENT),
            shape_only=having(Trait.SHAPE_ONLY),
            reductions=of_family(Family.REDUCTION),
            stateful=of_family(Family.STATE),
            constexpr=of_family(Family.CONSTEXPR),
            meaningful=frozenset(r.name for r in records if r.meaning is not None),
            foldable=frozenset(
                r.name
                for r in records
                if r.meaning is not None and r.family not in (Family.STATE, Family.CONSTEXPR)
            ),
        )


# The passes ask these questions for every op of a program, so the answers are read once per list
# of records (the records read one by one cost ~1 µs an answer, a quarter of the default
# pipeline's time on a program with nothing to change: bench/bench_passes.py); a list that is
# another one (a test's extension of it) is read again.
_read: tuple[tuple[OpRecord, ...], _Kinds | None] = ((), None)


def kinds() -> _Kinds:
    """The op types of each kind, as sets: the questions below ask it, and so may a pass that
    asks of every op (cheaper than a question a time)."""
    global _read
    records = ops.records()
    listed, known = _read
    if known is None or listed is not records:
        known = _Kinds.of(records)
        _read = (records, known)
    return known


def is_unary(op_type: str) -> bool:
    """y = f(x) element by element, the output shaped as x (const arguments such as rsqrt's
    epsilon or cast's dtype aside): a layout change before the op may move after it."""
    return op_type in kinds().unary


def is_binary(op_type: str) -> bool:
    """z = f(x, y) element by element with NumPy broadcasting."""
    return op_type in kinds().binary


def moves_data(op_type: str) -> bool:
    """No arithmetic: every output element is an input element (reshapes, transposes, slices)."""
    return op_type in kinds().moves_data


def is_shape_only(op_type: str) -> bool:
    """The same elements in the same order, another shape (reshape, expand_dims, squeeze)."""
    return op_type in kinds().shape_only


def is_reduction(op_type: str) -> bool:
    """A reduction over axes (its `axes` or `axis`; with keep_dims, the rank stays)."""
    return op_type in kinds().reductions


def is_stateful(op_type: str) -> bool:
    """Ops whose effect is not (only) their outputs: never removed, folded, merged or moved."""
    return op_type in kinds().stateful


def is_constexpr(op_type: str) -> bool:
    """Decompressed when the model loads: a constant, but one whose compressed form is the point."""
    return op_type in kinds().constexpr


def state_write(op: Operation) -> tuple[Var, Var] | None:
    """(the state, the value written) of an op that writes a state (write_state, and
    coreml_update_state, which also returns the value), read from its declaration: a state
    argument and a tensor one; None for any other op."""
    if not is_stateful(op.type):
        return None
    record = ops.get(op.type)
    form = None if record is None else record.form
    if form is None:
        return None
    states = [a for a, spec in form.args.items() if spec.state and a in op.inputs]
    values = [a for a, spec in form.args.items() if not spec.state and a in op.inputs]
    if len(states) != 1 or len(values) != 1:
        return None
    return op.var(states[0]), op.var(values[0])


def has_meaning(op_type: str) -> bool:
    """Whether the op's value can be computed here (and so folded when its inputs are consts)."""
    return op_type in kinds().foldable


def meaning(op: Operation, values: Mapping[str, np.ndarray | str]) -> list[np.ndarray]:
    """The op's outputs in float64 from its inputs' values (by var name), unrounded: the caller
    stores each in its output's dtype."""
    result = ops.meaning(op.type)(Args(op, values, {}, exact=True))
    parts = list(result) if isinstance(result, list | tuple) else [result]
    return [np.asarray(p) for p in parts]


def output_types(
    op_type: str, name: str, inputs: Mapping[str, Input], target: Target
) -> list[TensorType]:
    """The op's output types, checked as the builder checks them (raises MILBuildError)."""
    return ops.infer(op_type, name, inputs, target)


def takes_fp16(op_type: str, arg: str, target: Target) -> bool:
    """Whether argument `arg` of `op_type` may be fp16 in the target's opset (a scale factor or
    an epsilon some ops declare fp32 only stays fp32)."""
    return takes(op_type, arg, DType.FP16, target)


def takes(op_type: str, arg: str, dtype: DType, target: Target) -> bool:
    """Whether argument `arg` of `op_type` may be of `dtype` in the target's opset (a reshape
    takes int8 from iOS17 on, not before)."""
    form = ops.lookup(op_type, target)
    spec = None if form is None else form.args.get(arg)
    return form is not None and spec is not None and dtype in form.allowed(spec)


def reported_failing() -> frozenset[str]:
    """The ops whose records report them failing on the ANE (AneFacts: one project reports it,
    none reports it working): the preflight warns of each (app/preflight/checks_ops.py), and
    the default pipeline for ANE-direct runtimes writes none where the program had none."""
    return frozenset(r.name for r in ops.records() if r.ane.status is AneStatus.REPORTED_FAILING)
