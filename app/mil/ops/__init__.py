"""The MIL primitives: one record per op (`record.OpRecord`), filed by family, listed here.

Everything the service knows about a primitive sits in its record: declaration and type rule,
float64 meaning, traits, graph summary and error bound, ANE facts with their sources, cost, and
Apple's histogram spelling. The builder, both emitters and the parser, the reference executor,
graphs, the preflight, the estimate and the .mlmodelc writer read the records through the
functions below, at call time (never a copy made at import), so `RECORDS` is the one list.

Adding a primitive is adding its record to a module of its family (docs/architecture.md); each
module holds one family's records (`F`) and a family may span modules (elementwise and logic).
"""

from __future__ import annotations

from collections.abc import Mapping

from app.language.targets import Target
from app.mil.ir import Input
from app.mil.ops import (
    activation,
    constexpr,
    conv,
    elementwise,
    indexing,
    layout,
    linear,
    logic,
    normalization,
    pool,
    quantization,
    reduction,
    slices,
    spatial,
    state,
)
from app.mil.ops.check import check
from app.mil.ops.record import (
    AneFacts,
    AneStatus,
    Arg,
    Decompression,
    Family,
    Form,
    GraphUse,
    Meaning,
    OpRecord,
    Seen,
    Trait,
)
from app.mil.types import TensorType

RECORDS: tuple[OpRecord, ...] = (
    *elementwise.RECORDS,
    *logic.RECORDS,
    *quantization.RECORDS,
    *activation.RECORDS,
    *reduction.RECORDS,
    *pool.RECORDS,
    *normalization.RECORDS,
    *conv.RECORDS,
    *linear.RECORDS,
    *layout.RECORDS,
    *slices.RECORDS,
    *indexing.RECORDS,
    *spatial.RECORDS,
    *state.RECORDS,
    *constexpr.RECORDS,
)

_indexed: tuple[tuple[OpRecord, ...], dict[str, OpRecord]] = ((), {})


def _by_name() -> dict[str, OpRecord]:
    """`RECORDS` by name, made again whenever the list is another one (a test's extension)."""
    global _indexed
    listed, by_name = _indexed
    if listed is not RECORDS:
        by_name = {r.name: r for r in RECORDS}
        if len(by_name) != len(RECORDS):
            twice = sorted({r.name for r in RECORDS if sum(s.name == r.name for s in RECORDS) > 1})
            raise ValueError(f"ops recorded twice: {', '.join(twice)}")
        _indexed = (RECORDS, by_name)
    return by_name


def records() -> tuple[OpRecord, ...]:
    """Every record, family by family."""
    return RECORDS


def get(name: str) -> OpRecord | None:
    return _by_name().get(name)


def built() -> list[OpRecord]:
    """The ops the builder emits (those with a declaration)."""
    return [r for r in RECORDS if r.form is not None]


def having(*traits: Trait) -> list[str]:
    """The names of the ops with every one of `traits`."""
    return [r.name for r in RECORDS if r.has(*traits)]


def has(name: str, *traits: Trait) -> bool:
    record = get(name)
    return record is not None and record.has(*traits)


def meaning(name: str) -> Meaning:
    """The float64 meaning of a built op (the reference executor runs it)."""
    record = get(name)
    if record is None or record.meaning is None:
        raise KeyError(f"op {name!r} has no float64 meaning")
    return record.meaning


def lookup(op_type: str, target: Target) -> Form | None:
    """The declaration of `op_type` in a target's opset (an earlier form where one applies)."""
    record = get(op_type)
    return record.form_in(target) if record is not None else None


def infer(op_type: str, name: str, inputs: Mapping[str, Input], target: Target) -> list[TensorType]:
    """Check an op application against its declaration and return its output types."""
    return check(get(op_type), op_type, name, inputs, target)


__all__ = [
    "RECORDS",
    "AneFacts",
    "AneStatus",
    "Arg",
    "Decompression",
    "Family",
    "Form",
    "GraphUse",
    "OpRecord",
    "Seen",
    "Trait",
    "built",
    "get",
    "has",
    "having",
    "infer",
    "lookup",
    "meaning",
    "records",
]
