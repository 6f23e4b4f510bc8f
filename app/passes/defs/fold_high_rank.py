"""fold_high_rank (beyond the seed): a rank-5 stretch of a program, between a reshape into rank 5
and a reshape out of it, is computed in rank 4 when two adjacent axes stay adjacent, in order,
through every op of the stretch: they are folded into one (row-major order keeps every element
where it was), the transposes' perms follow, and the reshape out reads the same elements.

The stretch is a chain, each op read by the next alone: transposes, elementwise unary ops, and
elementwise binary ops with a one-number constant. ShuffleNet's channel shuffle is one
(reshape [N, g, C/g, H, W], transpose [0, 2, 1, 3, 4], reshape [N, C, H, W]: H and W fold).
The ANE works in rank 4: ANEForge reports a "rank4 cap" (transpose+matmul failing at rank 5),
the preflight's `rank.ane-4d` warning (../shared/research/mil-text-and-blob.md, "Rank ≤ 4";
../shared/research/ane-anchors-2026-11.md, tensor rank). A stretch where no two axes stay
together (a transpose that moves every axis apart), or that leads anywhere but a reshape, is
left."""

from __future__ import annotations

import math

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import operands, scalar, stored

ANE_RANK = 4


def _perm(op: Operation) -> list[int]:
    return [int(v) for v in np.asarray(stored(op.var("perm"))).reshape(-1)]


def _chain(edit: Editor, v: Var) -> tuple[list[Operation], Operation] | None:
    """The ops from v to the reshape that leaves the stretch, each read by the next alone."""
    chain: list[Operation] = []
    current = v
    while True:
        op = edit.sole_reader(current)
        if op is None:
            return None
        if op.type == "reshape":
            return chain, op
        if op.type == "transpose" or (facts.is_unary(op.type) and op.inputs.get("x") is current):
            pass
        elif facts.is_binary(op.type):
            other = operands(op, current)
            if other is None or scalar(other) is None or other.tensor.size != 1:
                return None
        else:
            return None
        if op.outputs[0].tensor.rank != v.tensor.rank:
            return None
        chain.append(op)
        current = op.outputs[0]


def _groups(rank: int, layouts: list[list[int]]) -> list[list[int]] | None:
    """Runs of adjacent axes, rank 4 of them, each run adjacent and in order in every layout."""

    def together(a: int) -> bool:
        return all(layout.index(a + 1) == layout.index(a) + 1 for layout in layouts)

    pairs = [a for a in reversed(range(rank - 1)) if together(a)][: rank - ANE_RANK]
    if len(pairs) < rank - ANE_RANK:
        return None
    groups: list[list[int]] = []
    for a in range(rank):
        if a - 1 in pairs:
            groups[-1].append(a)
        else:
            groups.append([a])
    return groups


def run(edit: Editor, options: Options) -> None:
    for start in edit.ops("reshape"):
        v = start.outputs[0]
        rank = v.tensor.rank
        if rank <= ANE_RANK or edit.removed(start):
            continue
        found = _chain(edit, v)
        if found is None:
            continue
        chain, end = found
        layouts, layout = [list(range(rank))], list(range(rank))
        for op in chain:
            if op.type == "transpose":
                layout = [layout[i] for i in _perm(op)]
                layouts.append(layout)
        groups = _groups(rank, layouts)
        if groups is None:
            continue
        shape = [math.prod(v.tensor.shape[a] for a in g) for g in groups]
        args = dict(start.inputs)
        args["shape"] = edit.const(f"{start.name}_shape", np.array(shape), DType.INT32, start)
        current = edit.op("reshape", start.name, args, start, out=[v.name]).outputs[0]
        place = [g[0] for g in groups]  # each group by its first axis
        layout = list(range(rank))
        for op in chain:
            args = dict(op.inputs)
            if op.type == "transpose":
                before = [place.index(a) for a in layout if a in place]
                layout = [layout[i] for i in _perm(op)]
                after = [place.index(a) for a in layout if a in place]
                perm = [before.index(g) for g in after]
                args["perm"] = edit.const(f"{op.name}_perm", np.array(perm), DType.INT32, op)
            for arg, value in op.inputs.items():
                if value is (chain[chain.index(op) - 1].outputs[0] if chain.index(op) else v):
                    args[arg] = current
            current = edit.op(op.type, op.name, args, op, out=[op.outputs[0].name]).outputs[0]
        edit.set_input(end, "x", current)
        edit.drop(*chain, start)


PASS = GraphPass(
    "fold_high_rank",
    "ane",
    "a rank-5 stretch between two reshapes is computed in rank 4, two axes that stay together "
    "folded into one",
    run,
    needs=frozenset({"reshape"}),
)
