"""fuse_reduce_mean: reduce_sum followed by a multiplication by 1/n (or a division by n), n the
number of elements each sum adds, is reduce_mean. The constant may be written in fp16 (1/3 is
stored as 0.3333): it matches within fp16's rounding."""

from __future__ import annotations

import math

import numpy as np

from app.mil.ir import Var
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import close, operands, scalar, stored


def _count(op) -> int:
    x = op.var("x").tensor
    given = stored(op.var("axes")) if "axes" in op.inputs else np.arange(x.rank)
    axes = [int(a) % x.rank for a in np.asarray(given).reshape(-1)]
    return math.prod(x.shape[a] for a in axes)


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("reduce_sum"):
        total: Var = op.outputs[0]
        reader = edit.sole_reader(total)
        if reader is None or reader.type not in ("mul", "real_div"):
            continue
        other = operands(reader, total)
        if other is None or reader.outputs[0].type != total.type:
            continue
        n = _count(op)
        if reader.type == "mul" and not close(scalar(other), 1 / n):
            continue
        if reader.type == "real_div" and (
            reader.var("x") is not total or not close(scalar(other), n)
        ):
            continue
        edit.swap(reader, "reduce_mean", dict(op.inputs))
        edit.drop(op)


PASS = GraphPass(
    "fuse_reduce_mean",
    "cleanup",
    "reduce_sum then a multiplication by 1/n (a division by n) becomes reduce_mean",
    run,
    needs=frozenset({"reduce_sum"}),
)
