"""Lowerings of ONNX's data-movement ops: reshape, transpose, squeeze, concat, split, slice,
gather (on indices known at import), expand, tile. Every size, axis and index they take must be
known at import (after shape arithmetic is evaluated): a program has static shapes.
"""

from __future__ import annotations

import math

import numpy as np

from app.errors import RequestError
from app.mil import Var
from app.onnx.lowering import Handler, Lowering, Node, Value


def reshape_to(ctx: Lowering, x: Var, shape: list[int], out: str | None) -> Var:
    if list(x.tensor.shape) == shape and out is None:
        return x
    return ctx.op("reshape", out, x=x, shape=np.array(shape, np.int32))


def reshape(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    target = node.ints(1, "shape")
    allowzero = int(node.attr("allowzero", 0))
    # 0 copies the input's size at that position (unless allowzero); one -1 is inferred
    if (
        any(d < -1 for d in target)
        or target.count(-1) > 1
        or (not allowzero and any(d == 0 and i >= x.tensor.rank for i, d in enumerate(target)))
    ):
        raise RequestError(
            node.field, f"Reshape node {node.label!r}: {list(x.tensor.shape)} to {target}"
        )
    shape = [x.tensor.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or x.tensor.size % known:
            raise RequestError(
                node.field, f"Reshape node {node.label!r}: {list(x.tensor.shape)} to {target}"
            )
        shape[shape.index(-1)] = x.tensor.size // known
    return [reshape_to(ctx, x, shape, node.out[0])]


def flatten(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    rank = x.tensor.rank
    axis = int(node.attr("axis", 1))
    axis = axis + rank if axis < 0 else axis
    shape = x.tensor.shape
    return [reshape_to(ctx, x, [math.prod(shape[:axis]), math.prod(shape[axis:])], node.out[0])]


def transpose(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    rank = x.tensor.rank
    perm = list(node.attr("perm") or range(rank - 1, -1, -1))  # by default, the axes reversed
    if sorted(perm) != list(range(rank)):
        raise RequestError(
            node.field,
            f"Transpose node {node.label!r}: perm {list(perm)} is not an order of the {rank} axes",
        )
    return [ctx.op("transpose", node.out[0], x=x, perm=np.array(perm, np.int32))]


def squeeze(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    axes = node.ints(1, "axes") if node.input(1) is not None else node.attr("axes")
    if axes is None:
        axes = [i for i, d in enumerate(x.tensor.shape) if d == 1]
    axes = sorted(node.axis(a, x.tensor.rank) for a in axes)
    shape = [d for i, d in enumerate(x.tensor.shape) if i not in axes]
    if not shape:
        raise RequestError(
            node.field, f"Squeeze node {node.label!r}: a program holds no rank-0 tensor"
        )
    return [reshape_to(ctx, x, shape, node.out[0])]


def unsqueeze(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    axes = node.ints(1, "axes") if node.input(1) is not None else node.attr("axes")
    rank = x.tensor.rank + len(axes)
    axes = sorted(node.axis(a, rank) for a in axes)
    dims = iter(x.tensor.shape)
    shape = [1 if i in axes else next(dims) for i in range(rank)]
    return [reshape_to(ctx, x, shape, node.out[0])]


def concat(ctx: Lowering, node: Node) -> list[Value]:
    values = [v for v in node.inputs if v is not None]
    rank = len(values[0].shape) if isinstance(values[0], np.ndarray) else values[0].tensor.rank
    axis = node.axis(int(node.attr("axis")), rank)
    parts = tuple(ctx.tensor(v) if isinstance(v, np.ndarray) else v for v in values)
    parts = tuple(p for p in parts if p.tensor.shape[axis] > 0)
    if len(parts) == 1:
        return [parts[0]]
    return [ctx.op("concat", node.out[0], values=parts, axis=axis)]


def split(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    axis = node.axis(int(node.attr("axis", 0)), x.tensor.rank)
    size = x.tensor.shape[axis]
    sizes = node.ints(1, "split sizes") if node.input(1) is not None else node.attr("split")
    if not sizes:
        count = int(node.attr("num_outputs", len(node.out)))
        step = -(-size // count)  # opset 18: the last part is smaller when count does not divide
        sizes = [min(step, size - i * step) for i in range(count)]
    if len(sizes) == 1:
        return [x]
    return list(ctx.ops("split", node.out, x=x, split_sizes=np.array(sizes, np.int32), axis=axis))


def slice_(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    shape = x.tensor.shape
    rank = len(shape)
    starts, ends = node.ints(1, "starts"), node.ints(2, "ends")
    axes = node.ints(3, "axes") if node.input(3) is not None else list(range(len(starts)))
    steps = node.ints(4, "steps") if node.input(4) is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise RequestError(
            node.field,
            f"Slice node {node.label!r}: {len(starts)} starts, {len(ends)} ends, {len(axes)} "
            f"axes and {len(steps)} steps (one of each per axis sliced)",
        )
    begin, end, stride = [0] * rank, list(shape), [1] * rank
    begin_mask, end_mask = [True] * rank, [True] * rank
    for start, stop, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = node.axis(axis, rank)
        if step == 0:
            raise RequestError(node.field, f"Slice node {node.label!r}: a step of 0")
        first, last, step = slice(start, stop, step).indices(shape[axis])  # ONNX clamps as Python
        if len(range(first, last, step)) < 1:
            raise RequestError(
                node.field, f"Slice node {node.label!r}: an empty slice of axis {axis}"
            )
        begin[axis], stride[axis], begin_mask[axis] = first, step, False
        if last >= 0:
            end[axis], end_mask[axis] = last, False
    if all(begin_mask) and all(end_mask) and all(s == 1 for s in stride):
        return [x]
    return [
        ctx.op(
            "slice_by_index",
            node.out[0],
            x=x,
            begin=np.array(begin, np.int32),
            end=np.array(end, np.int32),
            stride=np.array(stride, np.int32),
            begin_mask=np.array(begin_mask),
            end_mask=np.array(end_mask),
        )
    ]


def gather(ctx: Lowering, node: Node) -> list[Value]:
    """Indices known at import: a slice per run of consecutive indices, concatenated; a scalar
    index drops the axis. Indices from the data (an embedding lookup): app/onnx/ops_index.py."""
    x = node.var(0)
    indices = node.known(1, "indices")
    assert indices is not None
    axis = node.axis(int(node.attr("axis", 0)), x.tensor.rank)
    size = x.tensor.shape[axis]
    flat = [int(i) for i in indices.reshape(-1)]
    if any(not -size <= i < size for i in flat):
        raise RequestError(
            node.field, f"Gather node {node.label!r}: an index outside an axis of {size}"
        )
    return [take(ctx, node, x, [i % size for i in flat], axis, list(indices.shape))]


def runs_of(flat: list[int]) -> list[tuple[int, int]]:
    """Consecutive indices as [first, last) runs."""
    runs: list[tuple[int, int]] = []
    for i in flat:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def take(
    ctx: Lowering, node: Node, x: Var, flat: list[int], axis: int, index_shape: list[int]
) -> Var:
    """x at the known indices `flat` (in range) along `axis`, the axis replaced by
    `index_shape`: a slice per run, concatenated, reshaped; named the node's first output."""
    runs = runs_of(flat)
    shape = list(x.tensor.shape)
    out_shape = shape[:axis] + index_shape + shape[axis + 1 :]
    parts = []
    final = len(runs) == 1 and index_shape == [runs[0][1] - runs[0][0]]
    for first, last in runs:
        begin = [0] * len(shape)
        end = list(shape)
        begin[axis], end[axis] = first, last
        parts.append(
            ctx.op(
                "slice_by_index",
                node.out[0] if final else None,
                x=x,
                begin=np.array(begin, np.int32),
                end=np.array(end, np.int32),
            )
        )
    joined = parts[0] if len(parts) == 1 else ctx.op("concat", values=tuple(parts), axis=axis)
    if final:
        return joined
    if not out_shape:
        raise RequestError(
            node.field, f"{node.op_type} node {node.label!r}: a program holds no rank-0 tensor"
        )
    return reshape_to(ctx, joined, out_shape, node.out[0])


def expand(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    target = node.ints(1, "shape")
    shape = list(x.tensor.shape)
    rank = max(len(shape), len(target))
    shape = [1] * (rank - len(shape)) + shape
    target = [1] * (rank - len(target)) + target
    out = [max(a, b) for a, b in zip(shape, target, strict=True)]
    if any(a not in (1, o) for a, o in zip(shape, out, strict=True)):
        raise RequestError(
            node.field,
            f"Expand node {node.label!r}: {list(x.tensor.shape)} does not expand to {target}",
        )
    reps = [o // a for a, o in zip(shape, out, strict=True)]
    if all(r == 1 for r in reps):
        return [reshape_to(ctx, x, out, node.out[0])]
    x = reshape_to(ctx, x, shape, None)
    return [ctx.op("tile", node.out[0], x=x, reps=np.array(reps, np.int32))]


def tile(ctx: Lowering, node: Node) -> list[Value]:
    reps = node.ints(1, "repeats")
    return [ctx.op("tile", node.out[0], x=node.var(0), reps=np.array(reps, np.int32))]


def shape(ctx: Lowering, node: Node) -> list[Value]:
    dims = np.array(node.var(0).tensor.shape, np.int64)
    start, end = node.attr("start", 0), node.attr("end")
    return [dims[start:end]]


def size(ctx: Lowering, node: Node) -> list[Value]:
    return [np.array(node.var(0).tensor.size, np.int64)]


HANDLERS: dict[str, Handler] = {
    "Reshape": reshape,
    "Flatten": flatten,
    "Transpose": transpose,
    "Squeeze": squeeze,
    "Unsqueeze": unsqueeze,
    "Concat": concat,
    "Split": split,
    "Slice": slice_,
    "Gather": gather,
    "Expand": expand,
    "Tile": tile,
    "Shape": shape,
    "Size": size,
}
