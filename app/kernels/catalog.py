"""The op catalog: every op's module, listed once (app/catalog_build.py builds from it).

The catalog lists each op's module once, in the order users see it (GET /v1/ops, the CLI);
everything else about an op is declared in its module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
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
from app.mil import Program, Target
from app.passes import PassReport

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
class KernelBuild:
    """A built program: everything packaging and verification need. A catalog kernel's is this;
    a graph's (app/graphs) derives from it."""

    op: CatalogOp | None  # None for a graph (app/graphs), which is many ops
    params: OpParams
    target: Target
    name: str
    program: Program
    weights: dict[str, np.ndarray]  # as given (validated, canonical shapes)
    quantized: Mapping[str, QuantizedWeight] = field(default_factory=dict)  # by weight key
    # After graph passes (app/passes): what they did, and the program as built before them
    # (its ops and consts are the ones the request's nodes and weights name). None: none ran.
    passes: PassReport | None = None
    as_built: Program | None = None

    @property
    def built_program(self) -> Program:
        """The program as built from the request, before any pass rewrote it."""
        return self.as_built if self.as_built is not None else self.program

    @property
    def program_weights(self) -> dict[str, np.ndarray]:
        """The weights the program computes with: quantized ones as they decompress."""
        return {
            k: self.quantized[k].decompressed if k in self.quantized else w
            for k, w in self.weights.items()
        }

    @property
    def function_builds(self) -> tuple[KernelBuild, ...]:
        """One build per function of the program: this one, unless it packages several
        (app/kernels/functions.py), each of them a program of its own to size and preflight."""
        return (self,)

    @property
    def op_name(self) -> str:
        assert self.op is not None
        return self.op.name

    def const_name(self, weight: str) -> str:
        """The const op that holds weight `weight` in the program."""
        return const_name(weight)

    def where(self, name: str) -> str:
        """The request field behind an op or input/output of the program (a kernel's program
        follows from its params)."""
        return "params"

    def tolerance(self, output: str) -> float:
        """The bound output `output` must meet against `exact` (app/reference/verify.py)."""
        assert self.op is not None
        return self.op.tolerance

    def exact(self, inputs: Arrays, states: Arrays, *, original: bool = False) -> tuple[dict, dict]:
        """The float64 outputs and states after the call, from the op's definition, with the
        weights the program holds (quantized ones decompressed) or, `original`, as given."""
        assert self.op is not None
        weights = self.weights if original else self.program_weights
        return self.op.definition(self.params, inputs, weights, states)


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
