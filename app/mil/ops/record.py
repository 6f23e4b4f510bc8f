"""The record of one MIL primitive: everything the service knows about an op, in one value.

A record holds the op's declaration (arguments, dtypes, type rule, spelling, per opset), its
float64 meaning (what the reference executor runs), its traits (what passes and checks ask of
it), its place in graphs (summary and fp16 error bound), its ANE facts with their sources, its
cost, and Apple's histogram spelling. The records are listed in `app.mil.ops` (one module per
family); every other module reads them there.

A record without a `form` is an op the builder never emits: one known from other programs (Apple
bundles, foreign model.mil files) and kept for the facts the service reports about it. Such a
record carries only the traits a check reads today (pow: elementwise binary and nonlinear, log:
needs epsilon); whoever gives it a form gives it the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, NamedTuple

import numpy as np

from app.language.targets import ALL_TARGETS, TARGETS, Target
from app.mil.args import Args
from app.mil.call import Call
from app.mil.ir import Operation, Var
from app.mil.types import DType, TensorType

INT = frozenset({DType.INT32})
BOOL = frozenset({DType.BOOL})
STR = frozenset({DType.STRING})
ANY_TENSOR = frozenset({DType.FP16, DType.FP32, DType.INT32, DType.BOOL})

InferRule = Callable[[Call], list[TensorType]]
# How many outputs an application gives, from its const arguments as plain values (a graph
# node's params); None when they do not say (the op's own check then refuses them).
OutputCount = Callable[[Mapping[str, Any]], int | None]
Meaning = Callable[[Args], np.ndarray | list[np.ndarray] | tuple[np.ndarray, ...] | None]
Cost = Callable[[Operation], int]
Lowering = Callable[[Operation, bool, set[str]], list[Operation]]


class Family(StrEnum):
    """The op families, as coremltools files its op definitions (`ops/defs/iOS15/*.py`)."""

    ELEMENTWISE = "elementwise"
    ACTIVATION = "activation"
    REDUCTION = "reduction"
    NORMALIZATION = "normalization"
    LINEAR = "linear and convolution"
    LAYOUT = "tensor layout"
    STATE = "state"
    CONSTEXPR = "constexpr"


class Trait(StrEnum):
    """What a pass or a check may ask of an op without naming it."""

    ELEMENTWISE = "elementwise"  # output element i reads input elements i (after broadcasting)
    UNARY = "unary"  # one tensor argument, `x`
    BINARY = "binary"  # two tensor arguments, `x` and `y`, broadcast against each other
    COMMUTATIVE = "commutative"  # f(x, y) == f(y, x)
    ASSOCIATIVE = "associative"  # f(f(x, y), z) == f(x, f(y, z))
    IDEMPOTENT = "idempotent"  # f(f(x)) == f(x)
    # Relative errors of the inputs add up in the output (products, quotients, matrix products):
    # a graph's tolerance sums its inputs' bounds there, takes their maximum elsewhere.
    COMPOUNDING = "compounding"
    # A nonlinearity the ANE compiler may fuse with the op before it (ANEForge `_compile.py`
    # `_e_square`: square feeding one fails at some widths).
    NONLINEAR = "nonlinear"
    # ironmill's op support matrix: the ANE needs an explicit epsilon for these.
    NEEDS_EPSILON = "needs epsilon"
    DATA_MOVEMENT = "data movement"  # no arithmetic: every output element is an input element
    SHAPE_ONLY = "shape only"  # the same elements in the same order, another shape


class AneStatus(StrEnum):
    SUPPORTED = "supported"  # no report says the ANE fails it (`AneFacts.reported`: one ran it)
    UNSUPPORTED = "unsupported"  # the ANE backend does not implement it (an error)
    REPORTED_FAILING = "reported failing"  # one project reports it failing, none working
    DISPUTED = "disputed"  # one project lists it missing while another runs it


@dataclass(frozen=True)
class AneFacts:
    """What is reported of an op on the ANE. A supported op may carry the report that ran it
    (reason and source); one without is supported only in that nobody reported it failing."""

    status: AneStatus = AneStatus.SUPPORTED
    reason: str = ""  # what was reported and what to write instead
    source: str = ""  # where it was reported (app.mil.ops.sources)

    @property
    def reported(self) -> str:
        """The status as docs show it: "no report" for a supported op nobody reported on."""
        if self.status is AneStatus.SUPPORTED and not self.source:
            return "no report"
        return self.status.value


SUPPORTED = AneFacts()


def ran_on_ane(reason: str, source: str) -> AneFacts:
    """Supported, with the report that compiled and ran it on the ANE."""
    return AneFacts(AneStatus.SUPPORTED, reason, source)


@dataclass(frozen=True)
class Arg:
    dtypes: frozenset[DType] | str  # allowed dtypes, or a type-variable name shared by arguments
    optional: bool = False
    const: bool = False  # an attribute: produced by a const op (its value drives type inference)
    variadic: bool = False  # a tuple of vars, spelled `(a, b)`
    state: bool = False  # a state<tensor<...>> parameter


@dataclass(frozen=True)
class Form:
    """How an opset declares the op: its arguments, their dtypes, its type rule, its spelling."""

    args: Mapping[str, Arg]
    infer: InferRule
    domains: Mapping[str, frozenset[DType]] = field(default_factory=dict)
    # How the arguments are written. "refs": names of vars (every ordinary op). Constexpr ops hold
    # their values themselves, as coremltools serialises them: "inline" as values bound to the
    # inputs (iOS18 declarations), "attributes" in the attribute block with empty parentheses
    # (iOS16 declarations, in any program that uses them).
    spelling: Literal["refs", "inline", "attributes"] = "refs"
    until: str | None = None  # the last target of a form a later opset replaced

    def allowed(self, spec: Arg) -> frozenset[DType]:
        """The dtypes an argument takes (a type variable's domain, any tensor dtype if unbound)."""
        if isinstance(spec.dtypes, str):
            return self.domains.get(spec.dtypes, ANY_TENSOR)
        return spec.dtypes


@dataclass(frozen=True)
class GraphUse:
    """A primitive a graph node may be: what it does, and the bound on the normwise relative
    error it adds in fp16 (none for data movement, ~2u for one rounding, 4u for a transcendental
    or an accumulation; u = 2^-11)."""

    summary: str
    error_bound: float


class Seen(NamedTuple):
    """An op version Apple's histogram showed for a program opset, and the bundle it was in."""

    version: int  # iOS version of the op (15: the base version)
    bundle: str


@dataclass(frozen=True)
class Decompression:
    """What a constexpr op decompresses from: a palette, scaled integers, a sparse mask, or
    values of another dtype (`cast`)."""

    kind: Literal["palette", "linear", "sparse", "cast"]
    source: str | None = None  # linear: the operand whose element type is the stored precision


def elementwise_flops(op: Operation) -> int:
    """One FLOP per element of the largest operand or output (elementwise ops, reductions and
    data movement alike: small beside the matrix products)."""
    out = sum(_size(v) for v in op.outputs)
    return max([out, *(_size(v) for value in op.inputs.values() for v in _vars(value))])


def output_flops(op: Operation) -> int:
    """One per output element (a constexpr op decompresses one element each)."""
    return sum(_size(v) for v in op.outputs)


def _vars(value: Var | tuple[Var, ...]) -> tuple[Var, ...]:
    return value if isinstance(value, tuple) else (value,)


def _size(var: Var) -> int:
    return math.prod(var.tensor.shape)


@dataclass(frozen=True, eq=False)
class OpRecord:
    name: str
    family: Family
    form: Form | None = None  # None: never built here, known from other programs
    earlier: Form | None = None  # a form targets up to `earlier.until` use (an older opset's)
    since: str = "ios17"  # the first target built here whose opset has the op
    meaning: Meaning | None = None  # its float64 meaning (app.mil.args: fp32 for elementwise)
    traits: frozenset[Trait] = frozenset()
    graph: GraphUse | None = None  # None: not a graph node
    ane: AneFacts = SUPPORTED
    flops: Cost = elementwise_flops
    # Apple's histogram: program opset (iOS version) -> the op version it showed there
    histogram: Mapping[int, Seen] = field(default_factory=dict)
    decompresses: Decompression | None = None  # constexpr ops
    outputs: OutputCount | None = None  # None: one output whatever the arguments
    # A coremltools dialect op: the ops a program's text and protobuf hold for it, given whether
    # anything reads its outputs and the op names the function already has (None: written as
    # itself)
    lowered: Lowering | None = None

    def form_in(self, target: Target) -> Form | None:
        """The declaration in a target's opset (an earlier form where one applies)."""
        earlier = self.earlier
        if (
            earlier is not None
            and earlier.until
            and target.order <= ALL_TARGETS[earlier.until].order
        ):
            return earlier
        return self.form

    @property
    def availability(self) -> dict[str, bool]:
        """Per target built here: whether its opset has the op."""
        built = self.form is not None
        return {name: built and t.includes(self.since) for name, t in TARGETS.items()}

    def has(self, *traits: Trait) -> bool:
        return all(t in self.traits for t in traits)

    def output_count(self, params: Mapping[str, Any]) -> int | None:
        return 1 if self.outputs is None else self.outputs(params)


def traits(*names: Trait) -> frozenset[Trait]:
    return frozenset(names)
