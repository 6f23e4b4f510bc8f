"""use_reflection_padding: a concat along one axis of x's mirrored slices around x itself,
[x[p], ..., x[1], x, x[n-2], ..., x[n-1-q]] along that axis, is pad(x, mode=reflect) by (p, q)
on it (the seed's example: one slice each side of width 1). Each slice must take one index of
x along the axis and all of it along the others (read from slice_by_index's own meaning, on a
probe of indices), and be read by the concat alone."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType
from app.passes import facts
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import stored


def _index(op: Operation, x: Var, axis: int) -> int | None:
    """The one index along `axis` a slice of x takes whole along the other axes, or None."""
    if op.type != "slice_by_index" or op.var("x") is not x:
        return None
    shape = x.tensor.shape
    probe = np.arange(shape[axis], dtype=np.float64).reshape(
        [-1 if i == axis else 1 for i in range(len(shape))]
    )
    values: dict[str, np.ndarray | str] = {}
    for k, v in op.inputs.items():
        if k != "x" and isinstance(v, Var):
            value = stored(v)
            if value is None:
                return None  # a bound computed at run time: no fixed index
            values[v.name] = value
    values[x.name] = np.broadcast_to(probe, shape).copy()
    (result,) = facts.meaning(op, values)
    expected = tuple(1 if i == axis else d for i, d in enumerate(shape))
    if result.shape != expected:
        return None
    first = float(result.reshape(-1)[0])
    return int(first) if np.all(result == first) else None


def run(edit: Editor, options: Options) -> None:
    for concat in edit.ops("concat"):
        parts = concat.vars("values")
        if "interleave" in concat.inputs and bool(stored(concat.var("interleave"))):
            continue
        middles = [v for v in parts if v.op is None or v.op.type != "slice_by_index"]
        if len(middles) != 1 or len(parts) < 2:
            continue
        x = middles[0]
        rank = x.tensor.rank
        axis = int(np.asarray(stored(concat.var("axis")))) % rank
        n = x.tensor.shape[axis]
        at = parts.index(x)
        indices = []
        for v in parts[:at] + parts[at + 1 :]:
            made_by = v.op if edit.sole_reader(v) is concat else None
            index = None if made_by is None else _index(made_by, x, axis)
            indices.append(index)
        if any(i is None for i in indices):
            continue
        before, after = indices[:at], indices[at:]
        if before != list(range(at, 0, -1)) or after != [n - 2 - k for k in range(len(after))]:
            continue
        if at > n - 1 or len(after) > n - 1:  # reflect pads at most n - 1
            continue
        pad = [0, 0] * (rank - axis - 1)
        pad = [at, len(after), *pad]
        out = concat.outputs[0]
        args = {
            "x": x,
            "pad": edit.const(f"{concat.name}_pad", np.array(pad), DType.INT32, concat),
            "mode": edit.const(f"{concat.name}_mode", "reflect", DType.STRING, concat),
        }
        new = edit.op("pad", concat.name, args, concat, out=[out.name])
        edit.replace(out, new.outputs[0])
        edit.drop(concat, *(v.op for v in parts if v is not x and v.op is not None))


PASS = GraphPass(
    "use_reflection_padding",
    "optimize_tensor_operation",
    "a concat of x's mirrored slices around x becomes pad(mode=reflect)",
    run,
    needs=frozenset({"slice_by_index"}),
)
