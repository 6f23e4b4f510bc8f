"""fuse_gelu_exact: 0.5·x·(1 + erf(x / √2)) spelt out op by op becomes gelu(x, mode=EXACT).

The seed's three patterns are one product of x, 0.5 and (1 + erf(...)) grouped three ways; any
grouping is taken, every mul and add with its operands in either order. x / √2 is a real_div by
√2 or (after divide_to_multiply) a mul by 1/√2. Every intermediate must be read by the pattern
alone, and each constant must be the one meant within fp16 rounding."""

from __future__ import annotations

import math

from app.mil.ir import Operation, Var
from app.passes.edit import Editor
from app.passes.gelu_parts import fuse_to_gelu
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import close, scalar
from app.passes.products import Taken


def _erf_of(match: Taken, bracket: Var, reader: Operation) -> Var | None:
    """For bracket = 1 + erf(x / √2): x."""
    add = match.take(bracket, "add", reader)
    erf = match.take(match.other(add, 1.0), "erf", add)
    if erf is None:
        return None
    scaled: Var = erf.var("x")
    div = match.take(scaled, "real_div", erf)
    if div is not None:
        return div.var("x") if close(scalar(div.var("y")), math.sqrt(2)) else None
    return match.other(match.take(scaled, "mul", erf), 1 / math.sqrt(2))


def _match(edit: Editor, op: Operation) -> tuple[Var, list[Operation]] | None:
    """For the final mul of the pattern: x and the pattern's ops."""
    product = Taken(edit)
    pair = product.beside_a_half(op)
    if pair is None:
        return None
    for x, bracket in (pair, pair[::-1]):
        trial = Taken(edit, product.ops)
        if _erf_of(trial, bracket, product.reader_of(bracket, op)) is x:
            return x, [op, *trial.ops]
    return None


def run(edit: Editor, options: Options) -> None:
    fuse_to_gelu(edit, _match, "EXACT")


PASS = GraphPass(
    "fuse_gelu_exact",
    "optimize_activation",
    "0.5·x·(1 + erf(x/√2)) spelt out becomes gelu(mode=EXACT)",
    run,
    creates=frozenset({"gelu"}),
    needs=frozenset({"erf"}),
)
