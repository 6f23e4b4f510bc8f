"""The MIL primitives a graph node may be: those whose record (app/mil/ops) gives a graph use
(a summary and the error bound it adds to a graph's tolerance), with the arguments the record
declares.

A node's `op` names a catalog op first: `conv` and `matmul` are the catalog's (with weights and
the ANE layout); the primitives of the same name are `mil.conv` and `mil.matmul`. Every other
primitive answers to its own name or to `mil.<name>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.errors import RequestError
from app.kernels import CATALOG, CatalogOp
from app.mil import ops
from app.mil.ops import Form, OpRecord
from app.mil.types import DType

PREFIX = "mil."


@dataclass(frozen=True)
class Primitive:
    """A primitive as a graph node: its record, with the graph's words for it."""

    record: OpRecord

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def form(self) -> Form:
        assert self.record.form is not None
        return self.record.form

    @property
    def summary(self) -> str:
        assert self.record.graph is not None
        return self.record.graph.summary

    @property
    def tolerance(self) -> float:
        assert self.record.graph is not None
        return self.record.graph.error_bound

    @property
    def compounding(self) -> bool:
        """Whether the relative errors of its inputs add up in its output (products)."""
        return self.record.has(ops.Trait.COMPOUNDING)

    @property
    def tensor_args(self) -> list[str]:
        return [a for a, spec in self.form.args.items() if not spec.const]

    @property
    def param_args(self) -> list[str]:
        return [a for a, spec in self.form.args.items() if spec.const]

    @property
    def weight_args(self) -> list[str]:
        """What a node's `weights` may give: its tensor arguments, and the const ones that hold
        numbers (layer_norm's gamma, linear's weight, quantize's int8 zero point), which
        params may give as JSON too."""
        return [
            a
            for a, spec in self.form.args.items()
            if not spec.const or DType.STRING not in self.form.allowed(spec)
        ]


def primitives() -> list[Primitive]:
    """Every primitive a graph node may be, in the records' order."""
    return [Primitive(r) for r in ops.built() if r.graph is not None]


def _primitive(name: str) -> Primitive | None:
    record = ops.get(name)
    if record is None or record.form is None or record.graph is None:
        return None
    return Primitive(record)


def resolve_op(name: str, field: str) -> CatalogOp | Primitive:
    """What a node's `op` names: a catalog op usable as a node, or an allowed primitive."""
    if name in CATALOG:
        op = CATALOG[name]
        if op.bind is None:
            raise RequestError(
                field, f"catalog op {name!r} cannot be a graph node (it needs a state)"
            )
        return op
    primitive = _primitive(name.removeprefix(PREFIX))
    if primitive is None:
        raise RequestError(
            field,
            f"{name!r} is neither a catalog op nor an allowed MIL primitive; the primitives: "
            f"{', '.join(p.name for p in primitives())} (GET /v1/ops)",
        )
    return primitive


def describe() -> list[dict[str, Any]]:
    """The allowlist as data (GET /v1/ops): per primitive its arguments and what they take."""
    out = []
    for p in primitives():
        form = p.form
        args = {
            arg: {
                "in": "params" if spec.const else "inputs",
                "required": not spec.optional,
                "dtypes": sorted(d.value for d in form.allowed(spec)),
                **({"weights": True} if spec.const and arg in p.weight_args else {}),
                **({"list": True} if spec.variadic else {}),
            }
            for arg, spec in form.args.items()
        }
        spelled = f"{PREFIX}{p.name}" if p.name in CATALOG else p.name
        out.append(
            {
                "name": spelled,
                "summary": p.summary,
                "arguments": args,
                "since": p.record.since,
                "tolerance": p.tolerance,
            }
        )
    return out
