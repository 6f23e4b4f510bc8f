"""A graph as built (its nodes, weights and program), what it means in float64, and how close its
fp16 program must come.

The meaning composes each node's own: a catalog op's `definition` (written from the math, not
from its MIL) with the weights as given, a primitive's float64 meaning (its record in
app/mil/ops), without rounding. Verification runs the program with fp16 storage and compares.

Tolerance of an output: each node adds its own bound (a catalog op's `tolerance`; a primitive's,
its record's graph use) to what its inputs carry: the sum of its inputs' bounds for ops whose
relative errors compound (products, quotients, matrix products: the records' `compounding`
trait; and catalog ops), their maximum for the others (sums, data movement, activations). That
is a first-order bound for well-conditioned graphs; a graph that amplifies errors (cancellation
in `sub`, division by values near zero, `exp` of large values) can exceed it, and verification
then says so rather than hiding it. Bounds are capped at 1 (an error the size of the output
itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.graphs.primitives import Primitive
from app.graphs.spec import GRAPH_OP, GraphNode, GraphParams
from app.kernels import CatalogOp, ProgramBuild
from app.kernels.op import Arrays
from app.mil import DType, Operation, ops
from app.mil.args import Args
from app.mil.ops.common import U


@dataclass(frozen=True)
class BuiltNode:
    """A node as built: what verification needs to compute its float64 meaning."""

    index: int
    node: GraphNode
    op: CatalogOp | Primitive
    params: Any  # the catalog op's complete params (None for a primitive)
    args: dict[str, str | tuple[str, ...]]  # argument -> the var names it reads
    outputs: tuple[str, ...]  # the var names it produces
    weights: dict[str, str] = field(default_factory=dict)  # its weight name -> request key


@dataclass(frozen=True)
class GraphBuild(ProgramBuild):
    """A graph's build: many ops, each a node (`params` is the graph)."""

    params: GraphParams
    nodes: tuple[BuiltNode, ...] = ()
    consts: dict[str, str] = field(default_factory=dict)  # weight key -> its const op

    @property
    def op_name(self) -> str:
        return GRAPH_OP

    def const_name(self, weight: str) -> str:
        return self.consts[weight]

    def where(self, name: str) -> str:
        """The graph path of an op (named after its node, `<node>_...` inside a catalog op) or of
        an input/output."""
        ids = {n.node.id: n.index for n in self.nodes}
        node = (
            name
            if name in ids
            else max((i for i in ids if name.startswith(f"{i}_")), key=len, default=None)
        )
        if node is not None:
            return f"nodes[{ids[node]}]"
        return f"inputs.{name}" if name in self.params.inputs else f"outputs.{name}"

    def tolerance(self, output: str) -> float:
        return tolerance(self, output)

    def exact(self, inputs: Arrays, states: Arrays, *, original: bool = False) -> tuple[dict, dict]:
        return evaluate(self, inputs, original=original), {}


def evaluate(
    build: GraphBuild, inputs: Mapping[str, np.ndarray], *, original: bool = False
) -> dict[str, np.ndarray]:
    """The graph's outputs in float64, node by node, with the weights the program holds
    (quantized ones decompressed) or, `original`, as given."""
    values: dict[str, np.ndarray] = {
        n: np.asarray(inputs[n], np.float64) for n in build.params.inputs
    }
    ops = {op.name: op for op in build.built_program.main.operations}
    weights = build.weights if original else build.program_weights
    originals = {build.consts[key]: array for key, array in weights.items()}
    for node in build.nodes:
        if isinstance(node.op, Primitive):
            op = ops[node.node.id]
            view: dict[str, np.ndarray | str] = dict(values)
            for value in op.inputs.values():
                for var in value if isinstance(value, tuple) else (value,):
                    if var.op is not None and var.op.type == "const":
                        view[var.name] = _const(var.op, originals)
            result = _exact(op, view)
            results = result if len(op.outputs) > 1 else [result]
            assert isinstance(results, list | tuple)  # a meaning gives a list for several
            for var, array in zip(op.outputs, results, strict=True):
                values[var.name] = np.asarray(array)
        else:
            # a catalog op reads one var per argument (a tuple only ever feeds a primitive)
            args = {arg: values[name] for arg, name in node.args.items()}  # type: ignore[index]
            given = {w: weights[key] for w, key in node.weights.items()}
            outputs, _ = node.op.definition(node.params, args, given, {})
            values[node.outputs[0]] = outputs["y"]
    return {name: values[name] for name in build.params.outputs}


def _const(op: Operation, originals: Mapping[str, np.ndarray]) -> np.ndarray | str:
    given = originals.get(op.name)
    if given is None:
        assert op.value is not None  # a const op
        return op.value.stored()
    # a weight: its values as given, not as fp16 stores them
    return np.asarray(given, np.float64) if given.dtype.kind == "f" else given


def _exact(
    op: Operation, values: dict[str, np.ndarray | str]
) -> np.ndarray | list[np.ndarray] | tuple[np.ndarray, ...] | None:
    return ops.meaning(op.type)(Args(op, values, {}, exact=True))


def tolerance(build: GraphBuild, output: str) -> float:
    rounded = _rounded_inputs(build)
    bound: dict[str, float] = {name: U if name in rounded else 0.0 for name in build.params.inputs}
    for node in build.nodes:
        carried = [
            bound.get(name, 0.0)
            for names in node.args.values()
            for name in (names if isinstance(names, tuple) else (names,))
        ]
        compounding = not isinstance(node.op, Primitive) or node.op.compounding
        inherited = sum(carried) if compounding else max(carried, default=0.0)
        for name in node.outputs:
            bound[name] = min(1.0, inherited + node.op.tolerance)
    return float(f"{bound[output]:.3g}")


def _rounded_inputs(build: GraphBuild) -> set[str]:
    """The fp32 inputs the program reads only through casts to fp16 (graph passes: add_fp16_cast):
    each carries one rounding (2⁻¹¹, relative) from the start, which no node's bound counts."""
    if build.as_built is None:
        return set()
    fn = build.program.main
    readers: dict[str, list] = {v.name: [] for v in fn.inputs if v.tensor.dtype is DType.FP32}
    for op in fn.operations:
        for value in op.inputs.values():
            for v in value if isinstance(value, tuple) else (value,):
                if v.name in readers and v.op is None:
                    readers[v.name].append(op)
    return {
        name
        for name, ops in readers.items()
        if ops and all(op.type == "cast" and op.outputs[0].tensor.dtype is DType.FP16 for op in ops)
    }
