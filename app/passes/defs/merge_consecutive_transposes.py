"""merge_consecutive_transposes: a transpose of a transpose that nothing else reads is one
transpose of the first one's input, by the composed permutation (none at all when that is the
identity)."""

from __future__ import annotations

import numpy as np

from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.pairs import merged_pair
from app.passes.patterns import stored


def perm_of(op) -> list[int]:
    rank = op.outputs[0].tensor.rank
    return [int(p) % rank for p in np.asarray(stored(op.var("perm"))).reshape(-1)]


def run(edit: Editor, options: Options) -> None:
    for op in edit.ops("transpose"):
        inner = op.var("x").op
        if (
            inner is None
            or inner.type != "transpose"
            or edit.sole_reader(inner.outputs[0]) is not op
        ):
            continue
        first, second = perm_of(inner), perm_of(op)
        composed = [first[p] for p in second]  # output axis i is input axis first[second[i]]
        merged_pair(edit, op, inner, "perm", composed, composed == sorted(composed))


PASS = GraphPass(
    "merge_consecutive_transposes",
    "optimize_repeat_ops",
    "transpose(transpose(x)) becomes one transpose of x (or none)",
    run,
    needs=frozenset({"transpose"}),
)
