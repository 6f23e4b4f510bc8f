"""concat_to_pixel_shuffle: the nested interleaved concats of FCRN's fast up-convolution (the
seed's example)

    concat(concat(a, b, axis=2, interleave), concat(c, d, axis=2, interleave), axis=3, interleave)

put a, b, c, d at rows 2h + i and columns 2w + j (a: i=0 j=0, b: i=1 j=0, c: i=0 j=1, d: i=1
j=1), which is pixel_shuffle(concat(a, c, b, d, axis=1, interleave), 2): channel 4k + 2i + j
to row 2h + i, column 2w + j. Rank 4 (negative axes alike); each inner concat read by the outer
alone."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored


def _interleaved(op: Operation | None, axis: int) -> tuple[Var, Var] | None:
    """The two values of an interleaved concat along `axis` (of a rank-4 output)."""
    if op is None or op.type != "concat" or op.outputs[0].tensor.rank != 4:
        return None
    values = op.vars("values")
    if "interleave" not in op.inputs or not bool(stored(op.var("interleave"))):
        return None
    if int(np.asarray(stored(op.var("axis")))) % 4 != axis or len(values) != 2:
        return None
    return values[0], values[1]


def run(edit: Editor, options: Options) -> None:
    for outer in edit.ops("concat"):
        halves = _interleaved(outer, 3)
        if halves is None:
            continue
        inner = [v.op for v in halves if v.op is not None]
        found = [_interleaved(op, 2) for op in inner]
        pairs = [p for p in found if p is not None]
        if len(pairs) != 2 or any(edit.sole_reader(v) is not outer for v in halves):
            continue
        (a, b), (c, d) = pairs
        if len({v.type for v in (a, b, c, d)}) != 1:
            continue
        out = outer.outputs[0]
        joined = edit.op(
            "concat",
            edit.fresh(f"{outer.name}_channels"),
            {
                "values": (a, c, b, d),
                "axis": edit.const(f"{outer.name}_axis", np.array(1), DType.INT32, outer),
                "interleave": edit.const(
                    f"{outer.name}_interleave", np.array(True), DType.BOOL, outer
                ),
            },
            outer,
        )
        factor = edit.const(f"{outer.name}_upscale_factor", np.array(2), DType.INT32, outer)
        args = {"x": joined.outputs[0], "upscale_factor": factor}
        new = edit.op("pixel_shuffle", outer.name, args, outer, out=[out.name])
        edit.replace(out, new.outputs[0])
        edit.drop(outer, *inner)


PASS = GraphPass(
    "concat_to_pixel_shuffle",
    "optimize_tensor_operation",
    "nested interleaved concats along H then W become a channel concat and pixel_shuffle(2)",
    run,
    needs=frozenset({"concat"}),
)
