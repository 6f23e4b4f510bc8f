"""The op catalog: every op's module, listed once (app/catalog_build.py builds from it), and
what a build of a program is.

The catalog lists each op's module once, in the order users see it (GET /v1/ops, the CLI);
everything else about an op is declared in its module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Self

import numpy as np
import orjson
from pydantic import ValidationError

from app.errors import ErrorKind, RequestError
from app.kernels import (
    attention,
    conv,
    decoder_layer,
    decoder_stack,
    ffn,
    gqa_expand,
    identity,
    matmul,
    read_state,
    rmsnorm,
    scale,
    sdpa,
    update_state,
)
from app.kernels.compressed import (
    QuantizedWeight,
)
from app.kernels.op import Arrays, CatalogOp, const_name
from app.kernels.params import OpParams
from app.mil import Function, Program, Target, Var
from app.passes import PassReport, Pipeline, run_pipeline

_MODULES = (
    conv,
    matmul,
    identity,
    scale,
    rmsnorm,
    sdpa,
    gqa_expand,
    read_state,
    update_state,
    ffn,
    attention,
    decoder_layer,
    decoder_stack,
)
CATALOG: dict[str, CatalogOp] = {m.OP.name: m.OP for m in _MODULES}


@dataclass(frozen=True)
class ProgramBuild(ABC):
    """A built program: what the builder (app/artifacts.py), packaging and verification need of
    it, whatever made it. A catalog kernel's is a `KernelBuild`, a package of several functions of
    one op a `FunctionsBuild` (app/kernels/functions.py), a graph's a `GraphBuild`
    (app/graphs/built.py); each says what differs for its kind here, so the builder never asks
    which kind it holds."""

    params: OpParams  # a graph's are its GraphParams
    target: Target
    name: str
    program: Program
    # as given (validated, canonical shapes); weights read on demand are read again when asked
    # for here (app/kernels/weight_check.py, PreparedWeights)
    weights: Mapping[str, np.ndarray]
    quantized: Mapping[str, QuantizedWeight] = field(default_factory=dict)  # by weight key
    # After graph passes (app/passes): what they did, and the program as built before them
    # (its ops and consts are the ones the request's nodes and weights name). None: none ran.
    passes: PassReport | None = None
    as_built: Program | None = None

    @property
    def built_program(self) -> Program:
        """The program as built from the request, before any pass rewrote it."""
        return self.as_built if self.as_built is not None else self.program

    def through(self, pipeline: Pipeline | None) -> Self:
        """This build with its program through the graph passes `pipeline` (app/passes), the
        program as built kept beside it; itself when none run."""
        if pipeline is None:
            return self
        program, report = run_pipeline(self.program, pipeline)
        return replace(self, program=program, passes=report, as_built=self.program)

    def as_written_through(self, pipeline: Pipeline) -> Self:
        """A program written by hand (a catalog kernel's, a kit's) through `pipeline`
        (app/passes `hand_written`): itself, as built, when no pass changes anything (so its key,
        its kernel.json and its bytes are the ones it had before it met the passes); otherwise
        as `through`, the report in kernel.json."""
        program, report = run_pipeline(self.program, pipeline)
        if not report.changes:
            return self
        return replace(self, program=program, passes=report, as_built=self.program)

    @property
    def program_weights(self) -> dict[str, np.ndarray]:
        """The weights the program computes with: quantized ones as they decompress."""
        return {
            k: self.quantized[k].decompressed if k in self.quantized else self.weights[k]
            for k in self.weights
        }

    @property
    def function_builds(self) -> tuple[ProgramBuild, ...]:
        """One build per function of the program: this one, unless it packages several
        (app/kernels/functions.py), each of them a program of its own to size and preflight."""
        return (self,)

    @property
    @abstractmethod
    def op_name(self) -> str:
        """The one word naming what was built: the catalog op, or "graph"."""

    def const_name(self, weight: str) -> str:
        """The const op that holds weight `weight` in the program."""
        return const_name(weight)

    @abstractmethod
    def where(self, name: str) -> str:
        """The request field behind an op or input/output of the program."""

    @abstractmethod
    def tolerance(self, output: str) -> float:
        """The bound output `output` must meet against `exact` (app/reference/verify.py)."""

    @abstractmethod
    def exact(self, inputs: Arrays, states: Arrays, *, original: bool = False) -> tuple[dict, dict]:
        """The float64 outputs and states after the call, with the weights the program holds
        (quantized ones decompressed) or, `original`, as given."""

    def verification_notes(self, drawn: dict[str, np.ndarray], seed: int) -> dict[str, str]:
        """Sets the drawn inputs whose standard-normal draw means nothing to values the program
        is meant for, in place; how each was drawn (none here)."""
        return {}

    def preflight_key(self) -> Hashable | None:
        """What the ANE preflight's findings follow from, when that is less than the whole
        build: builds with equal keys have equal findings. None: the findings are the build's
        own (not shared)."""
        return None

    def describe(self) -> dict[str, Any]:
        """What kernel.json says of this kind of build beside what it says of every build."""
        return {}

    def signature(self) -> dict[str, Any]:
        """Each function's inputs, states and outputs (name, shape, dtype), by function name."""
        return {"main": function_io(self.program.main)}

    def verify(self, check: Callable[[ProgramBuild], dict[str, Any]]) -> dict[str, Any]:
        """The verification report: `check` (app/reference/verify.py) run on the program."""
        return check(self)


