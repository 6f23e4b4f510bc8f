"""Einsum of one or two operands as transposes, reshapes, sums and one matmul, the form the ANE
runs (MIL's own einsum takes only two equations, app/mil/ops/linear.py).

Each letter of a two-operand equation is a batch letter (in both operands and the output), a
contracted one (in both, not the output), kept from one side (in it and the output) or summed
away on its side (in it alone). x is laid out [batch, kept of x, contracted] and y [batch,
contracted, kept of y] (or [batch, kept of y, contracted], read with transpose_y: the attention
score product `bhid,bhjd->bhij` needs no transpose), each group merged into one axis; the product
is split back and transposed into the output's order. Ellipses and a letter repeated within one
operand (a diagonal) are refused.
"""

from __future__ import annotations

import math

import numpy as np

from app.mil import Var
from app.onnx.lowering import Handler, Lowering, Node, Unlowered, Value
from app.onnx.ops_layout import reshape_to


def _operand(ctx: Lowering, node: Node, i: int) -> Var:
    value = node.input(i)
    if isinstance(value, np.ndarray):
        return ctx.tensor(value, node.proto.input[i])
    return node.var(i)


def _terms(node: Node, count: int) -> tuple[list[str], str]:
    equation = node.attr("equation")
    equation = (equation.decode() if isinstance(equation, bytes) else equation).replace(" ", "")
    left, arrow, right = equation.partition("->")
    terms = left.split(",")
    if "." in equation or len(terms) != count or any(len(set(t)) != len(t) for t in terms):
        raise Unlowered(
            f"Einsum {equation!r} (lowered: one or two operands, no ellipsis, no diagonal)"
        )
    if not arrow:  # implicit output: the letters used once, in alphabetical order
        letters = "".join(terms)
        right = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return terms, right


def _arrange(ctx: Lowering, x: Var, term: str, order: str) -> Var:
    """x (letters `term`) with its axes in the letters' `order`."""
    perm = [term.index(c) for c in order]
    if perm == list(range(len(perm))):
        return x
    return ctx.op("transpose", x=x, perm=np.array(perm, np.int32))


def _sum_away(ctx: Lowering, x: Var, term: str, keep: set[str]) -> tuple[Var, str]:
    gone = [i for i, c in enumerate(term) if c not in keep]
    if not gone:
        return x, term
    if len(gone) == len(term):
        raise Unlowered("Einsum to a scalar (a program holds no rank-0 tensor)")
    summed = ctx.op("reduce_sum", x=x, axes=np.array(gone, np.int32), keep_dims=False)
    return summed, "".join(c for c in term if c in keep)


def einsum(ctx: Lowering, node: Node) -> list[Value]:
    count = len([v for v in node.inputs if v is not None])
    terms, out = _terms(node, count)
    if count == 1:
        x, term = _sum_away(ctx, _operand(ctx, node, 0), terms[0], set(out))
        return [_finish(ctx, node, x, term, list(x.tensor.shape), out)]
    (tx, ty), (x, y) = terms, (_operand(ctx, node, 0), _operand(ctx, node, 1))
    x, tx = _sum_away(ctx, x, tx, set(ty) | set(out))
    y, ty = _sum_away(ctx, y, ty, set(tx) | set(out))
    size = {c: d for t, v in ((tx, x), (ty, y)) for c, d in zip(t, v.tensor.shape, strict=True)}
    for c in set(tx) & set(ty):
        if x.tensor.shape[tx.index(c)] != y.tensor.shape[ty.index(c)]:
            raise Unlowered(f"Einsum broadcasting letter {c!r} (sizes differ)")
    batch = [c for c in out if c in tx and c in ty]
    contracted = [c for c in tx if c in ty and c not in out]
    keep_x = [c for c in tx if c not in ty]
    keep_y = [c for c in ty if c not in tx]

    def merged(v: Var, term: str, groups: list[list[str]]) -> Var:
        v = _arrange(ctx, v, term, "".join(c for g in groups for c in g))
        shape = [
            *(size[c] for c in groups[0]),
            *(math.prod(size[c] for c in g) for g in groups[1:]),
        ]
        return reshape_to(ctx, v, shape, None)

    transposed = "".join(c for c in ty if c not in batch) == "".join(keep_y + contracted)
    a = merged(x, tx, [batch, keep_x, contracted])
    b = merged(y, ty, [batch, keep_y, contracted] if transposed else [batch, contracted, keep_y])
    product = ctx.op("matmul", x=a, y=b, transpose_y=transposed)
    found = "".join(batch + keep_x + keep_y)
    return [_finish(ctx, node, product, found, [size[c] for c in found], out)]


def _finish(ctx: Lowering, node: Node, x: Var, found: str, shape: list[int], out: str) -> Var:
    """x reshaped to `shape` (letters `found`) and transposed to the output's order; the last
    op named the node's output."""
    if found == out:
        return reshape_to(ctx, x, shape, node.out[0])
    x = reshape_to(ctx, x, shape, None)
    perm = np.array([found.index(c) for c in out], np.int32)
    return ctx.op("transpose", node.out[0], x=x, perm=perm)


HANDLERS: dict[str, Handler] = {"Einsum": einsum}
