"""A match being tried over a product written op by op: the ops taken so far (each read by the
pattern alone), the leaves of a tree of muls, and the operand beside a given constant. What the
passes that find an activation spelt out (GELU's two forms) share."""

from __future__ import annotations

from app.mil.ir import Operation, Var
from app.passes.edit import Editor
from app.passes.patterns import close, scalar


def _times(var: Var) -> int:
    """How many times x is a factor of var = square(x) (2) or pow(x, 2 or 3); 0 otherwise."""
    op = var.op
    if op is None:
        return 0
    if op.type == "square":
        return 2
    power = scalar(op.var("y")) if op.type == "pow" else None
    return int(power) if power in (2.0, 3.0) else 0


class Taken:
    """One match being tried: the ops taken so far, each read by the pattern alone."""

    def __init__(self, edit: Editor, ops: list[Operation] | None = None):
        self.edit, self.ops = edit, list(ops or [])

    def take(self, var: Var | None, op_type: str, reader: Operation | None) -> Operation | None:
        """The op of `op_type` making `var`, when `reader` alone reads it."""
        if var is None or var.op is None:
            return None
        op = var.op
        if op.type != op_type or self.edit.sole_reader(var) is not reader:
            return None
        self.ops.append(op)
        return op

    def factors(self, var: Var, reader: Operation, squares: bool = False) -> list[Var]:
        """The leaves of the product tree at `var` (muls, and when `squares` squares counted
        twice and pow(x, 2 or 3) two or three times, read by the tree alone)."""
        op = self.take(var, "mul", reader)
        if op is not None:
            return self.factors(op.var("x"), op, squares) + self.factors(op.var("y"), op, squares)
        times = _times(var) if squares else 0
        made = var.op
        if times and made is not None and self.take(var, made.type, reader) is not None:
            return [made.var("x")] * times
        return [var]

    @staticmethod
    def other(op: Operation | None, constant: float) -> Var | None:
        """For a binary op with the scalar `constant` as one operand: the other one."""
        if op is None:
            return None
        x, y = op.var("x"), op.var("y")
        if close(scalar(y), constant):
            return x
        return y if close(scalar(x), constant) else None

    def beside_a_half(self, op: Operation) -> tuple[Var, Var] | None:
        """For the last mul of x · 0.5 · bracket, grouped any way and each mul's operands in
        either order: the two leaves beside the 0.5 (x and bracket, in some order); the muls
        are taken."""
        leaves = self.factors(op.var("x"), op) + self.factors(op.var("y"), op)
        halves = [v for v in leaves if close(scalar(v), 0.5)]
        if len(leaves) != 3 or len(halves) != 1:
            return None
        a, b = (v for v in leaves if v is not halves[0])
        return a, b

    def reader_of(self, var: Var, first: Operation) -> Operation:
        """The op of this match (or `first`) that reads `var`."""
        return next(o for o in [first, *self.ops] if any(v is var for v in o.inputs.values()))
