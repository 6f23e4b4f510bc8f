"""A graph too heavy for one program, cut at node boundaries into a chain of programs, each
within the weight budget.

Nodes are taken in the build order and a program is closed when the next node's weights would
take it over the budget. Each program is a graph of its own: its inputs are the graph inputs it
reads and the values earlier programs pass on (named after the values), its outputs the values
later programs or the graph's outputs need. `chain.json` records which output feeds which input.
A node whose weights alone exceed the budget cannot be cut: that is refused, naming the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.catalog_build import build_kernel
from app.errors import RequestError
from app.graphs.build import build_graph
from app.graphs.built import BuiltNode, GraphBuild
from app.graphs.spec import GraphParams, producer
from app.kernels import KernelBuild, ProgramBuild
from app.quantize import QuantizeConfig
from app.settings import PROGRAM_WEIGHT_BUDGET_SETTING


@dataclass(frozen=True)
class Link:
    """Where a program input comes from: a graph input, or an output of an earlier program."""

    program: int | None  # None: the graph input of that name
    name: str

    def to_json(self) -> dict[str, Any]:
        if self.program is None:
            return {"from": "input", "name": self.name}
        return {"from": "program", "program": self.program, "name": self.name}


@dataclass(frozen=True)
class Chain:
    """The programs of a split graph, in the order to run them, and their wiring."""

    parts: tuple[ProgramBuild, ...]
    inputs: tuple[dict[str, Link], ...]  # per program: input name -> where it comes from
    outputs: dict[str, Link]  # graph output -> the program output that holds it

    def to_json(self, paths: list[str]) -> dict[str, Any]:
        return {
            "programs": [
                {
                    "name": part.name,
                    "path": path,
                    "inputs": {n: link.to_json() for n, link in inputs.items()},
                    "outputs": [v.name for v in part.program.main.outputs],
                }
                for part, path, inputs in zip(self.parts, paths, self.inputs, strict=True)
            ],
            "outputs": {n: link.to_json() for n, link in self.outputs.items()},
        }


def node_weight_bytes(build: GraphBuild) -> dict[int, int]:
    """Weight bytes (as stored in weight.bin) each node brings, by node index."""
    out: dict[int, int] = {}
    for op in build.built_program.blob_consts():
        assert op.value is not None and not isinstance(op.value.data, str)
        where = build.where(op.name)
        index = int(where.removeprefix("nodes[").removesuffix("]"))
        out[index] = out.get(index, 0) + op.value.nbytes
    return out


def cut(build: GraphBuild, budget: int) -> list[list[BuiltNode]]:
    """The nodes of each program, in build order, each group within `budget`."""
    sizes = node_weight_bytes(build)
    groups: list[list[BuiltNode]] = [[]]
    held = 0
    for node in build.nodes:
        size = sizes.get(node.index, 0)
        if size > budget:
            raise RequestError(
                f"nodes[{node.index}]",
                f"node {node.node.id!r} alone holds {size} bytes of weights, over the budget of "
                f"{budget} bytes per program ({PROGRAM_WEIGHT_BUDGET_SETTING}): no cut can bring "
                f"it within; raise {PROGRAM_WEIGHT_BUDGET_SETTING} to at least {size}, or quantize",
                title="Program too large",
                limit=budget,
            )
        if groups[-1] and held + size > budget:
            groups.append([])
            held = 0
        groups[-1].append(node)
        held += size
    return groups


def split(
    build: GraphBuild, budget: int, weights: Mapping[str, np.ndarray], target, name: str
) -> Chain:
    """The chain for a graph already built whole (`build`), with the weights it was built with
    (`build.weights`: as validated, random ones included)."""
    graph = build.params
    groups = cut(build, budget)
    home = {var: k for k, group in enumerate(groups) for n in group for var in n.outputs}
    types = _var_types(build)
    ref_var = _ref_vars(build)
    exported = {var.name for var in build.program.main.outputs}  # named after graph outputs
    parts, links = [], []
    for k, group in enumerate(groups):
        ids = {n.node.id for n in group}
        read: dict[str, Link] = {}
        nodes = []
        for built in group:
            args = {}
            for arg, ref in built.node.inputs.items():
                args[arg] = (
                    [_carry(r, ids, ref_var, home, read, graph) for r in ref]
                    if isinstance(ref, list)
                    else _carry(ref, ids, ref_var, home, read, graph)
                )
            nodes.append(built.node.model_copy(update={"inputs": args}))
        later = {
            name
            for g in groups[k + 1 :]
            for n in g
            for names in n.args.values()
            for name in (names if isinstance(names, tuple) else (names,))
        }
        produced = {var: n for n in group for var in n.outputs}
        outputs = {
            var: _ref_of(var, node)
            for var, node in produced.items()
            if var in later or var in exported
        }
        inputs = {n: {"shape": list(types[n].shape), "dtype": types[n].dtype.value} for n in read}
        part_graph = GraphParams.model_validate(
            {"inputs": inputs, "nodes": [n.model_dump() for n in nodes], "outputs": outputs}
        )
        keys = {key for n in group for key in n.weights.values()}
        part_weights = {key: weights[key] for key in keys if key in weights}
        part = build_graph(part_graph, part_weights, target=target, name=f"{name}_{k}")
        # each part through the pipeline the whole went through (the request's)
        parts.append(part.through(build.passes.pipeline if build.passes is not None else None))
        links.append(read)
    final = {
        output: Link(home[var.name], output)
        for output, var in zip(graph.outputs, build.program.main.outputs, strict=True)
    }
    return Chain(tuple(parts), tuple(links), final)


def _carry(
    ref: str,
    ids: set[str],
    ref_var: dict[str, str],
    home: dict[str, int],
    read: dict[str, Link],
    graph: GraphParams,
) -> str:
    """The reference inside a program: unchanged within it, else the input that brings it."""
    source = producer(ref)
    if source in ids:
        return ref
    if source in graph.inputs:
        read[source] = Link(None, source)
        return source
    var = ref_var[ref]
    read[var] = Link(home[var], var)
    return var


def _ref_of(var: str, node: BuiltNode) -> str:
    """How a program refers to one output of one of its nodes."""
    if len(node.outputs) == 1:
        return node.node.id
    return f"{node.node.id}.{node.outputs.index(var)}"


def _var_types(build: GraphBuild) -> dict[str, Any]:
    fn = build.built_program.main
    types = {v.name: v.tensor for v in fn.inputs}
    for op in fn.operations:
        for v in op.outputs:
            types[v.name] = v.tensor
    return types


def _ref_vars(build: GraphBuild) -> dict[str, str]:
    """Every reference a graph may write -> the var name it reads."""
    out = {}
    for n in build.nodes:
        out[n.node.id] = n.outputs[0]
        for i, var in enumerate(n.outputs):
            out[f"{n.node.id}.{i}"] = var
    return out


def split_stream(
    build: KernelBuild,
    budget: int,
    target,
    name: str,
    quantize: QuantizeConfig | None = None,
) -> Chain:
    """The chain of a catalog op that cuts itself into parts (`CatalogOp.parts`, e.g. a decoder
    stack into runs of layers): part k reads `x` from part k − 1's `y` and its other inputs from
    the whole's inputs of the same names; every output but the inner parts' `y` is an output of
    the whole. The parts take the whole's weights (as validated, random ones included)."""
    op = build.op
    assert op.parts is not None
    parts: list[ProgramBuild] = []
    links: list[dict[str, Link]] = []
    outputs: dict[str, Link] = {}
    for k, params in enumerate(op.parts(build.params, budget)):
        wanted = {s.name for s in op.weights(params)}
        part = build_kernel(
            op.name,
            params,
            {n: a for n, a in build.weights.items() if n in wanted},
            target=target,
            name=f"{name}_{k}",
            quantize=quantize,
        )
        fn = part.program.main
        links.append(
            {
                v.name: Link(k - 1, "y") if k and v.name == "x" else Link(None, v.name)
                for v in fn.inputs
            }
        )
        outputs.pop("y", None)  # the stream: only the last part's leaves the chain
        outputs |= {v.name: Link(k, v.name) for v in fn.outputs}
        parts.append(part)
    ordered = {v.name: outputs[v.name] for v in build.program.main.outputs}
    return Chain(tuple(parts), tuple(links), ordered)
