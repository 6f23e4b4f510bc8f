"""reduce_transposes: a transpose whose effect is undone further on is removed with the
transposes that undo it, the ops between them computing in the layout before it.

From a transpose T (perm p), the region is what its output reaches through ops that commute
with a layout change: elementwise unary ops and casts; elementwise binary ops whose other
operand is in the region too or a constant (permuted along, one new const); reductions with
keep_dims and softmax (their axes renumbered). The region ends at transposes by p's inverse
(cancels: they become nothing) and at anything else (materializations: the value transposed by
p again just there, one transpose per value, a function output keeping its name). T goes when
its cancels are at least as many as the transposes materialized, so the count of transposes
drops by one at least. This is the seed's three examples; coremltools' fuller algorithm also
joins regions of several starting transposes and moves transposes through concat, pad and
slice, which this does not (yet)."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Input, Operation, Var
from app.mil.types import DType
from app.passes import facts
from app.passes.defs.merge_consecutive_transposes import perm_of
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import numeric, stored, wide


class _Region:
    """What one starting transpose reaches."""

    def __init__(self, edit: Editor, start: Operation):
        self.edit, self.start = edit, start
        self.perm = perm_of(start)
        self.inverse = [self.perm.index(i) for i in range(len(self.perm))]
        self.ops: list[Operation] = []  # commuting ops, in program order
        self.cancels: list[Operation] = []
        self.materialized: dict[Var, list[tuple[Operation, str]]] = {}  # value -> (reader, arg)

    def explore(self, order: dict[Operation, int]) -> None:
        """Grow the region through every op that may commute, then drop those that read a value
        from outside it (not a constant) until none does, then find where it must end."""
        found: set[Operation] = set()
        cancels: set[Operation] = set()
        todo = [self.start.outputs[0]]
        while todo:
            for reader in self.edit.readers(todo.pop()):
                if reader in found or reader in cancels:
                    continue
                if reader.type == "transpose" and perm_of(reader) == self.inverse:
                    cancels.add(reader)
                elif self._commutes(reader):
                    found.add(reader)
                    todo += reader.outputs
        values = {self.start.outputs[0]}
        changed = True
        while changed:
            values = {self.start.outputs[0]} | {v for op in found for v in op.outputs}
            kept = {op for op in found if all(_outside_ok(v, values) for v in _read(op))}
            changed, found = kept != found, kept
        self.ops = sorted(found, key=order.__getitem__)
        self.cancels = sorted((c for c in cancels if c.var("x") in values), key=order.__getitem__)
        for var in values:
            if self.edit.is_output(var):
                self.materialized.setdefault(var, [])
            for reader in self.edit.readers(var):
                if reader in found or reader in self.cancels:
                    continue
                for arg, value in reader.inputs.items():
                    if value is var or (isinstance(value, tuple) and var in value):
                        self.materialized.setdefault(var, []).append((reader, arg))

    def _commutes(self, op: Operation) -> bool:
        """Whether `op` computes the same in either layout (its axes renumbered)."""
        if len(op.outputs) != 1 or op.outputs[0].tensor.rank != len(self.perm):
            return False
        if facts.is_unary(op.type) or facts.is_binary(op.type) or op.type == "softmax":
            return True
        return (
            facts.is_reduction(op.type)
            and "keep_dims" in op.inputs
            and bool(stored(op.var("keep_dims")))
        )

    @property
    def worth_it(self) -> bool:
        """Fewer transposes after: T and every cancel go, one per materialized value comes."""
        return bool(self.cancels) and len(self.materialized) <= len(self.cancels)


def _read(op: Operation) -> list[Var]:
    return [
        v for value in op.inputs.values() for v in (value if isinstance(value, tuple) else (value,))
    ]


def _outside_ok(var: Var, values: set[Var]) -> bool:
    """A region op may read region values and constants (permuted along), nothing else."""
    return var in values or numeric(var) or (var.op is not None and var.op.type == "const")


def _rewrite(edit: Editor, region: _Region) -> bool:
    start, perm, inverse = region.start, region.perm, region.inverse
    now: dict[Var, Var] = {start.outputs[0]: start.var("x")}
    for cancel in region.cancels:
        out, source = cancel.outputs[0], cancel.var("x")
        if source is start.outputs[0] and not edit.can_replace(out, start.var("x")):
            return False
    for op in region.ops:
        args: dict[str, Input] = {}
        for arg, value in op.inputs.items():
            if value in now:
                args[arg] = now[value]
            elif isinstance(value, tuple):  # a variadic argument: read as it is
                args[arg] = value
            elif arg in ("axes", "axis"):
                axes = np.asarray(stored(value)).reshape(-1)
                rank = len(perm)
                renumbered = np.array([perm[int(a) % rank] for a in axes])
                if np.asarray(stored(value)).ndim == 0:
                    renumbered = renumbered.reshape(())
                args[arg] = edit.const(f"{op.name}_{arg}", renumbered, DType.INT32, op)
            elif arg in ("x", "y") and facts.is_binary(op.type) and numeric(value):
                value_ = wide(value)
                assert value_ is not None
                padded = value_.reshape((1,) * (len(perm) - value_.ndim) + value_.shape)
                permuted = np.transpose(padded, inverse)
                args[arg] = edit.const(f"{op.name}_{arg}", permuted, value.tensor.dtype, op)
            else:
                args[arg] = value
        out = op.outputs[0]
        name = edit.fresh(out.name) if edit.is_output(out) else out.name
        new = edit.op(op.type, op.name, args, op, out=[name])
        now[out] = new.outputs[0]
    # cancels first: materializing an output below redirects every reader of its value
    for cancel in region.cancels:
        edit.replace(cancel.outputs[0], now[cancel.var("x")])
    perm_const = None
    for var, readers in region.materialized.items():
        anchor = var.op if var is not start.outputs[0] else start
        assert anchor is not None
        if perm_const is None:
            perm_const = edit.const(f"{start.name}_perm", np.array(perm), DType.INT32, anchor)
        name = var.name if edit.is_output(var) else edit.fresh(f"{var.name}_transposed")
        back = edit.op("transpose", name, {"x": now[var], "perm": perm_const}, anchor, out=[name])
        for reader, arg in readers:
            edit.set_input(reader, arg, back.outputs[0])
        if edit.is_output(var):
            edit.replace(var, back.outputs[0])
    for op in [start, *region.ops, *region.cancels]:
        for v in op.outputs:
            for reader in edit.readers(v):
                if reader not in region.ops and reader not in region.cancels:
                    raise AssertionError(f"{reader.name} still reads {v.name}")
    edit.drop(start, *region.ops, *region.cancels)
    return True


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("transpose"):
        if edit.removed(op):
            continue
        region = _Region(edit, op)
        region.explore({o: i for i, o in enumerate(edit.fn.operations)})
        if region.worth_it and _rewrite(edit, region):
            edit.commit()


PASS = GraphPass(
    "reduce_transposes",
    "optimize_repeat_ops",
    "removes transposes that later transposes undo, through elementwise ops and reductions",
    run,
    needs=frozenset({"transpose"}),
)
