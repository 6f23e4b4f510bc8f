"""What a graph request says: inputs, nodes (catalog ops or MIL primitives) wired by name, and
outputs; checked for structure before anything is built.

A reference names a graph input, a node (its only output) or `node.output` for one output of a
node that has several (a split's are numbered `node.0`, `node.1`, ...). Nodes may be listed in any
order that has no cycle: they are built in a topological order that keeps the listed order where
it can. Every structural fault is a `RequestError` whose field is the path of the culprit
(`nodes[3].inputs.y`), raised from the model's own validation, so it reaches callers as it is.
"""

from __future__ import annotations

import heapq
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.core.names import Identifier
from app.errors import RequestError
from app.graphs.primitives import Primitive, resolve_op
from app.kernels.compressed import read_quantize
from app.kernels.params import MAX_DIM, OpParams

GRAPH_OP = "graph"  # the request's `op` for a graph
REF_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?$"
Ref = Annotated[str, Field(pattern=REF_PATTERN, max_length=130)]
GraphDim = Annotated[int, Field(ge=1, le=MAX_DIM)]


class GraphInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    shape: list[GraphDim] = Field(min_length=1, max_length=5)
    dtype: Literal["fp16", "fp32", "int32"] = "fp16"


class GraphNode(BaseModel):
    """One node: a catalog op (its params minus what its inputs fix) or a MIL primitive (its
    tensor arguments in `inputs`, its other arguments in `params`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: Identifier
    op: str = Field(description="a catalog op, or a MIL primitive (GET /v1/ops, `primitives`)")
    params: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, Ref | list[Ref]] = Field(
        default_factory=dict, description="argument name -> graph input, node or node.output"
    )
    quantize: dict[str, Any] | None = Field(
        None,
        description="compress the node's weight matrix (a conv or matmul node), as a kernel "
        "request's `quantize`: palettize, linear or prune",
    )


class GraphParams(OpParams):
    """A graph of catalog ops and MIL primitives, built into one program."""

    inputs: dict[Identifier, GraphInput] = Field(min_length=1)
    nodes: list[GraphNode] = Field(min_length=1)
    outputs: dict[Identifier, Ref] = Field(min_length=1, description="output name -> reference")
    split: bool = Field(
        False,
        description="cut a graph whose weights exceed the program budget into a chain of programs",
    )

    @model_validator(mode="after")
    def _structure(self) -> GraphParams:
        check_structure(self)  # raises RequestError, which pydantic lets through as it is
        return self

    def order(self) -> list[int]:
        """Node indices in a build order: dependencies first, else as listed."""
        return topological_order(self)


def references(node: GraphNode) -> list[tuple[str, str]]:
    """(argument path, reference) for every input of a node; list arguments as `arg[i]`."""
    out = []
    for arg, ref in node.inputs.items():
        if isinstance(ref, list):
            out += [(f"{arg}[{i}]", r) for i, r in enumerate(ref)]
        else:
            out.append((arg, ref))
    return out


def producer(ref: str) -> str:
    """The graph input or node a reference reads from."""
    return ref.partition(".")[0]


def check_structure(graph: GraphParams) -> None:
    ids: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        where = f"nodes[{i}]"
        if node.id in ids:
            raise RequestError(
                f"{where}.id", f"{node.id!r} is already the id of nodes[{ids[node.id]}]"
            )
        if node.id in graph.inputs:
            raise RequestError(f"{where}.id", f"{node.id!r} is already the name of a graph input")
        ids[node.id] = i
        op = resolve_op(node.op, f"{where}.op")
        if node.quantize is not None:
            if isinstance(op, Primitive):
                raise RequestError(
                    f"{where}.quantize",
                    f"{op.name} is a MIL primitive: quantize "
                    "compresses the weights of conv and matmul nodes",
                )
            read_quantize(node.quantize, f"{where}.quantize")
    for i, node in enumerate(graph.nodes):
        for arg, ref in references(node):
            source = producer(ref)
            if source not in ids and source not in graph.inputs:
                raise RequestError(
                    f"nodes[{i}].inputs.{arg}",
                    f"{ref!r} is neither a graph input ({', '.join(graph.inputs)}) nor a node id",
                )
            if source in graph.inputs and "." in ref:
                raise RequestError(
                    f"nodes[{i}].inputs.{arg}", f"graph input {source!r} has no outputs to pick"
                )
    for name, ref in graph.outputs.items():
        if producer(ref) not in ids:
            raise RequestError(
                f"outputs.{name}",
                f"{ref!r} is not a node id (a graph output is computed by a node)",
            )
        if (name in ids and name != producer(ref)) or name in graph.inputs:
            raise RequestError(
                f"outputs.{name}", f"{name!r} is already the name of another node or an input"
            )
    exported = [r for r in graph.outputs.values()]
    for ref in set(exported):
        if exported.count(ref) > 1:
            names = [n for n, r in graph.outputs.items() if r == ref]
            raise RequestError(f"outputs.{names[1]}", f"{ref!r} is already the output {names[0]!r}")
    used = {producer(r) for node in graph.nodes for _, r in references(node)}
    used |= {producer(r) for r in graph.outputs.values()}
    for i, node in enumerate(graph.nodes):
        if node.id not in used:
            raise RequestError(
                f"nodes[{i}]",
                f"node {node.id!r} feeds no node and no output (remove it, or export it)",
            )
    topological_order(graph)  # raises on a cycle


def topological_order(graph: GraphParams) -> list[int]:
    index = {node.id: i for i, node in enumerate(graph.nodes)}
    needs = [
        {index[producer(r)] for _, r in references(node) if producer(r) in index}
        for node in graph.nodes
    ]
    order, cycle = dependency_order(needs)
    if cycle:
        first_stuck = min(set(range(len(needs))) - set(order))
        raise RequestError(
            f"nodes[{first_stuck}].inputs",
            f"the nodes form a cycle: {' -> '.join(graph.nodes[i].id for i in cycle)}",
        )
    return order


def dependency_order(needs: list[set[int]]) -> tuple[list[int], list[int]]:
    """(the items in an order that puts each after those it needs, the earliest listed first
    among those ready; the items around a cycle, in the order values flow, when there is one:
    then the order is incomplete)."""
    users: list[list[int]] = [[] for _ in needs]
    for i, deps in enumerate(needs):
        for d in deps:
            users[d].append(i)
    waiting = [len(d) for d in needs]
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)  # the earliest listed among those ready
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) == len(needs):
        return order, []
    stuck = set(range(len(needs))) - set(order)
    return order, _cycle_from(min(stuck), needs, stuck)


def _cycle_from(start: int, needs: list[set[int]], stuck: set[int]) -> list[int]:
    """The items around a cycle reachable from `start` (following dependencies)."""
    path, seen = [start], {start: 0}
    node = start
    while True:
        node = min(needs[node] & stuck)  # an item left waiting waits on another one left
        if node in seen:
            loop = [*path[seen[node] :], node]
            return list(reversed(loop))
        seen[node] = len(path)
        path.append(node)