@dataclass(frozen=True)
class KernelBuild(ProgramBuild):
    """A catalog kernel's build: one op, its params and weights."""

    op: CatalogOp = field(kw_only=True)

    @property
    def op_name(self) -> str:
        return self.op.name

    def where(self, name: str) -> str:
        """A kernel's program follows from its params."""
        return "params"

    def tolerance(self, output: str) -> float:
        return self.op.tolerance

    def exact(self, inputs: Arrays, states: Arrays, *, original: bool = False) -> tuple[dict, dict]:
        """From the op's definition (written from the math, not from its MIL)."""
        weights = self.weights if original else self.program_weights
        return self.op.definition(self.params, inputs, weights, states)

    def verification_notes(self, drawn: dict[str, np.ndarray], seed: int) -> dict[str, str]:
        adjust = self.op.verification_inputs
        return adjust(self.params, drawn, seed) if adjust is not None else {}

    def preflight_key(self) -> Hashable | None:
        """The preflight reads shapes, dtypes and small const arguments, never a weight's values:
        a kernel's findings follow from its op, params, target and quantization, so kernels that
        differ only in their weights (the layers of a model, a build farm's manifest) share
        them. Params as JSON text: they may hold lists, which do not hash. A kernel the graph
        passes changed (a gain of ones, two equal weights: what they do can follow from the
        weights' values) has findings of its own."""
        if self.passes is not None:
            return None
        params = orjson.dumps(self.params.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
        quantized = tuple(sorted((key, q.config) for key, q in self.quantized.items()))
        return self.op.name, params, self.target.name, quantized


def function_io(fn: Function) -> dict[str, Any]:
    """A function's inputs (tensors), states and outputs: name, shape, dtype."""

    def io(var: Var) -> dict[str, Any]:
        return {"name": var.name, "shape": list(var.tensor.shape), "dtype": var.tensor.dtype.value}

    return {
        "inputs": [io(v) for v in fn.inputs if v.type == v.tensor],
        "states": [io(v) for v in fn.inputs if v.type != v.tensor],
        "outputs": [io(v) for v in fn.outputs],
    }


def get_op(op: str) -> CatalogOp:
    try:
        return CATALOG[op]
    except KeyError:
        raise RequestError(
            "op",
            f"unknown op {op!r}; the catalog has {', '.join(CATALOG)}",
            kind=ErrorKind.NOT_FOUND,
            title="Unknown op",
        ) from None


def parse_params(op: CatalogOp, params: Mapping[str, Any] | OpParams | None) -> OpParams:
    if isinstance(params, op.params):
        return params
    try:
        return op.params.model_validate(dict(params or {}))
    except ValidationError as exc:
        # every fault, the first named as the field: a mistyped key hides behind no other error
        faults = [(_param_field(e["loc"]), e["msg"]) for e in exc.errors()]
        also = "".join(f"; also {field}: {msg}" for field, msg in faults[1:])
        raise RequestError(faults[0][0], faults[0][1] + also) from None


def _param_field(loc: tuple) -> str:
    path = ".".join(str(p) for p in loc)
    return f"params.{path}" if path else "params"
