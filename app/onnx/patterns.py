"""Subgraphs lowered as one op: the exact GELU that exporters spell with Erf,
    y = x · ½ · (1 + erf(x / √2))
(torch.nn.GELU and transformers' gelu, as torch.onnx writes them: Div or Mul by a constant, Erf,
Add 1, then two Muls in any grouping) becomes one `gelu` (mode EXACT). Each intermediate value
must feed only the next step; anything else is left as it is (its Erf an `erf`).
"""

from __future__ import annotations

import math

import numpy as np
from onnx import NodeProto, numpy_helper

from app.onnx.lowering import Lowering, Node, Pattern, Value
from app.onnx.reader import OnnxModel

_SQRT2 = math.sqrt(2.0)


def _scalars(model: OnnxModel) -> dict[str, float]:
    """Values that are one number: small initializers and Constant nodes."""
    out: dict[str, float] = {}
    for name, tensor in model.initializers.items():
        if math.prod(tensor.dims) == 1:
            out[name] = float(model.value(name).reshape(-1)[0])
    for node in model.nodes:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            tensor = node.attribute[0].t
            if math.prod(tensor.dims) == 1:
                out[node.output[0]] = float(numpy_helper.to_array(tensor).reshape(-1)[0])
    return out


def gelu_patterns(model: OnnxModel) -> tuple[dict[int, Pattern], set[int]]:
    """(the last node of each GELU pattern -> what it reads and its lowering, the pattern's
    other nodes)."""
    index = {id(n): i for i, n in enumerate(model.nodes)}
    users: dict[str, list[NodeProto]] = {}
    for node in model.nodes:
        for name in node.input:
            users.setdefault(name, []).append(node)
    for name in model.outputs:
        users.setdefault(name, []).append(NodeProto())  # a graph output is one more use
    scalars = _scalars(model)

    def only_user(name: str, op_type: str) -> NodeProto | None:
        found = users.get(name, [])
        return found[0] if len(found) == 1 and found[0].op_type == op_type else None

    def other(node: NodeProto, name: str) -> str | None:
        rest = [i for i in node.input if i != name]
        return rest[0] if len(rest) == 1 and len(node.input) == 2 else None

    def near(name: str | None, value: float) -> bool:
        return name in scalars and abs(scalars[name] - value) <= 1e-3 * abs(value)

    replaced: dict[int, Pattern] = {}
    skipped: set[int] = set()
    producers = {o: n for n in model.nodes for o in n.output}
    for erf in (n for n in model.nodes if n.op_type == "Erf"):
        scaled = producers.get(erf.input[0])
        if scaled is None or len(users.get(erf.input[0], [])) != 1:
            continue
        x = None
        for candidate in scaled.input:
            rest = other(scaled, candidate)
            if (
                scaled.op_type == "Div" and candidate == scaled.input[0] and near(rest, _SQRT2)
            ) or (scaled.op_type == "Mul" and near(rest, 1 / _SQRT2)):
                x = candidate
        add = only_user(erf.output[0], "Add")
        if x is None or add is None or not near(other(add, erf.output[0]), 1.0):
            continue
        chain = _products(add.output[0], x, users, scalars, producers, only_user, other, near)
        if chain is None:
            continue
        last, extra = chain
        replaced[index[id(last)]] = ([x], _gelu)
        skipped |= {index[id(n)] for n in (scaled, erf, add, *extra)}
    return replaced, skipped


def _products(p, x, users, scalars, producers, only_user, other, near):
    """The Muls that make x · p · ½ from p = 1 + erf(·): (the last one, the others)."""
    m1 = only_user(p, "Mul")
    if m1 is None:
        return None
    partner = other(m1, p)
    if partner == x:  # (x·p)·½
        m2 = only_user(m1.output[0], "Mul")
        return (m2, [m1]) if m2 is not None and near(other(m2, m1.output[0]), 0.5) else None
    if near(partner, 0.5):  # x·(p·½)
        m2 = only_user(m1.output[0], "Mul")
        return (m2, [m1]) if m2 is not None and other(m2, m1.output[0]) == x else None
    half = producers.get(partner)  # (x·½)·p
    if (
        half is not None
        and half.op_type == "Mul"
        and len(users.get(partner, [])) == 1
        and x in half.input
        and near(other(half, x), 0.5)
    ):
        return m1, [half]
    return None


def _gelu(ctx: Lowering, node: Node) -> list[Value]:
    x = node.inputs[0]
    if isinstance(x, np.ndarray):  # a constant input: evaluated as written
        erf = np.vectorize(math.erf)(x.astype(np.float64) / _SQRT2)
        return [(0.5 * x * (1 + erf)).astype(np.float32)]
    return [ctx.op("gelu", node.out[0], x=x, mode="EXACT")]
