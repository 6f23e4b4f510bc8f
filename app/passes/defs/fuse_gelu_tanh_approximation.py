"""fuse_gelu_tanh_approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) spelt out op by op
becomes gelu(x, mode=TANH_APPROXIMATION).

The product of x, 0.5 and (1 + tanh(...)) may be grouped any way (the seed's two patterns, and
x·(...) then ·0.5), every mul and add with its operands in either order; x³ is x·x·x or
x·square(x) in any grouping, or pow(x, 3). Every intermediate must be
read by the pattern alone, and each constant must be the one meant within fp16 rounding."""

from __future__ import annotations

import math

from app.mil.ir import Operation, Var
from app.passes.edit import Editor
from app.passes.gelu_parts import fuse_to_gelu
from app.passes.graph_pass import GraphPass, Options
from app.passes.products import Taken

_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_CUBIC = 0.044715


class _Pattern(Taken):
    """One match being tried (app/passes/products.py), and the bracket of the tanh form."""

    def tanh_of(self, var: Var, reader: Operation) -> Var | None:
        """For var = 1 + tanh(√(2/π)·(x + 0.044715·x³)): x."""
        add = self.take(var, "add", reader)
        t = self.other(add, 1.0)
        tanh = None if t is None or add is None else self.take(t, "tanh", add)
        if tanh is None:
            return None
        scaled = self.take(tanh.var("x"), "mul", tanh)
        inner = self.other(scaled, _SQRT_2_OVER_PI)
        total = None if inner is None or scaled is None else self.take(inner, "add", scaled)
        if total is None:
            return None
        for x, term in (
            (total.var("x"), total.var("y")),
            (total.var("y"), total.var("x")),
        ):
            mul = term.op
            cube = self.other(mul if mul is not None and mul.type == "mul" else None, _CUBIC)
            if cube is None or mul is None or self.edit.sole_reader(term) is not total:
                continue
            taken = len(self.ops)
            self.ops.append(mul)
            if [v is x for v in self.factors(cube, mul, squares=True)] == [True] * 3:
                return x
            del self.ops[taken:]
        return None


def _match(edit: Editor, op: Operation) -> tuple[Var, list[Operation]] | None:
    """For the final mul of the pattern: x and the pattern's ops."""
    pattern = _Pattern(edit)
    pair = pattern.beside_a_half(op)
    if pair is None:
        return None
    for x, bracket in (pair, pair[::-1]):
        trial = _Pattern(edit, pattern.ops)
        if trial.tanh_of(bracket, pattern.reader_of(bracket, op)) is x:
            return x, [op, *trial.ops]
    return None


def run(edit: Editor, options: Options) -> None:
    fuse_to_gelu(edit, _match, "TANH_APPROXIMATION")


PASS = GraphPass(
    "fuse_gelu_tanh_approximation",
    "optimize_activation",
    "the tanh approximation of GELU spelt out becomes gelu(mode=TANH_APPROXIMATION)",
    run,
    creates=frozenset({"gelu"}),
    needs=frozenset({"tanh"}),
)
